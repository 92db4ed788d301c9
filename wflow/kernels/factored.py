r"""The field of factored interaction matrices :math:`D_h = A_h^\top B_h/\kappa` of rank
r < d [model §1b], from the r-dimensional projections.

.. math::
    Q_h = \tfrac{\beta}{\kappa} X A_h^\top,\quad K_h = X B_h^\top,\quad
    s^h_{ij} = (Q_h K_h^\top)_{ij},\quad
    a_h(x_i) = \frac{\sum_j u_j e^{s^h_{ij}} V_h x_j}{\sum_j u_j e^{s^h_{ij}}},

with factored values :math:`V_h = W_{O,h} W_{V,h}` applied as
:math:`W_{O,h}\,(\Pi_h\, X W_{V,h}^\top)`: every product costs :math:`n^2 r` or :math:`n d r`
per head instead of :math:`n^2 d` or :math:`n d^2`. Only the quantities of Z and v exist
for general D (velocity, partition, b̂, G², G²_hm); the others are NaN.

Per path: each head (an item) projects and averages by blocks of rows; the heads' averages
:math:`\bar Y_h = \Pi_h Y_h` (for a Laplacian head :math:`Y_h - \bar Y_h`) are weighted by
the head weights :math:`c_h(x_i)` of §2 and go through one output product
:math:`[c_1\bar Y_1, \dots, c_H\bar Y_H]\,[W_{O,1}; \dots; W_{O,H}]^\top/\kappa_V` (items of
:data:`OUT_BLOCK` rows), and the tangent projection, linear, is applied once:
:math:`v_i = P_{x_i} u_i`.

Determinism: per path, items of a fixed size (heads, blocks of output rows) on
:func:`~wflow.kernels.pool.get_num_threads` Python threads, each item's arithmetic the same
on any of them, blocks of :data:`ROW_BLOCK` rows, single-threaded BLAS (threadpoolctl) and
NumPy reductions in a fixed order: the bits do not depend on the thread counts or on the
path batch. Rows are shifted by their maxima (no overflow of the softmax; Z itself is the
unshifted mean).
"""

from __future__ import annotations

import contextlib

import numpy as np

from wflow.kernels.blas import _blas_executor, _blas_limits
from wflow.kernels.fused import FieldPass, _key_bias_array, _path_mobility
from wflow.kernels.pool import _num_threads

__all__ = ["factored_pass", "ROW_BLOCK", "OUT_BLOCK"]

#: rows of one block of logits (a block holds ROW_BLOCK × n floats per head)
ROW_BLOCK = 512
#: rows of one item of the output product (fixed: the bits do not depend on the threads)
OUT_BLOCK = 128


def _items(fn, count, nt):
    """``fn(0), ..., fn(count − 1)``, independent items, on ``min(nt, count)`` threads."""
    if nt > 1 and count > 1:
        for _ in _blas_executor(min(nt, count)).map(fn, range(count)):
            pass
    else:
        for i in range(count):
            fn(i)


def _per_path(M, P):
    """(P, H, r, d) from (H, r, d) or (P, H, r, d)."""
    M = np.asarray(M, dtype=float)
    return np.broadcast_to(M, (P,) + M.shape[-3:]) if M.ndim == 3 else M


def factored_pass(X, A, B, scale, V, beta, norm, laplacian_mask, causal, weights=None,
                  key_bias=None, radial=None):
    r"""Velocity, partition, b̂, G² and G²_hm of factored D_h = A_hᵀB_h/κ [model §1b].

    .. math::
        s^h_{ij} = \tfrac{\beta}{\kappa}\langle A_h x_i, B_h x_j\rangle + b_{hj},\qquad
        Z_h(x_i) = \frac1n\sum_j u_j e^{s^h_{ij}},

    with the per-head key logit terms :math:`b_{hj}` (``key_bias``, 0 when None).

    Parameters
    ----------
    X : (P, n, d) unit tokens.
    A, B : (H, r, d) or (P, H, r, d) projections; scale : κ > 0.
    V : ``("dense", (P, H, d, d))`` value matrices or ``("factored", VA, VB, vscale)`` with
        :math:`V_h = VA_h^\top VB_h / vscale` ((H, r', d) or (P, H, r', d) each).
    beta : β > 0; norm : "head" | "joint" | "none"; laplacian_mask : (H,) bool.
    causal : token i attends to j ≤ i (b̂, G², G²_hm are then NaN, as for the other passes).
    weights : (P, n) or (n,) point masses, or None (1/n).
    key_bias : (P, H, n) or (H, n) per-head key logit terms :math:`b_{hj}` [model §1b], or
        None; added to every row of the head's logits before the row maximum.
    radial : None, or a (P, n) array that receives :math:`\rho_i = \langle x_i, u_i\rangle`,
        the radial part of the combined output before the projection [model §1c] (the
        product the projection forms).

    Returns
    -------
    :class:`~wflow.kernels.fused.FieldPass`; gradient, energy, dissipation, ∂_D E and the
    Itô sum are NaN.
    """
    X = np.ascontiguousarray(X, dtype=float)
    P, n, d = X.shape
    A, B = _per_path(A, P), _per_path(B, P)
    H = A.shape[1]
    lap = np.zeros(H, dtype=bool)
    lap[:] = np.asarray(laplacian_mask, dtype=bool).reshape(-1) if np.size(laplacian_mask) else False
    dense_v = V[0] == "dense"
    if dense_v:  # a_h = Ȳ_h V_hᵀ with Y = X: the right factors V_hᵀ, stacked (H d, d)
        Vd = np.broadcast_to(np.asarray(V[1], dtype=float), (P, H, d, d))
        rv = d
    else:  # a_h = Ȳ_h W_O,hᵀ/κ_V with Y_h = X W_V,hᵀ: the right factors VA_h/κ_V (H r', d)
        VA, VB, vscale = _per_path(V[1], P), _per_path(V[2], P), float(V[3])
        rv = VA.shape[2]
    U = None
    if weights is not None:
        U = n * np.broadcast_to(np.asarray(weights, dtype=float), (P, n))
    kb = None
    if key_bias is not None:
        kb = _key_bias_array(key_bias, P, H, n)
    c = float(beta) / float(scale)
    vel = np.empty((P, n, d))
    part = np.empty((P, H, n))
    nan = np.full
    bhat, G2, G2hm = nan((P, n), np.nan), nan(P, np.nan), nan(P, np.nan)
    code = {"head": 0, "joint": 1, "none": 2}.get(norm, norm)
    nt = max(1, _num_threads())
    limits = _blas_limits()
    with limits if limits is not None else contextlib.nullcontext():
        for p in range(P):
            x = X[p]
            Ybar = np.empty((n, H, rv))

            def head(h, p=p, x=x, Ybar=Ybar):  # its projections, then Π_h Y_h by row blocks
                Q = (x @ A[p, h].T) * c  # (n, r)
                K = x @ B[p, h].T  # (n, r)
                Y = x if dense_v else x @ VB[p, h].T  # X W_Vᵀ (n, r')
                for i0 in range(0, n, ROW_BLOCK):
                    i1 = min(n, i0 + ROW_BLOCK)
                    m = i1 if causal else n
                    L = Q[i0:i1] @ K[:m].T
                    if kb is not None:
                        L += kb[p, h, :m]
                    if causal:
                        L[np.triu_indices(i1 - i0, k=i0 + 1, m=m)] = -np.inf
                    mx = L.max(axis=1)
                    L -= mx[:, None]
                    np.exp(L, out=L)
                    if U is not None:
                        L *= U[p, :m]
                    s0 = L.sum(axis=1)
                    part[p, h, i0:i1] = np.exp(mx) * s0 / n
                    Ybar[i0:i1, h] = (L @ Y[:m]) / s0[:, None]
                if lap[h]:  # ℓ_h = V_h x_i − a_h: (Y − Ȳ_h) through the same right factor
                    Ybar[:, h] = Y - Ybar[:, h]

            _items(head, H, nt)
            Z = part[p]  # (H, n)
            zsum = np.zeros(n)
            for h in range(H):
                zsum += Z[h]
            # the head weights c_h(x_i) of §2, on Ȳ before the one output product
            if code == 0:
                Ybar *= 1.0 / H
            elif code == 1:
                Ybar *= (Z / zsum).T[:, :, None]
            else:
                Ybar *= (Z / H).T[:, :, None]
            if dense_v:
                R = np.swapaxes(Vd[p], -1, -2).reshape(H * d, d)
            else:
                R = VA[p].reshape(H * rv, d) / vscale
            Yc = Ybar.reshape(n, H * rv)

            def rows(b, p=p, x=x, Yc=Yc, R=R):  # fixed blocks of OUT_BLOCK rows
                i0, i1 = b * OUT_BLOCK, min(n, (b + 1) * OUT_BLOCK)
                u = Yc[i0:i1] @ R
                # the tangent projection once (linear: Σ_h c_h P_x o_h = P_x Σ_h c_h o_h)
                rho = np.einsum("ia,ia->i", u, x[i0:i1])
                if radial is not None:
                    radial[p, i0:i1] = rho
                u -= rho[:, None] * x[i0:i1]
                vel[p, i0:i1] = u

            _items(rows, -(-n // OUT_BLOCK), nt)
            if not causal:
                uw = np.full(n, 1.0) if U is None else U[p]
                bhat[p], G2[p], G2hm[p] = _path_mobility(vel[p], part[p], zsum, uw)
    return FieldPass(vel, part, nan((P, n, d), np.nan), bhat, nan(P, np.nan), nan(P, np.nan),
                     G2, G2hm, nan((P, H, d, d), np.nan), nan(P, np.nan))
