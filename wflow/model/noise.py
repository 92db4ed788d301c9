r"""Token noise: the exact laws of [model §6b] and the Itô term of the energy.

.. math::

    dx_i = \sigma v_i\,dt + \sqrt{2\nu}\,dB_i \quad(B_i \text{ Brownian motion on } S^{d-1}),
    \qquad dE = \sigma\mathcal D\,dt + \nu\sum_i\Delta_{x_i}E\,dt + dM .

Closed forms for tests and studies: the free diffusion (continuous time, and the exact law of
projected Euler–Maruyama after k steps), the stationary law of the cosine of two interacting
tokens, and the expected Itô rate :math:`\nu\sum_i\Delta_{x_i}E` of the energy.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import integrate

__all__ = ["free_moments", "scheme_moments", "scheme_factors", "pair_log_density",
           "pair_moments", "token_ito_rate"]


def free_moments(t, nu, d):
    r""":math:`\mathbb E\langle x(t), x(0)\rangle = e^{-\nu(d-1)t}` and
    :math:`\mathbb E\langle x(t), x(0)\rangle^2 = 1/d + (1 - 1/d)e^{-2\nu d t}` for Brownian
    motion on :math:`S^{d-1}` with generator :math:`\nu\Delta_S` [model §6b].

    Returns
    -------
    (m1, m2) : floats or arrays of the shape of ``t``.
    """
    t = np.asarray(t, dtype=float)
    return np.exp(-nu * (d - 1) * t), 1.0 / d + (1.0 - 1.0 / d) * np.exp(-2.0 * nu * d * t)


def _chi2_mean(f, k):
    r""":math:`\mathbb E f(X)`, :math:`X \sim \chi^2_k`, by quadrature in :math:`y = \sqrt{X/2}`
    (a smooth integrand :math:`2y^{k-1}e^{-y^2}/\Gamma(k/2)` for every k ≥ 1)."""
    c = 2.0 / math.gamma(k / 2.0)
    val, _ = integrate.quad(lambda y: c * y ** (k - 1) * math.exp(-y * y) * f(2.0 * y * y),
                            0.0, np.inf, epsabs=1e-14, epsrel=1e-13, limit=200)
    return val


def scheme_factors(dt, nu, d):
    r"""One free step of projected Euler–Maruyama, :math:`x' = (x + u)/|x + u|`,
    :math:`u = \sqrt{2\nu\Delta t}\,P_x\xi`: with :math:`s = |u|^2 = 2\nu\Delta t\,\chi^2_{d-1}`,

    .. math:: \lambda = \mathbb E(1 + s)^{-1/2}, \qquad \mu = \mathbb E(1 + s)^{-1}, \qquad
        r = \frac{d\mu - 1}{d - 1},

    so that :math:`\mathbb E[x' \mid x] = \lambda x` and the degree-2 harmonics are multiplied
    by r in mean [model §6b]. Returns (λ, r)."""
    a = 2.0 * nu * dt
    lam = _chi2_mean(lambda x: (1.0 + a * x) ** -0.5, d - 1)
    mu = _chi2_mean(lambda x: 1.0 / (1.0 + a * x), d - 1)
    return lam, (d * mu - 1.0) / (d - 1.0)


def scheme_moments(k, dt, nu, d):
    r"""The exact law of projected Euler–Maruyama without a field after k steps:
    :math:`\mathbb E\langle x_k, x_0\rangle = \lambda^k`,
    :math:`\mathbb E\langle x_k, x_0\rangle^2 = 1/d + (1 - 1/d)\,r^k`
    (:func:`scheme_factors`, [model §6b]). Returns (m1, m2)."""
    lam, r = scheme_factors(dt, nu, d)
    k = np.asarray(k, dtype=float)
    return lam**k, 1.0 / d + (1.0 - 1.0 / d) * r**k


def pair_log_density(gamma, d, beta, nu, sigma=-1.0, normalization="head"):
    r"""Unnormalised log of the stationary density of :math:`\gamma = \langle x_1, x_2\rangle`
    for two tokens, one head, :math:`D = V = I` frozen [model §6b]:

    .. math::
        q(\gamma) \propto (1 - \gamma^2)^{(d-3)/2}\,e^{\sigma\Phi(\gamma)/\nu},\qquad
        \Phi = \tfrac1\beta\log(e^\beta + e^{\beta\gamma})\ (\text{head, joint}),\quad
        \Phi = \tfrac{e^{\beta\gamma}}{2\beta}\ (\text{none}).
    """
    g = np.asarray(gamma, dtype=float)
    return 0.5 * (d - 3) * np.log1p(-g * g) + sigma * _phi(g, beta, normalization) / nu


def pair_moments(d, beta, nu, sigma=-1.0, normalization="head", powers=(1, 2)):
    r""":math:`\int\gamma^m q(\gamma)\,d\gamma` for each m of ``powers``, q the normalised
    density of :func:`pair_log_density`, by quadrature in :math:`\gamma = \cos\theta`, where
    :math:`q\,d\gamma \propto \sin^{d-2}\theta\,e^{\sigma\Phi(\cos\theta)/\nu}\,d\theta`
    is smooth for every d ≥ 2."""
    th = np.linspace(0.0, math.pi, 401)
    shift = float(np.max(sigma * _phi(np.cos(th), beta, normalization) / nu))

    def w(theta):
        return math.sin(theta) ** (d - 2) * math.exp(
            float(sigma * _phi(math.cos(theta), beta, normalization) / nu) - shift)

    quad = lambda f: integrate.quad(f, 0.0, math.pi, epsabs=1e-13, epsrel=1e-12, limit=200)[0]
    Z = quad(w)
    return tuple(quad(lambda t, m=m: math.cos(t) ** m * w(t)) / Z for m in powers)


def _phi(g, beta, normalization):
    r""":math:`\Phi(\gamma)` of :func:`pair_log_density`."""
    if normalization in ("head", "joint"):
        return np.logaddexp(beta, beta * np.asarray(g, dtype=float)) / beta
    if normalization == "none":
        return np.exp(beta * np.asarray(g, dtype=float)) / (2.0 * beta)
    raise ValueError(f"normalization = {normalization!r}: allowed values are head, joint, none")


def token_ito_rate(X, D, beta, nu):
    r"""The expected Itô rate of the energy under token noise [model §6b],

    .. math::
        \nu\sum_i\Delta_{x_i}E = \frac{\nu}{2\beta Hn^2}\sum_h\Big[
        2\sum_{i\ne j}e^{s^h_{ij}}\big(\beta^2|P_{x_i}D_hx_j|^2 - (d-1)s^h_{ij}\big)
        + \sum_i e^{s^h_{ii}}\big(4\beta^2|P_{x_i}D_hx_i|^2 + 2\beta\operatorname{tr}D_h
        - 2d\,s^h_{ii}\big)\Big],

    dense NumPy, :math:`O(Hn^2d)` per path.

    Parameters
    ----------
    X : (n, d) or (P, n, d) unit tokens.
    D : (H, d, d) or (P, H, d, d) symmetric weights.
    beta, nu : inverse temperature β, diffusion ν.

    Returns
    -------
    float, or (P,) for batched X.
    """
    X = np.asarray(X, dtype=float)
    D = np.asarray(D, dtype=float)
    batched = X.ndim == 3
    Xb = X if batched else X[None]
    Db = D if D.ndim == 4 else np.broadcast_to(D, (Xb.shape[0],) + D.shape)
    P, n, d = Xb.shape
    H = Db.shape[1]
    out = np.empty(P)
    for p in range(P):
        x = Xb[p]
        A = np.einsum("hab,jb->hja", Db[p], x)  # a_j = D_h x_j, (H, n, d)
        c = np.einsum("ia,hja->hij", x, A)  # <x_i, D_h x_j>
        s = beta * c
        e = np.exp(s)
        a2 = np.sum(A * A, axis=-1)  # |D_h x_j|^2, (H, n)
        pair = e * (beta**2 * (a2[:, None, :] - c * c) - (d - 1) * s)
        diag = np.arange(n)
        total = 2.0 * (pair.sum() - pair[:, diag, diag].sum())
        sii, eii, cii = s[:, diag, diag], e[:, diag, diag], c[:, diag, diag]
        tr = np.trace(Db[p], axis1=-2, axis2=-1)[:, None]
        total += np.sum(eii * (4 * beta**2 * (a2 - cii * cii) + 2 * beta * tr - 2 * d * sii))
        out[p] = nu * total / (2.0 * beta * H * n * n)
    return out if batched else float(out[0])
