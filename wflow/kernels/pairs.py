"""Pair statistics of the clustering diagnostics [model §6], one pass over the pairs.

:func:`pair_statistics` gives, for P token clouds X (P, m, d), the smallest pairwise cosine,
the number of clusters (connected components of c_ij ≥ ``cos_cluster``, union–find) and the
number of pairs i < j with c_ij > ``cos_merge``, without an m × m matrix. Work items are the
paths, each computed by one thread with sums in a fixed order: the same results whatever the
thread count.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit

from wflow.kernels import pool
from wflow.kernels.pool import _enter, _fetch_add, _item_done, _leave, _wait_done, job_counter
from wflow.kernels.target import _OPTS


@njit(**_OPTS)
def _root(parent, i):
    """Root of i in a union–find forest, halving the path on the way."""
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def pair_statistics(X, cos_cluster, cos_merge):
    r"""The pairwise clustering statistics of P token clouds in one pass over the pairs, with
    :math:`c_{ij} = \langle x_i, x_j\rangle` summed in the order k = 0, 1, …, d − 1 (no BLAS: the
    same bits on every machine):

    .. math::
        \min_{i, j} c_{ij},\qquad
        \#\text{components of } \{i \sim j : c_{ij} \ge c_{\text{cluster}}\},\qquad
        \#\{i < j : c_{ij} > c_{\text{merge}}\}

    (the minimum includes i = j, :math:`|x_i|^2`; components by union–find over the pairs
    i < j: union by the smaller root, path halving, the root of i kept while j runs, so an edge
    costs one root search). No m × m Gram matrix is formed; the paths are the work items of a
    job of :mod:`wflow.kernels.pool` (each alone: the same results whatever the thread count).

    Parameters
    ----------
    X : (P, m, d) float64 tokens.
    cos_cluster, cos_merge : float thresholds.

    Returns
    -------
    (min_cos (P,) float64, components (P,) int64, merged pairs i < j (P,) int64)
    """
    X = np.require(X, np.float64, ("C", "W"))
    P = X.shape[0]
    mins = np.empty(P)
    comps = np.empty(P, dtype=np.int64)
    merged = np.empty(P, dtype=np.int64)
    threads = min(numba.get_num_threads(), P)
    pool.run(_pair_statistics, (X, float(cos_cluster), float(cos_merge), job_counter(0, threads),
                                 mins, comps, merged), threads)
    return mins, comps, merged


@njit(nogil=True, **_OPTS)
def _pair_statistics(role, X, cos_cluster, cos_merge, counter, mins, comps, merged):
    """One thread's part of :func:`pair_statistics`: items are paths."""
    master = _enter(role)
    P, m, d = X.shape
    while True:
        p = _fetch_add(counter)
        if p >= P:
            break
        parent = np.empty(m, dtype=np.int64)
        for i in range(m):
            parent[i] = i
        count = m
        low = np.inf
        pairs = 0
        for i in range(m):
            c = 0.0
            for k in range(d):
                c += X[p, i, k] * X[p, i, k]
            low = min(low, c)  # the diagonal |x_i|²
            ra = _root(parent, i)
            for j in range(i + 1, m):
                c = 0.0
                for k in range(d):
                    c += X[p, i, k] * X[p, j, k]
                if c < low:
                    low = c
                if c > cos_merge:
                    pairs += 1
                if c >= cos_cluster:
                    rb = _root(parent, j)
                    if ra != rb:  # union by the smaller root; i's root is the smaller one after
                        if ra < rb:
                            parent[rb] = ra
                        else:
                            parent[ra] = rb
                            ra = rb
                        count -= 1
        mins[p] = low
        comps[p] = count
        merged[p] = pairs
        _item_done(counter)
    if master:
        _wait_done(role, counter, P)
        _leave(role, counter)
