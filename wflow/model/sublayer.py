"""The multi-head attention sub-layer of a transformer, as the reference the imported models and
the layer-norm placements are checked against [model §1b]: dense, NumPy, float64."""

from __future__ import annotations

import numpy as np

from wflow.kernels.reference import Factored

__all__ = ["attention_update"]


def attention_update(X, D, V, *, beta=1.0, key_bias=None, drift=None, causal=False):
    r"""The output of a multi-head attention sub-layer [model §1b]:

    .. math::
        u_i = c + \sum_h V_h \sum_j \pi^h_{ij} x_j, \qquad
        \pi^h_{ij} = \frac{e^{\beta\langle x_i, D_h x_j\rangle + b_{hj}}}
                          {\sum_{k} e^{\beta\langle x_i, D_h x_k\rangle + b_{hk}}},

    heads summed, no tangent projection, the tokens taken as they are (hidden states need not
    be unit vectors). With ``D = Factored(W_Q, W_K, sqrt(d_head))`` and
    ``V = Factored.values(W_O, W_V)`` this is :math:`\sum_h W_{O,h}\,\mathrm{softmax}
    (Q_h K_h^\top/\sqrt{d_{head}})\, X W_{V,h}^\top`, computed from the r-dimensional
    projections (cost :math:`H n^2 r`). NumPy, float64.

    Parameters
    ----------
    X : (n, d) tokens.
    D : (H, d, d) interaction matrices (any real) or a :class:`Factored` stack ((H, r, d)).
    V : (H, d, d) value matrices or a :class:`Factored` stack.
    beta : β > 0 (1 for a transformer, whose 1/√d_head is the Factored scale).
    key_bias : (H, n) per-key logit biases b_hj, (n,) shared by the heads, or None.
    drift : (d,) constant vector c (the value and output biases), or None.
    causal : token i attends to j ≤ i.

    Returns
    -------
    (n, d) array u.
    """
    from wflow.kernels.reference import _logits

    X = np.asarray(X, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"X has shape {X.shape}: expected (n, d)")
    n, d = X.shape
    if not isinstance(D, Factored):
        D = np.asarray(D, dtype=float)
    if not isinstance(V, Factored):
        V = np.asarray(V, dtype=float)
    for name, M in (("D", D), ("V", V)):
        if len(M.shape) != 3 or M.shape[1:] != (d, d):
            raise ValueError(f"{name} has shape {M.shape}: expected (H, {d}, {d}) (dense) or a "
                             f"Factored stack of (H, r, {d})")
    H = D.shape[0]
    if V.shape[0] != H:
        raise ValueError(f"V has {V.shape[0]} heads, D has {H}")
    if not (np.isfinite(beta) and beta > 0):
        raise ValueError(f"beta = {beta!r}: must be > 0")
    S = _logits(X, D, float(beta))  # (H, n, n)
    if key_bias is not None:
        b = np.asarray(key_bias, dtype=float)
        if b.shape not in ((n,), (H, n)):
            raise ValueError(f"key_bias has shape {b.shape}: expected ({H}, {n}) or ({n},)")
        S = S + np.broadcast_to(b, (H, n))[:, None, :]
    if causal:
        S = np.where(np.tril(np.ones((n, n), dtype=bool)), S, -np.inf)
    S = S - S.max(axis=2, keepdims=True)
    W = np.exp(S)
    Pi = W / W.sum(axis=2, keepdims=True)
    if isinstance(V, Factored):  # W_O,h (Π_h (X W_V,hᵀ)): r-dimensional
        u = np.matmul(np.matmul(Pi, V.right(X)), V.A).sum(axis=0) / V.scale
    else:
        u = np.matmul(np.matmul(Pi, X), np.swapaxes(V, -1, -2)).sum(axis=0)
    if drift is not None:
        c = np.asarray(drift, dtype=float)
        if c.shape != (d,):
            raise ValueError(f"drift has shape {c.shape}: expected ({d},)")
        u = u + c
    return u
