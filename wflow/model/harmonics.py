r"""The harmonic power of a token cloud per degree [model §8], and its configuration key
``diagnostics.harmonic_degree``.

On :math:`S^2`, with the complex orthonormal spherical harmonics
:math:`Y_{\ell m}` (:math:`\int_{S^2}\lvert Y_{\ell m}\rvert^2 = 1`),

.. math:: P_\ell = \sum_{m=-\ell}^{\ell}\Big\lvert\frac1n\sum_j Y_{\ell m}(x_j)\Big\rvert^2,
          \qquad \ell = 1, \dots, L;

on :math:`S^1`, :math:`x = (\cos\theta, \sin\theta)`,
:math:`P_k = \lvert\frac1n\sum_j e^{ik\theta_j}\rvert^2`, k = 1, …, L. A degree's power is the
same for real orthonormal harmonics (a unitary change of basis within the degree). By the
addition theorem a single point has :math:`P_\ell = (2\ell+1)/(4\pi)` (S¹: 1), and n
independent uniform points have :math:`\mathbb E P_\ell = (2\ell+1)/(4\pi n)` (S¹: 1/n), so

.. math:: q_\ell = \frac{P_\ell}{P_\ell^{\rm point}},\qquad
          P_\ell^{\rm point} = \frac{2\ell+1}{4\pi}\ (S^2),\ 1\ (S^1)

(:func:`point_power`), the power per component relative to a point mass, lies in [0, 1] with
mean 1/n for a uniform draw in every degree. For a density :math:`\bar\rho(1 + a\varphi)`,
:math:`\varphi` one harmonic of degree ℓ of mean square 1, :math:`q_\ell = a^2/(2\ell+1)`
(S²; S¹ :math:`\varphi = \cos k\theta`: :math:`q_k = a^2/4`).

Cost O(n L²) per path (S¹: O(n L)), by the recurrences of :func:`harmonic_power`, in blocks
of :data:`BLOCK` tokens.
"""

from __future__ import annotations

import numpy as np

from wflow.params import Integer, Param, When, bad, declare

__all__ = ["harmonic_power", "point_power", "legendre_tables", "BLOCK"]

#: tokens per block of the S² recurrence (its working array is (L + 1, L + 1, BLOCK))
BLOCK = 1 << 14


def point_power(L, d):
    r"""The power :math:`P_\ell` of a single point, ℓ = 1..L: :math:`(2\ell+1)/(4\pi)` on S²
    (``d`` = 3), 1 on S¹ (``d`` = 2) [model §8]."""
    ell = np.arange(1, int(L) + 1)
    return (2 * ell + 1) / (4 * np.pi) if d == 3 else np.ones(ell.size)


def legendre_tables(L):
    r"""The coefficients of the recurrence of :math:`Q_{\ell m}`, where
    :math:`Y_{\ell m}(x) = Q_{\ell m}(z)\,(x_1 + i x_2)^m` for m ≥ 0 (z = :math:`x_3`):

    .. math:: Q_{mm} = \frac{(-1)^m}{\sqrt{4\pi}}\prod_{k=1}^{m}\sqrt{\frac{2k+1}{2k}},\quad
              Q_{m+1,m} = \sqrt{2m+3}\,z\,Q_{mm},\quad
              Q_{\ell m} = a_{\ell m}\big(z\,Q_{\ell-1,m} - b_{\ell m}Q_{\ell-2,m}\big),

    :math:`a_{\ell m} = \sqrt{(4\ell^2-1)/(\ell^2-m^2)}`,
    :math:`b_{\ell m} = \sqrt{((\ell-1)^2-m^2)/(4(\ell-1)^2-1)}` (the normalised associated
    Legendre recurrence with the factor :math:`\sin^m\vartheta` moved into
    :math:`(x_1 + ix_2)^m = \sin^m\vartheta\,e^{im\varphi}`: a polynomial, no pole).

    Returns
    -------
    qmm : (L + 1,) array, a, b : (L + 1, L + 1) arrays indexed [ℓ, m] (0 where unused).
    """
    L = int(L)
    qmm = np.empty(L + 1)
    qmm[0] = 1 / np.sqrt(4 * np.pi)
    for m in range(1, L + 1):
        qmm[m] = -qmm[m - 1] * np.sqrt((2 * m + 1) / (2 * m))
    a = np.zeros((L + 1, L + 1))
    b = np.zeros((L + 1, L + 1))
    for m in range(L + 1):
        for ell in range(m + 2, L + 1):
            a[ell, m] = np.sqrt((4 * ell**2 - 1) / (ell**2 - m**2))
            b[ell, m] = np.sqrt(((ell - 1) ** 2 - m**2) / (4 * (ell - 1) ** 2 - 1))
    return qmm, a, b


def _moments_s2(X, L, tables):
    r""":math:`c_{\ell m} = \sum_j \overline{Y_{\ell m}(x_j)}`, m ≥ 0, of one path's tokens
    (n, 3) as a real (L + 1, L + 1, 2) array [ℓ, m, (real, imaginary part)]: per block of
    tokens the recurrence of :func:`legendre_tables` for every m at once, then one matrix
    product per m."""
    qmm, a, b = tables
    c = np.zeros((L + 1, L + 1, 2))
    B = min(BLOCK, X.shape[0])
    Q = np.empty((L + 1, L + 1, B))  # [ℓ, m, token]
    W = np.empty((L + 1, B, 2))  # conj(x1 + i x2)^m: [m, token, (re, im)]
    diag = np.arange(L)
    first = np.sqrt(2 * diag + 3) * qmm[:L]  # Q_{m+1,m} = first[m] z
    for s in range(0, X.shape[0], B):
        x = X[s:s + B]
        nb = x.shape[0]
        Qv, Wv = Q[:, :, :nb], W[:, :nb]
        z, x1, x2 = x[:, 2], x[:, 0], -x[:, 1]
        Wv[0, :, 0], Wv[0, :, 1] = 1.0, 0.0
        for m in range(1, L + 1):
            Wv[m, :, 0] = Wv[m - 1, :, 0] * x1 - Wv[m - 1, :, 1] * x2
            Wv[m, :, 1] = Wv[m - 1, :, 0] * x2 + Wv[m - 1, :, 1] * x1
        for m in range(L + 1):
            Qv[m, m] = qmm[m]
        Qv[diag + 1, diag] = first[:, None] * z
        for ell in range(2, L + 1):
            k = ell - 1  # the orders m = 0 .. ℓ - 2
            np.multiply(Qv[ell - 1, :k], z, out=Qv[ell, :k])
            Qv[ell, :k] -= b[ell, :k, None] * Qv[ell - 2, :k]
            Qv[ell, :k] *= a[ell, :k, None]
        for m in range(L + 1):
            c[m:, m] += Qv[m:, m] @ Wv[m]
    return c


def harmonic_power(X, L):
    r"""The power per degree :math:`P_\ell`, ℓ = 1..L, of the tokens of every path [model §8]
    (module docstring).

    S²: :math:`P_\ell = \frac1{n^2}\big(\lvert c_{\ell 0}\rvert^2 + 2\sum_{m=1}^{\ell}
    \lvert c_{\ell m}\rvert^2\big)`, :math:`c_{\ell m} = \sum_j\overline{Y_{\ell m}(x_j)}`
    (:math:`\lvert c_{\ell,-m}\rvert = \lvert c_{\ell m}\rvert`), the :math:`Y_{\ell m}` by the
    recurrence of :func:`legendre_tables` times :math:`(x_1 + ix_2)^m`; S¹:
    :math:`P_k = \lvert\frac1n\sum_j (x_1 + ix_2)_j^k\rvert^2`.

    Parameters
    ----------
    X : (P, n, d) or (n, d) array of unit vectors, d = 2 or 3.
    L : int >= 1
        The largest degree.

    Returns
    -------
    (P, L) array (or (L,) for an (n, d) input).
    """
    X = np.asarray(X, dtype=float)
    single = X.ndim == 2
    if single:
        X = X[None]
    P, n, d = X.shape
    L = int(L)
    if d not in (2, 3):
        raise ValueError(f"harmonic_power: d = {d}; defined on S^1 (d = 2) and S^2 (d = 3)")
    if L < 1:
        raise ValueError(f"harmonic_power: L = {L}; must be >= 1")
    out = np.empty((P, L))
    if d == 2:
        for p in range(P):
            z = X[p, :, 0] + 1j * X[p, :, 1]
            zk = np.ones(n, dtype=complex)
            for k in range(L):
                zk = zk * z
                out[p, k] = abs(zk.sum() / n) ** 2
    else:
        tables = legendre_tables(L)
        for p in range(P):
            c = np.sum(_moments_s2(X[p], L, tables) ** 2, axis=-1)
            c[:, 1:] *= 2
            out[p] = c.sum(axis=1)[1:] / n**2
    return out[0] if single else out


def _degree_rule(cfg):
    """``diagnostics.harmonic_degree`` needs tokens on S¹ or S²."""
    L = cfg["diagnostics"]["harmonic_degree"]
    if L and int(cfg["model"]["d"]) not in (2, 3):
        raise bad("diagnostics.harmonic_degree", L,
                  f"must be 0 with model.d = {cfg['model']['d']} (the harmonic power is "
                  "defined on S^1 and S^2, d = 2 or 3)")


declare(
    Param("diagnostics.harmonic_degree", 0, Integer(lo=0, hi=128),
          "the harmonic power per degree 1..L of the tokens at every record, series "
          "harmonic_power (S^1, S^2; 0: off) [model §8]",
          applies=When("solver.representation", "particles"), rule=_degree_rule),
    after="diagnostics.max_pairwise_n")
