"""The spectral summation on S¹ and S² [model §2s]: agreement with the direct sums at every
target within the tolerance, the fallback, the degree rule against the closed-form Bessel
tails, the error indicator against the observed error, the bits at 1 and 2 threads, the
refusals."""

import mpmath
import numpy as np
import pytest

import wflow
from wflow.errors import NumericalError
from wflow.kernels import set_num_threads
from wflow.kernels import spectral as sp
from wflow.kernels.reference import field_reference

TOL = 1e-10


def _unit(A):
    return A / np.linalg.norm(A, axis=-1, keepdims=True)


def _state(kind, n, d, seed):
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        return _unit(rng.standard_normal((n, d)))
    c = _unit(rng.standard_normal(d))
    X = _unit(c + 0.05 * rng.standard_normal((n, d)))
    if kind == "straggler":  # one token opposite a single cluster
        X[0] = -c
    return X


def _weights(kind, d, seed):
    rng = np.random.default_rng(100 + seed)
    A = rng.standard_normal((d, d))
    if kind == "identity":
        return np.eye(d)
    if kind == "indefinite":
        S = A + A.T
        w, Q = np.linalg.eigh(S)
        w[0], w[-1] = -1.0, 1.0  # indefinite, norm 1
        return (Q * w) @ Q.T
    return A / np.linalg.norm(A, 2)  # non-symmetric, norm 1


def _direct_sums(X, D, beta, u=None):
    S = beta * np.einsum("ia,hab,jb->hij", X, D, X)
    E = np.exp(S) if u is None else np.exp(S) * u
    C = X @ X.T
    return E.sum(2), np.einsum("hij,jb->hib", E, X), (E * (1 + C ** 2)).sum((1, 2))


def _errors(S0, SX, R0, RX):
    """Relative error of Z and of the attention average x̄ = SX/S0 (relative to |x| = 1)."""
    return np.maximum(np.abs(S0 / R0 - 1),
                      np.linalg.norm(SX / S0[..., None] - RX / R0[..., None], axis=-1))


# ------------------------------------------------------------------------ against the direct pass
@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("state", ["uniform", "cluster", "straggler"])
@pytest.mark.parametrize("weights", ["identity", "indefinite", "general"])
@pytest.mark.parametrize("beta", [1.0, 5.0, 10.0, 20.0])
def test_every_target_within_tolerance(d, state, weights, beta):
    """Z and the attention average at every target within the tolerance of the direct sums,
    the fallback included; every Field quantity agrees with the dense reference."""
    n = 500 if d == 2 else 300
    X = _state(state, n, d, seed=d)
    D = _weights(weights, d, seed=d)
    inter = "general" if weights == "general" else "symmetric"
    F, rep = wflow.field(X, D, beta=beta, interaction=inter, summation="spectral", report=True,
                         max_flagged=1.0)
    R = field_reference(X, D[None], beta, interaction=inter)
    assert np.max(np.abs(F.partition / R["partition"] - 1)) <= TOL
    # tied values: v = P_x(D x̄) with ‖D‖ = 1, so |Δv| ≤ |Δx̄| ≤ tol
    assert np.max(np.abs(F.velocity - R["velocity"])) <= TOL
    assert np.max(np.abs(F.b_hat / R["b_hat"] - 1)) <= TOL
    for k in ("G2", "G2_hm"):
        assert abs(getattr(F, k) / R[k] - 1) <= 4 * TOL
    if inter == "symmetric":
        assert abs(F.energy / R["energy"] - 1) <= TOL
        assert np.max(np.abs(F.gradient - R["gradient"])) <= TOL * np.max(np.abs(R["partition"]))
        assert np.max(np.abs(F.dE_dD - R["dE_dD"])) <= TOL * np.max(np.abs(R["dE_dD"]))
        assert abs(F.ito_sum / R["ito_sum"] - 1) <= TOL
        assert abs(F.dissipation - R["dissipation"]) <= 4 * TOL * (1 + abs(R["dissipation"]))
    else:
        assert np.isnan(F.energy) and np.isnan(F.ito_sum)
    assert 0.0 <= rep.flagged[0] <= 1.0 and rep.indicator[0] <= TOL


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("kw", [dict(normalization="joint"),
                                dict(normalization="none", laplacian_heads=[1]),
                                dict(normalization="head", laplacian_heads=1, values="random"),
                                dict(normalization="head", head_combine="sum", values="random")])
def test_normalisations_heads_values(d, kw):
    """Multi-head (a symmetric and an indefinite head), each normalisation, Laplacian heads,
    separate values and summed heads: every quantity as the dense reference."""
    rng = np.random.default_rng(7)
    n = 400
    X = _state("uniform", n, d, seed=3)
    D = np.stack([np.eye(d), _weights("indefinite", d, seed=4)])
    kw = dict(kw)
    V = rng.standard_normal((2, d, d)) if kw.pop("values", None) == "random" else None
    lap = kw.pop("laplacian_heads", ())
    F = wflow.field(X, D, beta=4.0, values=V, laplacian_heads=lap, summation="spectral",
                    max_flagged=1.0, **kw)
    Rr = field_reference(X, D, 4.0, V=V, laplacian_heads=wflow.model.attention.laplacian_indices(lap, 2),
                         **kw)
    scale = 1.0 if V is None else np.max(np.linalg.norm(V, 2, axis=(1, 2)))
    assert np.max(np.abs(F.partition / Rr["partition"] - 1)) <= TOL
    assert np.max(np.abs(F.velocity - Rr["velocity"])) <= 4 * TOL * scale
    for k in ("energy", "dissipation", "G2", "G2_hm", "ito_sum"):
        assert abs(getattr(F, k) - Rr[k]) <= 8 * TOL * (abs(Rr[k]) + scale ** 2)


def test_batches_and_the_model():
    """AttentionModel(summation="spectral") over a batch of paths equals path by path."""
    from wflow.model.attention import AttentionModel

    X = np.stack([_state("uniform", 300, 2, s) for s in (1, 2)])
    D = np.stack([np.eye(2)[None], _weights("indefinite", 2, 5)[None]])
    m = AttentionModel(beta=3.0, summation="spectral", max_flagged=1.0)
    F = m.evaluate(X, D)
    for p in range(2):
        Fp = m.evaluate(X[p:p + 1], D[p:p + 1])
        assert np.array_equal(F.velocity[p], Fp.velocity[0])
        assert np.array_equal(F.partition[p], Fp.partition[0])


# ------------------------------------------------------------------------------------- fallback
def test_fallback_recomputes_the_straggler():
    """A straggler at β‖D‖ = 20 (non-symmetric D) on S¹: its spectral sums miss the tolerance,
    the indicator flags it, the direct row brings it back within."""
    n = 2000
    X = _state("straggler", n, 2, seed=7)
    D = _weights("general", 2, seed=7)[None]
    beta = 20.0
    R0, RX, _ = _direct_sums(X, D, beta)
    L, tails = sp.degree(beta, D, 2, TOL / (4 * n))
    S0, SX, _, mag, fmax = sp.sums(X, D, beta, L)
    raw = _errors(S0, SX, R0, RX)[0]
    assert raw[0] > TOL  # the straggler, summed spectrally
    F, rep = wflow.field(X, D, beta=beta, interaction="general", summation="spectral", report=True,
                         max_flagged=1.0)
    assert rep.flagged[0] > 0
    assert np.max(np.abs(F.partition / (R0 / n) - 1)) <= TOL


def test_flagged_fraction_limit():
    """Beyond the stated fraction of flagged targets the pass stops with one line."""
    X = _state("uniform", 500, 3, seed=1)
    D = _weights("indefinite", 3, seed=1)
    with pytest.raises(NumericalError, match="exceed the tolerance"):
        wflow.field(X, D, beta=20.0, summation="spectral", max_flagged=0.0)


# ----------------------------------------------------------------------------------- degree rule
def _bessel_tail_mp(c, L):
    return float(2 * mpmath.nsum(lambda k: mpmath.besseli(k, c), [L + 1, mpmath.inf]) * mpmath.exp(-c))


def _spherical_tail_mp(c, L):
    """Σ_{l>L} (2l+1) i_l(c) e^{-c}: the sup error of the degree-L truncation of e^{c⟨x,y⟩}."""
    il = lambda ll: mpmath.sqrt(mpmath.pi / (2 * c)) * mpmath.besseli(ll + 0.5, c)
    return float(mpmath.nsum(lambda ll: (2 * ll + 1) * il(ll), [L + 1, mpmath.inf]) * mpmath.exp(-c))


@pytest.mark.parametrize("beta", [1.0, 5.0, 10.0, 20.0])
def test_degree_rule_closed_form_tails(beta):
    """S¹, D = I: the tail is the closed form 2e^{-β}Σ_{k>L} I_k(β), and the degree is the
    smallest with tail ≤ tol/(4n). S²: the bound is at least the spherical-Bessel tail
    Σ_{l>L}(2l+1) i_l(β) (the exact sup error for D = I) and at most (L+3)²+1 times the
    Chebyshev tail."""
    n = 10 ** 5
    target = TOL / (4 * n)
    L, t = sp.degree(beta, np.eye(2)[None], 2, target)
    assert t[0] == pytest.approx(_bessel_tail_mp(beta, L), rel=1e-10)
    assert t[0] <= target < sp.tail_s1(beta, np.eye(2), L - 1)
    # a rotation has the same tail; a non-symmetric D of the same norm no larger
    R = np.array([[0.6, -0.8], [0.8, 0.6]])
    assert sp.tail_s1(beta, R, L) == pytest.approx(t[0], rel=1e-12)
    L3, t3 = sp.degree(beta, np.eye(3)[None], 3, target)
    for ll in (L3 - 1, L3):
        assert sp.tail_s2(beta, np.eye(3), ll) >= _spherical_tail_mp(beta, ll)
    assert t3[0] <= target < sp.tail_s2(beta, np.eye(3), L3 - 1)


@pytest.mark.parametrize("d", [2, 3])
def test_truncation_error_within_tail(d):
    """At a low degree (truncation dominating), the observed absolute error of the sums, per
    n e^{β}, is below the tail bound of the degree and above the tail a few degrees further
    (the bound is not vacuous)."""
    beta, n = 8.0, 400
    X = _state("cluster", n, d, seed=2)
    D = np.eye(d)[None]
    R0, RX, _ = _direct_sums(X, D, beta)
    L = 6
    S0, SX, _, mag, fmax = sp.sums(X, D, beta, L)
    err = np.max(np.abs(S0 - R0)) / (n * np.exp(beta))
    tail = sp.tail_s1 if d == 2 else sp.tail_s2
    assert err <= tail(beta, D[0], L)
    assert err >= sp.tail_s1(beta, np.eye(2), L + 6)


@pytest.mark.parametrize("d", [2, 3])
def test_indicator_bounds_the_error(d):
    """The indicator η_hi bounds the observed error of Z and of the attention average at every
    target, over states, weights and β (the sums before the fallback)."""
    n = 600 if d == 2 else 400
    seen = 0
    for state in ("uniform", "cluster", "straggler"):
        X = _state(state, n, d, seed=11)
        D = np.stack([_weights(w, d, seed=11) for w in ("identity", "indefinite", "general")])
        for beta in (1.0, 5.0, 10.0, 20.0):
            L, tails = sp.degree(beta, D, d, TOL / (4 * n))
            res = sp.sums(X, D, beta, L, tol=TOL)
            S0, SX, _, mag, fmax = res
            R0, RX, _ = _direct_sums(X, D, beta)
            err = _errors(S0, SX, R0, RX)
            eta = sp.indicator(S0, beta * sp.head_norms(D), tails, d, L, mag, fmax, lib=res.lib)
            assert np.all(err <= eta)
            seen += int(np.sum(err > 1e-14))
    assert seen > 0  # the errors checked are not all round-off of the comparison


@pytest.mark.parametrize("width", [10, 12])
def test_indicator_at_a_narrower_kernel(width):
    """S², general D at β‖D‖ = 10 (sums spanning three decades): synthesised with a narrower
    kernel, the indicator with the kernel's term E_h of that width bounds the observed error at
    every target, and without it the bound fails (the term is what holds it)."""
    n, d, beta = 1500, 3, 10.0
    X = _state("uniform", n, d, seed=31)
    D = np.stack([_weights("general", d, seed=31), _weights("indefinite", d, seed=32)])
    L, tails = sp.degree(beta, D, d, TOL / (4 * n))
    res = sp.sums(X, D, beta, L, width=width)
    assert res.width == width
    R0, RX, _ = _direct_sums(X, D, beta)
    err = _errors(res.S0, res.SX, R0, RX)
    c = beta * sp.head_norms(D)
    eta = sp.indicator(res.S0, c, tails, d, L, res.mag, res.fmax, lib=res.lib)
    assert np.all(err <= eta)
    bare = sp.indicator(res.S0, c, tails, d, L, res.mag, res.fmax)
    assert np.any(err > bare)


@pytest.mark.parametrize("d", [2, 3])
def test_ito_totals_are_the_sums_over_the_points(d):
    """Σ_i u_i S^I_hi from the harmonic (S²) or Fourier (S¹) coefficients equals the sum of the
    synthesised S^I over every point (to round-off), and both are the direct totals within the
    tolerance; the width the tolerance picks is the one reported."""
    n = 500
    X = _state("cluster", n, d, seed=41)
    X[: n // 2] = _state("uniform", n // 2, d, seed=42)
    u = _masses("random", X, seed=41)
    D = np.stack([_weights("identity", d, 41), _weights("indefinite", d, 41)])
    beta = 6.0
    L, _ = sp.degree(beta, D, d, TOL / (4 * n))
    res = sp.sums(X, D, beta, L, u, tol=TOL)
    assert res.width in sp.nufft.WIDTHS
    at = res.ito_at(np.arange(n))
    assert np.allclose(res.ito, at @ u, rtol=1e-13, atol=0)
    _, _, RI = _direct_sums(X, D, beta, u)  # Σ_ij u_j e^s (1 + ⟨x_i, x_j⟩²), unweighted rows
    S = beta * np.einsum("ia,hab,jb->hij", X, D, X)
    tot = np.einsum("i,hij,j,ij->h", u, np.exp(S), u, 1 + (X @ X.T) ** 2)
    assert np.allclose(res.ito, tot, rtol=TOL, atol=0) and RI.shape == (2,)


# ----------------------------------------------------------------------------------- point masses
def _masses(kind, X, seed):
    """Relative masses u_j ≥ 0 (mean 1): random with a tenth of them zero; concentrated
    (u ∝ e^{8⟨x, e⟩}, a density's cells); one point 500 times as heavy as the rest."""
    rng = np.random.default_rng(200 + seed)
    n, d = X.shape
    if kind == "random":
        u = rng.random(n)
        u[rng.choice(n, n // 10, replace=False)] = 0.0
    elif kind == "concentrated":
        u = np.exp(8.0 * (X @ _unit(rng.standard_normal(d)) - 1.0))
    else:
        u = np.ones(n)
        u[rng.integers(n)] = 500.0
    return u * (n / u.sum())


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("full", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_weighted_indicator_bounds_the_error(d, full):
    """With point masses (the type-1 strengths) the indicator, its truncation term at the
    total mass U = Σ u_j and the degree rule at tol/(4 n_eff), n_eff = U/max u_j, bounds the
    observed error at every target it does not flag as hopeless (η < 1/2), over states,
    masses (zero, concentrated, one heavy point), weights and β: every state, mass and β once
    by default (the diagonal of the three), every combination in the slow suite."""
    from wflow.model.spectral import effective_count

    n = 600 if d == 2 else 300
    betas = (1.0, 5.0, 20.0) if d == 2 else (1.0, 5.0, 10.0)  # (S²: the grid's cost)
    seen = checked = total = 0
    for a, state in enumerate(("uniform", "cluster", "straggler")):
        X = _state(state, n, d, seed=13)
        D = np.stack([_weights(w, d, seed=13) for w in ("identity", "indefinite", "general")])
        for b, kind in enumerate(("random", "concentrated", "heavy")):
            u = _masses(kind, X, seed=d)
            U, neff = effective_count(u, n)
            assert U == pytest.approx(n) and neff <= n
            if not (full or a == b):
                continue
            for beta in (betas if full else betas[a:a + 1]):
                L, tails = sp.degree(beta, D, d, TOL / (4 * neff))
                res = sp.sums(X, D, beta, L, u, tol=TOL)
                S0, SX, _, mag, fmax = res
                R0, RX, _ = _direct_sums(X, D, beta, u)
                err = _errors(S0, SX, R0, RX)
                eta = sp.indicator(S0, beta * sp.head_norms(D), tails, d, L, mag, fmax, U, res.lib)
                # η bounds the error relative to the spectral S⁰; relative to the exact one
                # it is η/(1 − η) while η < 1 (beyond, the target is flagged in any case)
                ok = eta < 0.5
                assert np.all(err[ok] <= eta[ok] / (1 - eta[ok])), (state, kind, beta)
                seen += int(np.sum(err[ok] > 1e-14))
                checked += int(np.sum(ok))
                total += ok.size
    assert seen > 0 and checked > 0.8 * total


@pytest.mark.parametrize("d", [2, 3])
def test_weighted_truncation_error_within_tail(d):
    """At a low degree the absolute error of the weighted sums, per U e^β, is below the tail
    bound and above the tail a few degrees further."""
    beta, n = 8.0, 400
    X = _state("cluster", n, d, seed=2)
    u = _masses("random", X, seed=2)
    D = np.eye(d)[None]
    R0, RX, _ = _direct_sums(X, D, beta, u)
    L = 6
    S0, SX, _, mag, fmax = sp.sums(X, D, beta, L, u)
    err = np.max(np.abs(S0 - R0)) / (u.sum() * np.exp(beta))
    tail = sp.tail_s1 if d == 2 else sp.tail_s2
    assert err <= tail(beta, D[0], L)
    assert err >= sp.tail_s1(beta, np.eye(2), L + 6)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("kw", [dict(normalization="head"), dict(normalization="joint"),
                                dict(normalization="none", laplacian_heads=[1]),
                                dict(normalization="head", interaction="general"),
                                dict(normalization="none", head_combine="sum", values="random")])
def test_weighted_field_every_quantity(d, kw):
    """The field of weighted points (zero masses included) by the spectral sums: every
    quantity as the dense reference with ``weights=`` (every (1/n)Σ_j becomes Σ_j w_j, over
    columns and rows), the fallback included (a straggler, β = 8)."""
    from wflow.model.attention import AttentionModel, laplacian_indices

    rng = np.random.default_rng(17)
    n = 400
    X = _state("straggler", n, d, seed=5)
    w = _masses("random", X, seed=5) / n
    kw = dict(kw)
    inter = kw.pop("interaction", "symmetric")
    D = np.stack([np.eye(d), _weights("general" if inter == "general" else "indefinite", d, 6)])
    V = rng.standard_normal((2, d, d)) if kw.pop("values", None) == "random" else None
    lap = laplacian_indices(kw.pop("laplacian_heads", ()), 2)
    m = AttentionModel(beta=8.0, laplacian_heads=lap, values=V, interaction=inter,
                       summation="spectral", max_flagged=1.0, **kw)
    F, rep = m.evaluate_spectral(X[None], D[None], weights=w)
    R = field_reference(X, D, 8.0, laplacian_heads=lap, V=V, weights=w, interaction=inter, **kw)
    scale = 1.0 if V is None else np.max(np.linalg.norm(V, 2, axis=(1, 2)))
    zmax = np.max(R["partition"])
    assert np.max(np.abs(F.partition[0] / R["partition"] - 1)) <= TOL
    assert np.max(np.abs(F.b_hat[0] / R["b_hat"] - 1)) <= TOL
    # |Δv| ≤ ‖V‖ tol per head (head), ≤ 2 Z ‖V‖ tol (none: Δ(Z w) = ΔZ w + Z Δw); summed × H
    dv = 2 * 4 * TOL * scale * (1.0 if kw["normalization"] != "none" else zmax)
    assert np.max(np.abs(F.velocity[0] - R["velocity"])) <= dv
    vmax = np.max(np.linalg.norm(R["velocity"], axis=1))
    for k in ("G2", "G2_hm"):  # Σ_i w_i |v_i|²/m̄_i: |Δ|v|²| ≤ 2|v||Δv| + |Δv|², m̄ within tol
        assert abs(getattr(F, k)[0] - R[k]) <= (2 * vmax * dv + dv ** 2) * zmax + 4 * TOL * abs(R[k])
    if inter == "symmetric":
        assert abs(F.energy[0] / R["energy"] - 1) <= TOL
        assert abs(F.ito_sum[0] / R["ito_sum"] - 1) <= TOL
        assert np.max(np.abs(F.dE_dD[0] - R["dE_dD"])) <= TOL * np.max(np.abs(R["dE_dD"])) * d
        assert np.max(np.abs(F.gradient[0] - R["gradient"])) <= 2 * TOL * zmax
        gmax = np.max(np.linalg.norm(R["gradient"], axis=1))
        assert abs(F.dissipation[0] - R["dissipation"]) <= 2 * TOL * zmax * vmax + gmax * dv
    else:
        assert np.isnan(F.energy[0]) and np.isnan(F.ito_sum[0])
    assert rep.indicator[0] <= TOL


def test_weighted_fallback_recomputes_the_straggler():
    """A straggler carrying mass at β‖D‖ = 20 (non-symmetric D) on S¹: flagged, recomputed by
    the weighted direct row, within the tolerance; a massless straggler likewise."""
    from wflow.model.attention import AttentionModel

    n = 2000
    X = _state("straggler", n, 2, seed=7)
    D = _weights("general", 2, seed=7)[None]
    m = AttentionModel(beta=20.0, interaction="general", summation="spectral", max_flagged=1.0)
    for heavy in (5.0, 0.0):
        u = np.ones(n)
        u[0] = heavy
        R0, RX, _ = _direct_sums(X, D, 20.0, u)
        rows = np.array([0, 1, n - 1])
        S0, SX, _ = sp.direct_rows(X, D, 20.0, rows, u)
        assert np.allclose(S0, R0[:, rows], rtol=1e-13) and np.allclose(SX, RX[:, rows], rtol=1e-12)
        F, rep = m.evaluate_spectral(X[None], D[None], weights=u / n)
        assert rep.flagged[0] > 0
        assert np.max(np.abs(F.partition[0] / (R0 / n) - 1)) <= TOL


# ----------------------------------------------------------------------------------- the bits
@pytest.mark.parametrize("d", [2, 3])
def test_bits_independent_of_threads(d, monkeypatch):
    """The same bytes at 1 and 2 threads and across two runs (several blocks of points)."""
    monkeypatch.setattr(sp, "BLOCK", 700)
    X = _state("uniform", 3000, d, seed=9)
    D = np.stack([np.eye(d), _weights("indefinite", d, 9), _weights("general", d, 9)])
    out = []
    try:
        for threads in (1, 2, 2, 1):
            set_num_threads(threads)
            r = sp.sums(X, D, 6.0, 20, tol=TOL)
            out.append([r.S0, r.SX, r.ito, r.mag, r.fmax, r.lib, r.ito_at(np.arange(0, 3000, 7))])
    finally:
        set_num_threads(2)
    for o in out[1:]:
        for a, b in zip(out[0], o):
            assert a.tobytes() == b.tobytes()


# ----------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("kw, match", [
    (dict(d=4), "d = 2 or 3"),
    (dict(mask="causal"), "unmasked"),
    (dict(backend="numpy"), "backend"),
    (dict(beta=3000.0), "L_max"),
])
def test_refusals(kw, match):
    kw = dict(kw)
    d = kw.pop("d", 3)
    X = _state("uniform", 50, d, seed=0)
    with pytest.raises(ValueError, match=match):
        wflow.field(X, np.eye(d), summation="spectral", **kw)


def test_refusals_of_the_model():
    from wflow.model.attention import AttentionModel

    with pytest.raises(ValueError, match="float64"):
        AttentionModel(summation="spectral", precision="float32")
    m = AttentionModel(summation="spectral")
    X = _state("uniform", 50, 3, seed=0)[None]
    w = np.full((1, 50), 1 / 50)
    w[0, 3] = -1e-3
    with pytest.raises(ValueError, match="every mass must be finite and >= 0"):
        m.evaluate(X, np.eye(3)[None, None], weights=w)
    with pytest.raises(ValueError, match="weights has shape"):
        m.evaluate(X, np.eye(3)[None, None], weights=np.full(49, 1 / 49))
    with pytest.raises(ValueError, match="summation"):
        wflow.field(X[0], np.eye(3), summation="fast")


# ----------------------------------------------------------------------------------- large n
@pytest.mark.slow
@pytest.mark.parametrize("d", [2, 3])
def test_large_n_random_targets(d):
    """n = 10⁵: the exact sums at 200 random targets (O(n) each) within the tolerance."""
    n = 10 ** 5
    X = _state("uniform", n, d, seed=21)
    X[: n // 2] = _state("cluster", n // 2, d, seed=22)
    D = np.stack([np.eye(d), _weights("general", d, 21)])
    beta = 10.0
    L, tails = sp.degree(beta, D, d, TOL / (4 * n))
    res = sp.sums(X, D, beta, L, tol=TOL)
    S0, SX, _, mag, fmax = res
    rows = np.random.default_rng(3).choice(n, 200, replace=False)
    R0, RX, _ = sp.direct_rows(X, D, beta, rows)
    eta = sp.indicator(S0, beta * sp.head_norms(D), tails, d, L, mag, fmax, lib=res.lib)[:, rows]
    err = _errors(S0[:, rows], SX[:, rows], R0, RX)
    assert np.all(err <= eta)
    assert np.all(err[eta <= TOL] <= TOL)


# ----------------------------------------------------------------------------------- benchmark
def test_scale_suite_rows(monkeypatch):
    """The ``scale`` benchmark suite: rows of the results schema, errors within the tolerance
    at the checked targets, the direct pass timed where asked, and every case's tables built
    before its timing (a run has them from its first step)."""
    from benchmarks.results import SCHEMA
    from benchmarks.scale import scale_suite
    from wflow.kernels import spectral as ks

    prepared, prepare = [], ks.prepare
    monkeypatch.setattr(ks, "prepare", lambda d, L: (prepared.append((d, L)), prepare(d, L)))
    rows = scale_suite(ns=(400,), heads=(1,), betas=(5.0,), weights=("identity", "general"),
                       goals=False, direct_max_n=400)
    assert [r["suite"] for r in rows] == ["scale"] * 6
    for r in rows:
        assert tuple(r) == SCHEMA["row"]
    cases = [r for r in rows if "crossover" not in r["what"]]
    assert all(r["data"]["max_error"] <= TOL and r["data"]["direct_s"] > 0 for r in cases)
    assert all(r["data"]["targets_checked"] == 400 for r in cases)
    assert {(r["data"]["d"], r["data"]["degree"]) for r in cases} <= set(prepared)
