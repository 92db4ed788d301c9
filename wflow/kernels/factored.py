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

Determinism: per path, per head in order and per block of :data:`ROW_BLOCK` rows, single
threaded BLAS (threadpoolctl) and NumPy reductions in a fixed order: the bits do not depend
on the thread counts or on the path batch. Rows are shifted by their maxima (no overflow
of the softmax; Z itself is the unshifted mean).
"""

from __future__ import annotations

import contextlib

import numpy as np

from wflow.kernels.blas import _blas_limits
from wflow.kernels.fused import FieldPass

__all__ = ["factored_pass", "ROW_BLOCK"]

#: rows of one block of logits (a block holds ROW_BLOCK × n floats per head)
ROW_BLOCK = 512


def _per_path(M, P):
    """(P, H, r, d) from (H, r, d) or (P, H, r, d)."""
    M = np.asarray(M, dtype=float)
    return np.broadcast_to(M, (P,) + M.shape[-3:]) if M.ndim == 3 else M


def factored_pass(X, A, B, scale, V, beta, norm, laplacian_mask, causal, weights=None,
                  key_bias=None):
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
    if V[0] == "dense":
        Vd = np.broadcast_to(np.asarray(V[1], dtype=float), (P, H, d, d))
    else:
        VA, VB, vscale = _per_path(V[1], P), _per_path(V[2], P), float(V[3])
    U = None
    if weights is not None:
        U = n * np.broadcast_to(np.asarray(weights, dtype=float), (P, n))
    kb = None
    if key_bias is not None:
        kb = np.asarray(key_bias, dtype=float)
        if kb.shape not in ((H, n), (P, H, n)):
            raise ValueError(f"key_bias has shape {kb.shape}: expected ({H}, {n}) or "
                             f"({P}, {H}, {n})")
        kb = np.broadcast_to(kb, (P, H, n))
    c = float(beta) / float(scale)
    vel = np.empty((P, n, d))
    part = np.empty((P, H, n))
    nan = np.full
    bhat, G2, G2hm = nan((P, n), np.nan), nan(P, np.nan), nan(P, np.nan)
    limits = _blas_limits()
    with limits if limits is not None else contextlib.nullcontext():
        for p in range(P):
            x = X[p]
            acc = np.zeros((n, d))
            zsum = np.zeros(n)
            for h in range(H):
                Q = (x @ A[p, h].T) * c  # (n, r)
                K = x @ B[p, h].T  # (n, r)
                if V[0] == "dense":
                    Y = x  # Π X, then V_hᵀ
                    VX = x @ Vd[p, h].T if lap[h] else None
                else:
                    Y = x @ VB[p, h].T  # X W_Vᵀ (n, r')
                    VX = (Y @ VA[p, h]) / vscale if lap[h] else None
                Ybar = np.empty((n, Y.shape[1]))
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
                    Ybar[i0:i1] = (L @ Y[:m]) / s0[:, None]
                a = Ybar @ Vd[p, h].T if V[0] == "dense" else (Ybar @ VA[p, h]) / vscale
                w = VX - a if lap[h] else a
                w -= np.einsum("ia,ia->i", w, x)[:, None] * x
                Z = part[p, h]
                if norm != "head":
                    w *= Z[:, None]
                acc += w
                zsum += Z
            vel[p] = acc / (zsum[:, None] if norm == "joint" else H)
            if not causal:
                Zbar = zsum / H
                bhat[p] = 1.0 / Zbar
                mbar = (1.0 / part[p]).mean(axis=0)
                v2 = np.einsum("ia,ia->i", vel[p], vel[p])
                u = np.full(n, 1.0) if U is None else U[p]
                G2[p] = (v2 / mbar) @ u / n
                G2hm[p] = (v2 / bhat[p]) @ u / n
    return FieldPass(vel, part, nan((P, n, d), np.nan), bhat, nan(P, np.nan), nan(P, np.nan),
                     G2, G2hm, nan((P, H, d, d), np.nan), nan(P, np.nan))
