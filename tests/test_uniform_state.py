"""The closed forms of the uniform state (``wflow.model.uniform_state``) [model §6c].

- the derived rate against a direct quadrature of the linearised field (S¹), and against the
  kernel coefficients by quadrature of the Funk–Hecke integrals (S¹ and S², both
  normalisations, with noise); ν_c as the largest ν with a growing mode; the winning mode
  against a brute-force argmax of the quadrature rates;
- the Landau coefficient: its zero is β_* (the published threshold I_2/I_1 = 1/2 at d = 2)
  and it is the small-r slope of the stationary branch solved numerically;
- the mode amplitude of exact cell averages and the rate fit of an exact exponential;
- the derived S² stationary state: bifurcation at the derived ν_c, the published β_*^(3).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from scipy import integrate, optimize, special

from wflow.model import uniform_state as S

_T, _W = np.polynomial.legendre.leggauss(200)
_PSI = 2 * np.pi * (np.arange(512) + 0.5) / 512


@functools.lru_cache(maxsize=None)
def _coefficient(ell, beta, d, scaled=False):
    """The kernel coefficient by quadrature of its defining integral [model §6c]: on S¹
    I_ℓ(β) = (1/2π) ∫ e^{β cos ψ} cos ℓψ dψ by the midpoint rule on 512 points (spectral for a
    periodic integrand: the aliased terms I_{512 m ± ℓ} are far below round-off), on S²
    (Funk–Hecke) i_ℓ(β) = (1/2) ∫_{-1}^{1} e^{βt} P_ℓ(t) dt by Gauss–Legendre on 200 nodes
    (exact to degree 399); ``scaled``: times e^{-β}."""
    shift = beta if scaled else 0.0
    if d == 2:
        return float(np.mean(np.exp(beta * np.cos(_PSI) - shift) * np.cos(ell * _PSI)))
    return float(_W @ (np.exp(beta * _T - shift) * special.eval_legendre(ell, _T)) / 2)


def _rate(k, beta, norm, nu, d):
    """λ_k = μ_k (c_k/(β c_0^s) − ν) from the quadrature coefficients."""
    c = _coefficient(k, beta, d) / beta
    if norm == "head":
        c /= _coefficient(0, beta, d)
    return (k * k if d == 2 else k * (k + 1)) * (c - nu)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("norm", ["head", "none"])
def test_derived_rate_against_funk_hecke_quadrature(d, norm):
    """The derived rates of modes 1..6 (β = 2.7, ν = 0.05, the array form) equal the rates
    built from the kernel coefficients by quadrature (to round-off)."""
    beta, nu = 2.7, 0.05
    ks = np.arange(1, 7)
    want = [_rate(int(k), beta, norm, nu, d) for k in ks]
    np.testing.assert_allclose(S.derived_rate(ks, beta, norm, nu, d), want, rtol=1e-10)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("norm", ["head", "none"])
@pytest.mark.parametrize("beta", [0.5, 3.0, 9.0])
def test_critical_nu_is_the_last_growing_mode(d, norm, beta):
    """ν_c is the zero in ν of the quadrature rate of mode 1, and at ν_c (1 + 1e-6) no mode
    k ≤ 20 grows while mode 1 grows at ν_c (1 − 1e-6)."""
    nuc = S.critical_nu(beta, norm, d)
    zero = optimize.brentq(lambda nu: _rate(1, beta, norm, nu, d), 0.0, 1e3, xtol=1e-15)
    assert nuc == pytest.approx(zero, rel=1e-10)
    assert _rate(1, beta, norm, nuc * (1 - 1e-6), d) > 0
    assert max(_rate(k, beta, norm, nuc * (1 + 1e-6), d) for k in range(1, 21)) < 0


@pytest.mark.parametrize("d", [2, 3])
def test_winning_mode_against_brute_force(d):
    """k* = argmax_k λ_k at ν = 0 over k = 1..60 from the quadrature coefficients (scaled by
    e^{-β}; the argmax is the same for both normalisations), and k* ≈ √(2β) on S¹."""
    for beta in (1.0, 4.0, 16.0, 64.0):
        lam = [(k * k if d == 2 else k * (k + 1)) * _coefficient(k, beta, d, scaled=True)
               for k in range(1, 61)]
        k_star = 1 + int(np.argmax(lam))
        assert S.winning_mode(beta, "head", d=d) == S.winning_mode(beta, "none", d=d) == k_star
        if d == 2:
            assert abs(k_star - np.sqrt(2 * beta)) <= 1


@pytest.mark.parametrize("norm", ["head", "none"])
@pytest.mark.parametrize("k", [1, 2, 5])
def test_derived_rate_against_quadrature_s1(norm, k):
    """λ_k from the field of ρ̄(1 + a cos kθ) by quadrature: -ρ̄ ∂_θ v_θ / (ρ̄ a cos kθ) at
    θ = 0, a → 0 by a central difference in a (the quadrature is spectral: 1e-9)."""
    beta = 1.7
    M = 256
    phi = 2 * np.pi * (np.arange(M) + 0.5) / M

    def dv(a, th):
        rho = (1 + a * np.cos(k * phi)) / (2 * np.pi)
        w = np.exp(beta * np.cos(th - phi)) * rho * 2 * np.pi / M
        Z, dZ = w.sum(), (w * beta * np.sin(phi - th)).sum()
        return dZ / beta / (Z if norm == "head" else 1.0)

    eps, hh = 1e-6, 1e-4
    # d v / d theta at theta = 0, linear part in a
    dvdth = [(dv(a, hh) - dv(a, -hh)) / (2 * hh) for a in (eps, -eps)]
    lin = (dvdth[0] - dvdth[1]) / (2 * eps)  # ∂_θ v per unit a at θ = 0 (cos kθ = 1)
    lam = -lin  # ∂_t (ρ̄ a) = -ρ̄ ∂_θ v
    assert lam == pytest.approx(float(S.derived_rate(k, beta, norm)), rel=1e-5)


@pytest.mark.parametrize("ell", [1, 2, 3])
def test_funk_hecke_coefficient_s2(ell):
    """2π ∫ e^{βt} P_ℓ(t) dt = 4π i_ℓ(β): the S² kernel coefficient of the derived rate."""
    beta = 2.3
    val = 2 * np.pi * integrate.quad(lambda t: np.exp(beta * t) * special.eval_legendre(ell, t),
                                     -1, 1, epsabs=1e-13)[0]
    assert val == pytest.approx(4 * np.pi * special.spherical_in(ell, beta), rel=1e-10)
    assert S.critical_nu(beta, "none", d=3) == pytest.approx(special.spherical_in(1, beta) / beta)


def test_published_threshold_matches_landau():
    """β_* of Mun and Rosenzweig at d = 2, I_2/I_1 = 1/2, is the β where our Landau
    coefficient 2 I_2 − I_1 changes sign; K_# = 1/(2 ν_c) of ``none`` in d = 2 and 3."""
    b2 = optimize.brentq(lambda b: special.iv(2, b) / special.iv(1, b) - 0.5, 0.1, 20)
    assert S.landau_beta_none() == pytest.approx(b2, rel=1e-10)
    for d, b in ((2, 1.3), (3, 2.9)):
        K = b ** (d / 2) / (2 ** (d / 2) * special.gamma(d / 2) * special.iv(d / 2, b))
        assert K == pytest.approx(1 / (2 * S.critical_nu(b, "none", d=d)), rel=1e-12)


def test_landau_coefficient_changes_sign_at_beta_star():
    """L(β) = (2I_2 − I_1)/(8(I_1 − I_2)) (I_k by quadrature): negative below β_*, positive
    above, zero at :func:`landau_beta_none` (to the root's tolerance times L's slope)."""
    b_star = S.landau_beta_none()
    for beta in (0.5, 1.0, 2.0, 3.0, 4.0, 8.0):
        i1, i2 = (_coefficient(k, beta, 2) for k in (1, 2))
        want = (2 * i2 - i1) / (8 * (i1 - i2))
        assert S.landau_coefficient(beta) == pytest.approx(want, rel=1e-10)
        assert np.sign(want) == np.sign(beta - b_star)
    assert abs(S.landau_coefficient(b_star)) < 1e-10


def test_stationary_branch_continuous_below_discontinuous_above():
    """``none``: the branch ν(r) starts below ν_c for β < β_* (supercritical), above for
    β > β_* (subcritical: the hysteresis window); the small-r slope matches the Landau
    expansion (ν/ν_c − 1 ≈ L(β) α_1², α_1 = 2 I_1 r/(β ν), the Landau coefficient
    L = (2I_2 − I_1)/(8 (I_1 − I_2)))."""
    r = np.array([0.01, 0.02])
    for beta in (1.0, 4.0):
        nuc = S.critical_nu(beta, "none")
        x = S.stationary_branch(beta, "none", r) / nuc - 1
        alpha = 2 * r  # 2 I_1 r / (β ν_c) = 2 r at ν = ν_c
        pred = S.landau_coefficient(beta) * alpha**2
        assert np.sign(x[0]) == np.sign(beta - S.landau_beta_none())
        # the O(r^4) remainder: the ratio of the two points fixes it
        assert x[1] == pytest.approx(pred[1], rel=0.05)


def test_mode_amplitude_and_fit():
    """A_k of the cell averages of ρ̄(1 + a cos(kθ + φ)) is |a| (sinc-corrected); fit_rate of
    an exact exponential is exact, with a zero standard error."""
    N, k, a = 64, 3, 0.02
    h = 2 * np.pi / N
    edges = np.arange(N + 1) * h
    cells = (h + a / k * (np.sin(k * edges[1:] + 0.4) - np.sin(k * edges[:-1] + 0.4))) / (
        2 * np.pi * h)
    assert S.mode_amplitude(cells, k) == pytest.approx(a, rel=1e-12)
    t = np.linspace(0, 3, 31)
    rate, se, npts = S.fit_rate(t, 1e-4 * np.exp(0.7 * t))
    assert rate == pytest.approx(0.7, rel=1e-12) and se < 1e-10 and npts == 31


def test_stationary_r_s2_bifurcates_at_derived_nu_c():
    """The derived S² stationary state (``head`` β = 2): r > 0 just below the derived ν_c,
    r = 0 just above, and r² ∝ ν_c − ν near it (supercritical: r(0.98)²/r(0.99)² = 2 up to
    the O(δ) correction of the Landau expansion, 2% here)."""
    nuc = S.critical_nu(2.0, "head", d=3)
    a, b = (S.stationary_r_s2(2.0, "head", f * nuc) for f in (0.99, 0.98))
    assert S.stationary_r_s2(2.0, "head", 1.01 * nuc) == 0.0
    assert a > 0.05 and (b / a) ** 2 == pytest.approx(2.0, rel=0.03)


def test_stationary_r_s2_published_threshold_d3():
    """``none`` on S²: the published β_*^(3) (I_{5/2}/I_{3/2} = 1/3, β_* = 1.8162) separates
    no clustered state above ν_c (β = 1.6, at 1.005 ν_c) from one (β = 2.5, at 1.02 ν_c:
    the subcritical window)."""
    b3 = optimize.brentq(lambda b: special.iv(2.5, b) / special.iv(1.5, b) - 1 / 3, 0.1, 20)
    assert b3 == pytest.approx(1.8162, abs=1e-4)
    assert S.stationary_r_s2(1.6, "none", 1.005 * S.critical_nu(1.6, "none", d=3)) == 0.0
    assert S.stationary_r_s2(2.5, "none", 1.02 * S.critical_nu(2.5, "none", d=3)) > 0.5
