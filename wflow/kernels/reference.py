r"""Plain NumPy reference of the attention field and its diagnostics [model §2–4, §6].

Dense ``(H, n, n)`` arrays, written to be read against the model reference (docs/model.md), not to be fast.
The numba kernels of :mod:`wflow.kernels` are tested against this module.

All quantities for one path: tokens ``X`` (n, d), weights ``D`` (H, d, d).
"""

from __future__ import annotations

import numpy as np

#: the multi-head normalisations [model §2] (defined here, the bottom layer; attention and
#: the configuration schema import this tuple)
NORMALIZATIONS = ("head", "joint", "none")
#: the interaction matrices [model §1b]: symmetric (the gradient flow) or any real d×d
INTERACTIONS = ("symmetric", "general")
#: how the heads' outputs combine [model §1b]: averaged (§2) or summed (multi-head attention)
HEAD_COMBINES = ("mean", "sum")
#: the outputs that exist only for symmetric D_h [model §1b] (NaN otherwise)
ENERGY_OUTPUTS = ("energy", "gradient", "dissipation", "dE_dD", "ito_sum")


class Factored:
    r"""A factored stack of matrices :math:`M_h = A_h^\top B_h / \kappa` [model §1b].

    Parameters
    ----------
    A, B : (..., H, r, d) arrays (r ≤ d), the same shape: for an interaction matrix the query
        and key projections (:math:`D_h = W_{Q,h}^\top W_{K,h}/\sqrt{d_{head}}` is
        ``Factored(W_Q, W_K, sqrt(d_head))``); for values :math:`V_h = W_{O,h} W_{V,h}` is
        ``Factored(W_O.swapaxes(-1, -2), W_V)`` (:meth:`values`).
    scale : κ > 0.
    """

    __slots__ = ("A", "B", "scale")

    def __init__(self, A, B, scale=1.0):
        A = np.asarray(A, dtype=float)
        B = np.asarray(B, dtype=float)
        if A.ndim < 2 or A.shape != B.shape:
            raise ValueError(f"Factored: A has shape {A.shape} and B {B.shape}: expected the same "
                             "(..., r, d)")
        if A.shape[-2] > A.shape[-1]:
            raise ValueError(f"Factored: rank r = {A.shape[-2]} > d = {A.shape[-1]}")
        scale = float(scale)
        if not (np.isfinite(scale) and scale > 0):
            raise ValueError(f"Factored: scale = {scale!r}: must be > 0")
        self.A, self.B, self.scale = A, B, scale

    @classmethod
    def values(cls, W_O, W_V):
        r""":math:`V_h = W_{O,h} W_{V,h}` from W_O (..., H, d, r) and W_V (..., H, r, d)."""
        return cls(np.swapaxes(np.asarray(W_O, dtype=float), -1, -2), W_V)

    @property
    def shape(self):
        """The shape of the dense stack (..., H, d, d)."""
        return self.A.shape[:-2] + (self.A.shape[-1],) * 2

    def dense(self):
        r"""The dense stack :math:`A_h^\top B_h / \kappa` (..., H, d, d)."""
        return np.matmul(np.swapaxes(self.A, -1, -2), self.B) / self.scale

    def left(self, X):
        r""":math:`X A_h^\top / \kappa` for X (n, d): (H, n, r) (the scaled queries)."""
        return np.matmul(X, np.swapaxes(self.A, -1, -2)) / self.scale

    def right(self, X):
        r""":math:`X B_h^\top` for X (n, d): (H, n, r) (the keys)."""
        return np.matmul(X, np.swapaxes(self.B, -1, -2))


def _logits(X, D, beta):
    """s^h_ij = β⟨x_i, D_h x_j⟩ (H, n, n), from the r-dimensional projections when factored."""
    if isinstance(D, Factored):
        return beta * np.matmul(D.left(X), np.swapaxes(D.right(X), -1, -2))
    return beta * np.einsum("ia,hab,jb->hij", X, D, X, optimize=True)


def _apply(V, X):
    """V_h x_j for every j: (H, n, d), through the projections when factored."""
    if isinstance(V, Factored):
        return np.matmul(V.right(X), V.A) / V.scale
    return np.einsum("hab,jb->hja", V, X)


def field_reference(X, D, beta=1.0, normalization="head", laplacian_heads=(), causal=False,
                    V=None, weights=None, interaction="symmetric", head_combine="mean",
                    key_bias=None):
    r"""Every field quantity of [model §2–4] from dense matrices.

    .. math::
        s^h_{ij} = \beta\langle x_i, D_h x_j\rangle,\quad
        Z_h(x_i) = \tfrac1n\sum_j e^{s^h_{ij}},\quad
        w_h(x_i) = P_{x_i} a_h(x_i)\ \text{or}\ P_{x_i}(V_h x_i - a_h(x_i))

    Parameters
    ----------
    X : (n, d) tokens on the sphere.
    D : (H, d, d) interaction matrices (symmetric unless ``interaction = "general"``), or a
        :class:`Factored` stack (logits from the r-dimensional projections).
    beta : inverse temperature β > 0.
    normalization : "head" | "joint" | "none".
    laplacian_heads : iterable of 0-based Laplacian head indices.
    causal : token i attends to j <= i (energy-based outputs are then NaN).
    V : (H, d, d) value matrices or a :class:`Factored` stack, or None for tied values
        (V_h = D_h).
    weights : (n,) point masses :math:`w_j \ge 0` [model §5b], or None (uniform 1/n): every
        :math:`\frac1n\sum_j` becomes :math:`\sum_j w_j`, over columns (Z, π) and rows
        (E, 𝒟, G², G²_hm, ∂_D E, Itô sum).
    interaction : "symmetric" | "general" [model §1b]: general D_h has no energy, and
        :data:`ENERGY_OUTPUTS` are NaN (velocity, partition, b̂, G², G²_hm remain).
    head_combine : "mean" (§2) | "sum" (:math:`\sum_h` in place of :math:`\frac1H\sum_h`;
        refused with ``normalization = "joint"``).
    key_bias : (H, n) per-head key logit terms :math:`b_{hj}` [model §1b, §5c], or None:
        :math:`s^h_{ij} + b_{hj}` in the softmax and in :math:`Z_h` (a column weight
        :math:`e^{b_{hj}}` per head); ``interaction = "general"`` only.

    Returns
    -------
    dict with ``velocity`` (n, d) (v, before the sign), ``radial`` (n,) (the radial part
    :math:`\rho_i = \langle x_i, u_i\rangle` of the combined output before the projection,
    :math:`u_i = v_i + \rho_i x_i` [model §1c]), ``partition`` (H, n),
    ``energy``, ``gradient`` (n, d), ``dissipation``, ``b_hat`` (n,), ``G2``,
    ``G2_hm``, ``dE_dD`` (H, d, d) and ``ito_sum`` (the sum
    :math:`\frac{1}{2Hn^2}\sum_{h,i,j} e^{s^h_{ij}}(1+\langle x_i,x_j\rangle^2)`).
    """
    X = np.asarray(X, dtype=float)
    factored = isinstance(D, Factored)
    D = D if factored else np.asarray(D, dtype=float)
    n, d = X.shape
    H = D.shape[-3]
    Vm = D if V is None else V if isinstance(V, Factored) else np.asarray(V, dtype=float)
    if interaction not in INTERACTIONS:
        raise ValueError(f"interaction = {interaction!r}: allowed values are {INTERACTIONS}")
    if head_combine not in HEAD_COMBINES:
        raise ValueError(f"head_combine = {head_combine!r}: allowed values are {HEAD_COMBINES}")
    if head_combine == "sum" and normalization == "joint":
        raise ValueError("head_combine = 'sum' with normalization = 'joint': the joint "
                         "normalisation is a weighted mean of the heads by construction")
    general = interaction == "general"
    lap = np.zeros(H, dtype=bool)
    lap[list(laplacian_heads)] = True
    # relative masses u_j = n w_j (None: uniform, the unweighted expressions below)
    u = None if weights is None else n * np.asarray(weights, dtype=float).reshape(n)

    S = _logits(X, D, beta)  # (H, n, n)
    if key_bias is not None:  # per-head column weights e^{b_hj} [model §5c]
        if not general:
            raise ValueError("key_bias needs interaction = 'general' (no energy with it)")
        S = S + np.broadcast_to(np.asarray(key_bias, dtype=float), (H, n))[:, None, :]
    E_full = np.exp(S)  # unshifted: fine for moderate logits (tests)
    # masked softmax, stabilised by the row maximum
    if causal:
        allowed = np.tril(np.ones((n, n), dtype=bool))
    else:
        allowed = np.ones((n, n), dtype=bool)
    Sm = np.where(allowed, S, -np.inf)
    rowmax = Sm.max(axis=2, keepdims=True)
    Wt = np.where(allowed, np.exp(Sm - rowmax), 0.0)
    if u is not None:
        Wt = Wt * u[None, None, :]
        E_full = E_full * u[None, None, :]  # column-weighted e^{s_ij}
    rowsum = Wt.sum(axis=2, keepdims=True)
    Pi = Wt / rowsum  # (H, n, n)
    Z = (np.exp(rowmax[..., 0]) * rowsum[..., 0]) / n  # (H, n) (masked when causal)

    VX = _apply(Vm, X)  # V_h x_j  (H, n, d)
    A = np.einsum("hij,hja->hia", Pi, VX)  # a_h(x_i)
    Wh = np.where(lap[:, None, None], VX - A, A)  # ℓ_h or a_h
    Rh = np.einsum("hia,ia->hi", Wh, X)  # ρ_h = ⟨x_i, o_h⟩, the radial parts [model §1c]
    Wh = Wh - Rh[..., None] * X[None]  # P_x

    if normalization == "head":
        v = Wh.mean(axis=0)
        rho = Rh.mean(axis=0)
    elif normalization == "joint":
        v = np.einsum("hi,hia->ia", Z, Wh) / Z.sum(axis=0)[:, None]
        rho = (Z * Rh).sum(axis=0) / Z.sum(axis=0)
    elif normalization == "none":
        v = np.einsum("hi,hia->ia", Z, Wh) / H
        rho = (Z * Rh).sum(axis=0) / H
    else:
        raise ValueError(f"normalization = {normalization!r}: allowed values are {NORMALIZATIONS}")
    if head_combine == "sum":
        v = H * v
        rho = H * rho

    out = {"velocity": v, "partition": Z, "radial": rho}
    if general and not causal:  # the quantities of Z and v only [model §1b]
        nan = float("nan")
        rmean = (lambda a: np.mean(a, axis=-1)) if u is None else (lambda a: np.dot(a, u) / n)
        v2 = np.einsum("ia,ia->i", v, v)
        out.update(energy=nan, gradient=np.full_like(X, nan), dissipation=nan,
                   b_hat=1.0 / Z.mean(axis=0), G2=rmean(v2 / (1.0 / Z).mean(axis=0)),
                   G2_hm=rmean(v2 / (1.0 / Z.mean(axis=0))), dE_dD=np.full((H, d, d), nan), ito_sum=nan)
        return out
    if factored:
        D = D.dense()
    if causal:
        nan = float("nan")
        out.update(
            energy=nan, gradient=np.full_like(X, nan), dissipation=nan,
            b_hat=np.full(n, nan), G2=nan, G2_hm=nan,
            dE_dD=np.full((H, d, d), nan), ito_sum=nan,
        )
        return out

    # row means (1/n) Σ_i u_i (·) (None: plain means)
    rmean = (lambda a: np.mean(a, axis=-1)) if u is None else (lambda a: np.dot(a, u) / n)
    Er = E_full if u is None else E_full * u[None, :, None]  # row- and column-weighted
    energy = Er.sum() / (2 * beta * H * n * n)
    DX = np.einsum("hab,jb->hja", D, X)  # D_h x_j
    # g_i = P_x (1/H) Σ_h Z_h(x_i) Σ_j π_ij D_h x_j = P_x (1/(H n)) Σ_h Σ_j e^{s_ij} D_h x_j
    g = np.einsum("hij,hja->ia", E_full, DX) / (H * n)
    g = g - np.einsum("ia,ia->i", g, X)[:, None] * X
    diss = rmean(np.einsum("ia,ia->i", g, v))
    Zbar = Z.mean(axis=0)
    b_hat = 1.0 / Zbar
    m_bar = (1.0 / Z).mean(axis=0)
    v2 = np.einsum("ia,ia->i", v, v)
    G2 = rmean(v2 / m_bar)
    G2_hm = rmean(v2 / b_hat)
    dE_dD = np.einsum("hij,ia,jb->hab", Er, X, X, optimize=True) / (2 * H * n * n)
    C = X @ X.T
    ito_sum = np.einsum("hij,ij->", Er, 1.0 + C**2) / (2 * H * n * n)
    out.update(
        energy=energy, gradient=g, dissipation=diss, b_hat=b_hat, G2=G2, G2_hm=G2_hm,
        dE_dD=dE_dD, ito_sum=ito_sum,
    )
    return out
