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


def field_reference(X, D, beta=1.0, normalization="head", laplacian_heads=(), causal=False,
                    V=None, weights=None):
    r"""Every field quantity of [model §2–4] from dense matrices.

    .. math::
        s^h_{ij} = \beta\langle x_i, D_h x_j\rangle,\quad
        Z_h(x_i) = \tfrac1n\sum_j e^{s^h_{ij}},\quad
        w_h(x_i) = P_{x_i} a_h(x_i)\ \text{or}\ P_{x_i}(V_h x_i - a_h(x_i))

    Parameters
    ----------
    X : (n, d) tokens on the sphere.
    D : (H, d, d) symmetric interaction matrices.
    beta : inverse temperature β > 0.
    normalization : "head" | "joint" | "none".
    laplacian_heads : iterable of 0-based Laplacian head indices.
    causal : token i attends to j <= i (energy-based outputs are then NaN).
    V : (H, d, d) value matrices, or None for tied values (V_h = D_h).
    weights : (n,) point masses :math:`w_j \ge 0` [model §5b], or None (uniform 1/n): every
        :math:`\frac1n\sum_j` becomes :math:`\sum_j w_j`, over columns (Z, π) and rows
        (E, 𝒟, G², G²_hm, ∂_D E, Itô sum).

    Returns
    -------
    dict with ``velocity`` (n, d) (v, before the sign), ``partition`` (H, n),
    ``energy``, ``gradient`` (n, d), ``dissipation``, ``b_hat`` (n,), ``G2``,
    ``G2_hm``, ``dE_dD`` (H, d, d) and ``ito_sum`` (the sum
    :math:`\frac{1}{2Hn^2}\sum_{h,i,j} e^{s^h_{ij}}(1+\langle x_i,x_j\rangle^2)`).
    """
    X = np.asarray(X, dtype=float)
    D = np.asarray(D, dtype=float)
    n, d = X.shape
    H = D.shape[0]
    Vm = D if V is None else np.asarray(V, dtype=float)
    lap = np.zeros(H, dtype=bool)
    lap[list(laplacian_heads)] = True
    # relative masses u_j = n w_j (None: uniform, the unweighted expressions below)
    u = None if weights is None else n * np.asarray(weights, dtype=float).reshape(n)

    S = beta * np.einsum("ia,hab,jb->hij", X, D, X, optimize=True)  # (H, n, n)
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

    VX = np.einsum("hab,jb->hja", Vm, X)  # V_h x_j  (H, n, d)
    A = np.einsum("hij,hja->hia", Pi, VX)  # a_h(x_i)
    Wh = np.where(lap[:, None, None], VX - A, A)  # ℓ_h or a_h
    Wh = Wh - np.einsum("hia,ia->hi", Wh, X)[..., None] * X[None]  # P_x

    if normalization == "head":
        v = Wh.mean(axis=0)
    elif normalization == "joint":
        v = np.einsum("hi,hia->ia", Z, Wh) / Z.sum(axis=0)[:, None]
    elif normalization == "none":
        v = np.einsum("hi,hia->ia", Z, Wh) / H
    else:
        raise ValueError(f"normalization = {normalization!r}: allowed values are {NORMALIZATIONS}")

    out = {"velocity": v, "partition": Z}
    if causal:
        nan = float("nan")
        out.update(
            energy=nan, gradient=np.full_like(X, nan), dissipation=nan,
            b_hat=np.full(n, nan), G2=nan, G2_hm=nan,
            dE_dD=np.full_like(D, nan), ito_sum=nan,
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
