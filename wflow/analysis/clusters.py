r"""The cluster count of a token cloud on all its tokens, by a grid of cells [model §8].

The clusters are the connected components of the graph

.. math:: i \sim j \iff \langle x_i, x_j\rangle \ge \cos\alpha
          \iff \lvert x_i - x_j\rvert \le r = \sqrt{2 - 2\cos\alpha}

on unit vectors :math:`x_i \in \mathbb R^D` (D = 2: S¹, D = 3: S²), the graph of
:func:`wflow.model.diagnostics.n_clusters`, which visits every pair (O(n²); above
``diagnostics.max_pairwise_n`` tokens it counts a subsample). Here the ambient cube is cut
into cells of side :math:`s = r/\sqrt D`: two tokens of one cell are at most the cell's
diagonal :math:`s\sqrt D = r` apart, so every occupied cell is a clique, and the components
are those of the graph on the occupied cells in which two cells are joined when one pair of
their tokens is. Only cells whose boxes lie within r of each other can be joined (offsets
:math:`|o_i| \le 2` with :math:`\sum_i \max(|o_i| - 1, 0)^2 \le D`); a pair of cells
already in one component is not examined (union–find), and a pair is examined by the
nearest neighbour of the smaller cell's tokens among the larger cell's (a k-d tree), then
that pair's inner product against :math:`\cos\alpha`. Cost O(n log n) for the cells and the
trees, plus the examined cell pairs: the same count as the pairwise one, on all n tokens.
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["cluster_count"]

#: cells with at most this many token pairs between them are examined by all their inner
#: products, larger ones by a k-d tree
_DIRECT_PAIRS = 4096
#: the cell side's margin below r/√D (a pair of one cell is then within r despite round-off)
_MARGIN = 1e-9


def _offsets(D):
    """The half of the cell offsets o ≠ 0 (first nonzero entry positive) whose boxes can hold
    tokens within r: :math:`|o_i| \\le 2`, :math:`\\sum_i \\max(|o_i| - 1, 0)^2 \\le D`."""
    out = []
    for o in itertools.product(range(-2, 3), repeat=D):
        nz = [v for v in o if v]
        if not nz or nz[0] < 0:
            continue
        if sum(max(abs(v) - 1, 0) ** 2 for v in o) <= D:
            out.append(o)
    return np.array(out, dtype=np.int64)


def _find(parent, a):
    while parent[a] != a:
        parent[a] = parent[parent[a]]
        a = parent[a]
    return a


def _sizes_one(X, cos_a):
    """The sizes (token counts) of the components, in no particular order."""
    from scipy.spatial import cKDTree

    n, D = X.shape
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    r = np.sqrt(max(2.0 - 2.0 * cos_a, 0.0))
    s = r / np.sqrt(D) * (1.0 - _MARGIN)
    K = int(np.ceil(1.0 / s)) + 3  # cell coordinates lie in [-K, K]
    B = 2 * K + 1
    cells = np.floor(X / s).astype(np.int64) + K
    weights = B ** np.arange(D, dtype=np.int64)
    code = cells @ weights
    keys, inv = np.unique(code, return_inverse=True)
    m = len(keys)
    order = np.argsort(inv, kind="stable")
    starts = np.searchsorted(inv[order], np.arange(m + 1))
    members = [order[starts[c]:starts[c + 1]] for c in range(m)]
    # the candidate cell pairs, offset by offset
    pa, pb = [], []
    for o in _offsets(D):
        nb = keys + int(o @ weights)
        j = np.searchsorted(keys, nb)
        j[j == m] = 0
        hit = keys[j] == nb
        pa.append(np.nonzero(hit)[0])
        pb.append(j[hit])
    pa = np.concatenate(pa) if pa else np.zeros(0, np.int64)
    pb = np.concatenate(pb) if pb else np.zeros(0, np.int64)
    parent = list(range(m))
    trees = {}
    for a, b in zip(pa.tolist(), pb.tolist()):
        ra, rb = _find(parent, a), _find(parent, b)
        if ra == rb:
            continue
        A, Bm = members[a], members[b]
        if len(A) > len(Bm):
            A, Bm, b = Bm, A, a
        if len(A) * len(Bm) <= _DIRECT_PAIRS:
            joined = bool(np.max(X[A] @ X[Bm].T) >= cos_a)
        else:
            tree = trees.get(b)
            if tree is None:
                tree = trees[b] = cKDTree(X[Bm])
            _, k = tree.query(X[A], k=1)
            joined = bool(np.max(np.einsum("ij,ij->i", X[A], X[Bm[k]])) >= cos_a)
        if joined:
            parent[ra] = rb
    roots = np.array([_find(parent, c) for c in range(m)], dtype=np.int64)
    sizes = np.bincount(roots, weights=np.diff(starts), minlength=m)
    return sizes[np.unique(roots)].astype(np.int64)


def cluster_count(X, angle=0.1, min_fraction=0.0):
    r"""The number of connected components of :math:`\langle x_i, x_j\rangle \ge \cos\alpha`
    on all tokens, by a grid of cells (module docstring): the count of
    :func:`wflow.model.diagnostics.n_clusters` with no ``max_n``; with ``min_fraction`` > 0
    only the components of at least ``min_fraction`` n tokens (single tokens and small groups
    not yet joined to a cluster left out).

    Parameters
    ----------
    X : (n, D) or (P, n, D) array of unit vectors, D = 2 (S¹) or 3 (S²) (any D ≥ 1 works;
        the offsets grow as 5^D).
    angle : float
        α in radians (``diagnostics.cluster_angle``), 0 < α < π.
    min_fraction : float
        The smallest component counted, as a fraction of n (0: every component).

    Returns
    -------
    int, or a (P,) float array for a (P, n, D) input (as the ``n_clusters`` series).
    """
    X = np.asarray(X, dtype=float)
    if not 0.0 < angle < np.pi:
        raise ValueError(f"cluster_count: angle = {angle}; must lie in (0, pi)")
    def count(x):
        return int(np.count_nonzero(_sizes_one(x, np.cos(angle)) >= min_fraction * len(x)))

    if X.ndim == 2:
        return count(X)
    if X.ndim != 3:
        raise ValueError(f"cluster_count: X has shape {X.shape}; expected (n, D) or (P, n, D)")
    return np.array([count(x) for x in X], dtype=float)
