"""The meanfield study (particles against the spectral density, S¹ and S²) and what it stands
on: the circle W₂ against hand cases, the harmonic coefficients of points against the grid's
analysis and the addition theorem, the finite-volume coefficients against quadrature, the
fit of an exponent, and the quick study's claims: n·D² at t = 0 is the central limit
theorem's variance, the density's own error is far below the particles', the fluctuations
of the near-uniform start grow at the rates of [model §6c]."""

import numpy as np
import pytest

from wflow.geometry.harmonics import harmonics
from wflow.studies import get_study, run_study
from wflow.studies.meanfield import (
    degree_errors,
    density_coefficients,
    fit_exponent,
    fit_table,
    fv_coefficients,
    growth_table,
    meanfield_errors,
    particle_coefficients,
    w2_circle,
)


@pytest.mark.parametrize("alpha", [1e-3, 0.2, 1.0])
def test_w2_circle_of_a_rotation_is_the_angle(alpha):
    # a sample on an arc of length 1 < π - α: the monotone (optimal) map is the rotation itself
    rng = np.random.default_rng(3)
    th = 2.0 + rng.random(500)
    w = rng.random(500)
    assert abs(w2_circle(th, th + alpha) - alpha) <= 1e-6 * alpha + 1e-9
    assert abs(w2_circle(th, th + alpha, w, w) - alpha) <= 1e-6 * alpha + 1e-9
    assert abs(w2_circle(th - 2.5, th - 2.5 + alpha) - alpha) <= 1e-6 * alpha + 1e-9
    rows = np.stack([th, th + 1.0, th - 2.5])
    got = w2_circle(rows, rows + np.array([[alpha], [2 * alpha], [alpha / 2]]))
    np.testing.assert_allclose(got, [alpha, 2 * alpha, alpha / 2], rtol=1e-6, atol=1e-9)


def test_w2_circle_dirac_against_uniform_grid():
    # δ_0 against K equal masses at −π + (j + ½)2π/K: W₂² = π²/3 − Δ²/12, Δ = 2π/K
    K = 64
    th = -np.pi + (np.arange(K) + 0.5) * 2 * np.pi / K
    exact = np.sqrt(np.pi**2 / 3 - (2 * np.pi / K) ** 2 / 12)
    assert abs(w2_circle(np.zeros(1), th) - exact) <= 1e-6 * exact


def _node_coefficients(g, Lam):
    """conj(Y_lm) at every node of the grid g: (G, ...)."""
    return particle_coefficients(g.centres[:, None, :], Lam)


@pytest.mark.parametrize("d, L", [(2, 6), (3, 5)])
def test_point_coefficients_are_the_grid_analysis(d, L):
    # Σ_g ω_g f_g conj(Y_lm(x_g)) from the points' coefficients equals the grid's analysis of a
    # band-limited f (exact quadrature): the conventions (normalisation, phase, conjugation)
    # of the particles' and the density's coefficients agree
    rng = np.random.default_rng(2)
    g = harmonics(d, L)
    if d == 2:
        c = rng.normal(size=L + 1) + 1j * rng.normal(size=L + 1)
        c[0] = c[0].real
    else:
        c = (rng.normal(size=(L + 1, L + 1)) + 1j * rng.normal(size=(L + 1, L + 1)))
        c = np.tril(c)
        c[:, 0] = c[:, 0].real
    f = g.synthesis(c)
    Yc = _node_coefficients(g, L)
    got = np.tensordot(g.weights * f, Yc, axes=(0, 0))
    np.testing.assert_allclose(got, density_coefficients(f, g, L), atol=1e-12 * np.abs(c).max())


@pytest.mark.parametrize("d", [2, 3])
def test_degree_errors_of_one_point_is_the_addition_theorem(d):
    # Σ_m |Y_lm(x)|² = (2l + 1)/4π on S² (1/π for |k| = l ≥ 1 on S¹), at any x
    rng = np.random.default_rng(5)
    X = rng.normal(size=(7, 1, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    e = degree_errors(particle_coefficients(X, 5), 0.0, d)
    ell = np.arange(6)
    want = (2 * ell + 1) / (4 * np.pi) if d == 3 else np.where(ell > 0, 1 / np.pi, 1 / (2 * np.pi))
    np.testing.assert_allclose(e, np.broadcast_to(want, e.shape), rtol=1e-12)


def test_fv_coefficients_against_quadrature():
    rng = np.random.default_rng(1)
    N, M = 16, 4096
    rho = rng.random(N)
    th = (np.arange(N * M) + 0.5) * 2 * np.pi / (N * M)  # midpoints, M per cell
    vals = np.repeat(rho, M)
    k = np.arange(5)
    ref = (vals[None] * np.exp(-1j * k[:, None] * th[None])).sum(1) * 2 * np.pi / (N * M)
    np.testing.assert_allclose(fv_coefficients(rho, 4), ref / np.sqrt(2 * np.pi), atol=1e-7)


def test_fit_exponent_recovers_a_power_law_with_its_interval():
    rng = np.random.default_rng(7)
    n = np.array([100, 1000, 10000, 100000])
    samples = [0.8 * k**-0.5 * rng.lognormal(0.0, 0.2, size=6) for k in n]
    a, C, (lo, hi) = fit_exponent(n, samples)
    assert lo < a < hi and lo < -0.5 < hi and hi - lo < 0.2
    means = np.array([s.mean() for s in samples])
    assert abs(a - np.polyfit(np.log(n), np.log(means), 1)[0]) < 1e-12


def _clt_variance(r, d, Lam):
    """Σ_{l=1..Λ} Σ_m Var Y_lm(X), X ~ ρ_0 (the degree-2L density at t = 0, by its nodes)."""
    g = harmonics(d, r["L_ref"])
    Yc = _node_coefficients(g, Lam)
    w = g.weights * r["rho_ref"][0]
    EY = np.tensordot(w, Yc, axes=(0, 0))
    return float(np.tensordot(w, degree_errors(Yc, EY, d), axes=(0, 0))[1:].sum())


@pytest.mark.parametrize("study, d", [("meanfield", 2), ("meanfield_s2", 3)])
def test_quick_study_claims(tmp_path, study, d):
    out = run_study(study, tmp_path, scale="quick", formats=())
    res = meanfield_errors(out.data)
    Lam = res["Lambda"]
    fits = fit_table(res)
    for name, r in res["cfg"].items():
        assert list(r["n"]) == [100, 300, 1000]
        # the central limit theorem: E n D² at t = 0 is Σ Var Y_lm(X) (pooled over the 18
        # samples: a mean of 18·2Λ (S¹) or 18·Λ(Λ+2) (S²) squared Gaussians, relative sd
        # ≤ 12%: 3 sd)
        nD2 = np.concatenate([m * r["D"][m][0] ** 2 for m in r["n"]])
        clt = _clt_variance(r, d, Lam)
        assert abs(nD2.mean() / clt - 1) < 0.35, (name, nD2.mean(), clt)
        for t, f in fits[name].items():
            a, _, (lo, hi) = f["D"]
            assert abs(a + 0.5) < 0.2 and lo < hi, (name, t, a)  # ≤ 0.08 over seeds 0-8
        # the density's own error (L against 2L) is far below the particles' at every t
        samp = np.array([r["D"][1000][k].mean() for k in range(len(res["t"]))])
        assert np.all(r["density"]["D"] < 1e-3 * samp)
        if "dt_check" in r:
            assert np.max(r["dt_check"]["D"]) < 1e-3 * samp.min()
    # near the uniform state the fluctuation of degree 1 grows as exp(2 λ_1 T) (model §6c);
    # measured within 1.3% over seeds 0-8 on both spheres
    G, (lo, hi), pred = growth_table(res)["near-uniform"][1]
    assert pred > 1.5 and abs(G / pred - 1) < 0.05, (G, pred)
    if d == 2:  # the figure module is shared: drawn once
        files = get_study(study).figures(out.data, tmp_path / "figures", ("png",))
        assert [f.name for f in files] == [f"{study}.png"]
        assert 0 < files[0].stat().st_size < 300_000
