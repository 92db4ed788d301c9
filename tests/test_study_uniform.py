"""The ``uniform`` study [model §6c]: the uniform state's growth rates, ν_c and the transition
(the closed forms themselves: ``tests/test_uniform_state.py``).

- the quick study: every measured growth rate within 3 standard errors of its fit plus the
  discretisation estimate (the change from N/2 to N cells and from Δt to Δt/2) of the
  derived one; the winning mode; ν_c measured against derived; summary and figure written;
  the clustered start's stationary r on the derived branch;
- the selection of the quick study (S¹, n = 10⁴ uniform tokens, β = 2, 3 draws, the spectral
  summation): the fitted rates of the three fastest modes on their derived λ_k and the
  measured k* the derived one (a gap of 44%); the rate fit on exact exponentials;
- the continuation sweep of the quick study: each link starts from the previous link's final
  density times (1 + ε cos θ), mass 1; the link time rule of critical slowing down;
- slow: S² coarse, degrees 1 and 2, against the derived rate; hysteresis of ``none`` at
  β = 4 (N = 32): inside (ν_c, ν_turn) the up sweep stays clustered on the derived stable
  branch and the down sweep uniform; below ν_c both are clustered and equal.
"""

from __future__ import annotations

import numpy as np
import pytest

from wflow.engine.run import simulate
from wflow.model import uniform_state as S
from wflow.studies import _uniform_tasks as T
from wflow.studies import available_studies, run_study
from wflow.studies import uniform as U


def test_registered():
    assert "uniform" in available_studies()


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("uniform")
    return run_study("uniform", out, scale="quick")


@pytest.fixture(scope="module")
def quick_ms(quick):
    """The measured records of the quick study (:meth:`Uniform.measure`), read once."""
    return U.Uniform.measure(quick.data)


def test_quick_growth_rates_match_derived(quick_ms):
    """|measured − derived| ≤ 3 SE + the discretisation estimate: the rate's change from N/2
    to N cells (relative, per k; the error is O(h²), so the change bounds it by 3×) plus the
    change from Δt to Δt/2; ``none`` takes the relative estimate of ``head`` (same operator
    up to the factor I_0(β))."""
    ms = quick_ms
    g = {n: r for n, r in ms.items() if n.startswith("growth")}
    rel = {}
    for n, r in g.items():
        if n.endswith("-halfN"):
            r0 = g[n[: -len("-halfN")]]
            rdt = g[n[: -len("-halfN")] + "-halfdt"]
            rel[r0["k"]] = (abs(r0["rate"] - r["rate"]) + abs(r0["rate"] - rdt["rate"])) \
                / r0["rate"]
    assert set(rel) == {1, 2, 3}
    for n, r in g.items():
        if n.endswith(("halfN", "halfdt")):
            continue
        tol = 3 * r["se"] + rel[r["k"]] * abs(r["rate"])
        assert abs(r["rate"] - r["derived"]) <= tol, (n, r["rate"], r["derived"], tol)
        assert r["npts"] >= 20
    # the winning mode among k = 1..3 at beta = 2 is the derived one (k* = 2)
    for nm in ("head", "none"):
        rs = {r["k"]: r["rate"] for n, r in g.items() if r["norm"] == nm and "-half" not in n}
        assert max(rs, key=rs.get) == S.winning_mode(2.0, nm) == 2


def test_quick_critical_nu(quick, quick_ms):
    """ν_c measured (zero crossing of the mode-1 rate) against derived, within 3 SE plus the
    k = 1 discretisation estimate (the rate's N/2 → N change; slope −1 carries a rate error
    one to one into ν_c) plus the Δt estimate (Heun, order 2: 4/3 of the Δt → Δt/2 change)."""
    ms = quick_ms
    cr = U.Uniform.critical(ms)[("head", 2.0)]
    d = abs(ms["growth-head-b2-k1"]["rate"] - ms["growth-head-b2-k1-halfN"]["rate"])
    ddt = 4 / 3 * abs(cr["nu_c"] - cr["nu_c_halfdt"])
    assert abs(cr["nu_c"] - cr["derived"]) <= 3 * cr["se"] + d + ddt
    assert abs(cr["nu_c_richardson"] - cr["derived"]) <= 3 * cr["se"] + d + ddt
    assert cr["slope"] == pytest.approx(-1.0, abs=3 * d)
    assert "critical noise nu_c" in quick.text


def test_quick_sweep_on_derived_branch(quick_ms):
    """The clustered start at ν = 0.7 ν_c ends on the derived stationary branch: within its
    drift over the last 20% of T plus the O(h²) scale (2π/N)² r of the scheme."""
    ms = quick_ms
    r = ms["sweep-head-b2-f0.7-clustered"]
    rv = np.linspace(0.01, 0.95, 60)
    nu = S.stationary_branch(2.0, "head", rv)
    ok = np.isfinite(nu)
    rb = np.interp(r["nu"], nu[ok][::-1], rv[ok][::-1])
    N = 64
    assert abs(r["r"] - rb) <= 5 * abs(r["drift"]) + (2 * np.pi / N) ** 2 * rb


def test_quick_writes_summary_and_figure(quick):
    names = {p.name for p in quick.files}
    assert {"summary.txt", "summary.csv", "uniform.png", "uniform_continuation.png"} <= names
    assert "(a) growth rates without noise" in quick.text


@pytest.mark.slow
@pytest.mark.parametrize("ell", [1, 2])
def test_sphere_growth_rate_slow(ell):
    """S² (Voronoi N = 500 and 250, head, β = 2): the measured rate of degree ℓ within 3 SE
    plus the discretisation bound: the S² transport is first-order upwind, so the error falls
    at least by 1/√2 when N doubles (h ∝ N^(-1/2)) and is at most Δ/(√2 − 1), Δ the change of
    the rate from N/2 to N."""
    rates = {}
    for N in (250, 500):
        c = T.with_keys(T.UNIFORM_BASE, model__d=3, init__mode=ell, density__cells=N)
        lam = float(S.derived_rate(ell, 2.0, "head", d=3))
        T.set_steps(c, T.growth_T(lam, 1e-4, S.A_CAP, 40.0), 200)
        res = simulate(c)
        from wflow.geometry.sphere_mesh import voronoi_mesh

        A = S.mode_amplitude(np.asarray(res.arrays["rho"])[:, 0], ell, 3, voronoi_mesh(N))
        rates[N] = S.fit_rate(res.arrays["t"], A)
    lam = float(S.derived_rate(ell, 2.0, "head", d=3))
    rate, se, _ = rates[500]
    assert abs(rate - lam) <= 3 * se + abs(rate - rates[250][0]) / (np.sqrt(2) - 1)


def test_quick_selection_rates(quick, quick_ms):
    r"""S¹, n = 10⁴ uniform tokens per draw, β = 2 (k* = 2, λ_2/λ_3 − 1 = 44%), 3 draws: the
    mean fitted rate of k* within 5% of λ_2, of k = 1 and 3 within 10% of theirs (over
    seeds 0–7 the largest deviations were 2.3%, 1.1% (k = 1) and 7.7% (k = 3): the spread of
    a mean of 3 draws at n = 10⁴ is 1–3%; a rate of the power instead of the amplitude is
    off by 100%), the
    measured k* (largest mean rate, its interval clear of the runner-up's) the derived one,
    from a linear phase of at least 10 records per draw."""
    ms = quick_ms
    sel = U.Uniform.selection(ms)
    r = sel["select-d2-b2-n10000"]
    assert r["lstar"] == S.winning_mode(2.0, "head") == 2
    assert r["top"] == [2, 3, 1]
    for k, tol in ((2, 0.05), (3, 0.10), (1, 0.10)):
        est, lam = r["intervals"][k - 1].estimate, r["derived"][k - 1]
        assert abs(est - lam) <= tol * lam, (k, est, lam)
    assert r["measured"] == 2
    assert np.all(r["npts"] >= 10)
    assert "selection: n uniform tokens" in quick.text
    assert "uniform_selection.png" in {p.name for p in quick.files}


def test_power_rates_exact_exponentials():
    """q_ℓ(t) = q_ℓ(0) e^{2λ_ℓ t}: the rates to round-off, SE ~ 0, the window up to the last
    record before any degree passes the cap."""
    t = np.linspace(0, 10, 101)
    lam = np.array([0.3, 0.5, 0.1])
    q = 1e-5 * np.exp(2 * np.outer(t, lam))
    rate, se, npts = S.power_rates(t, q, cap=1e-3)
    np.testing.assert_allclose(rate, lam, rtol=1e-10)
    assert np.all(se < 1e-8)
    assert npts == int(np.searchsorted(q[:, 1], 1e-3, side="right"))
    assert np.isnan(S.power_rates(t, q, cap=1e-6)[0]).all()


def test_plateau_time_rule():
    """T = min(T_max, max(T_min, c/|λ_1|)), λ_1 = μ_1 (ν_c − ν): μ_1 = 1 on S¹, 2 on S²."""
    nuc = S.critical_nu(1.0, "none")
    assert T.plateau_T(0.9 * nuc, 1.0, "none") == pytest.approx(T.C_RELAX / (0.1 * nuc))
    assert T.plateau_T(0.2 * nuc, 1.0, "none") == T.T_MIN
    assert T.plateau_T(nuc, 1.0, "none", t_max=500.0) == 500.0
    nuc3 = S.critical_nu(2.0, "head", d=3)
    assert T.plateau_T(1.1 * nuc3, 2.0, "head", d=3) == pytest.approx(
        T.C_RELAX / (2 * 0.1 * nuc3))


def test_quick_chain_links_continue(quick):
    """Link i + 1 starts at link i's final density times (1 + KICK cos θ), rescaled to mass 1
    (to round-off: the start is stored as computed), and the links come back down."""
    from wflow.analysis.results import load_source

    links = [(n, p) for p, (n, _) in zip(quick.data.paths, quick.data.tasks)
             if n.startswith("hyst")]
    assert [n.rsplit("-", 2)[1][2:] for n, _ in links] == ["up", "up", "down"]
    for (_, prev), (_, nxt) in zip(links, links[1:]):
        a = np.asarray(load_source(prev)[1]["rho"])[-1, 0]
        b = np.asarray(load_source(nxt)[1]["rho"])[0, 0]
        N = a.size
        th = 2 * np.pi * (np.arange(N) + 0.5) / N
        want = a * (1 + T.KICK * np.cos(th))
        want /= want.sum() * 2 * np.pi / N
        assert np.max(np.abs(b - want)) <= 1e-14 * np.max(a)
        assert b.sum() * 2 * np.pi / N == pytest.approx(1.0, abs=1e-13)
    assert "continuation sweeps" in quick.text


@pytest.mark.slow
def test_hysteresis_none_beta4_slow(tmp_path):
    """``none`` β = 4 > β_* on S¹ (N = 32): up 0.95 → 1.03 → 1.1 ν_c and back down. At
    1.03 ν_c (inside the window ν_c < ν < 1.0589 ν_c) the up link stays clustered and
    stationary, between the derived unstable and stable r (the scheme's numerical diffusion
    puts the discrete branch below the derived one: −24% at N = 32), and the down link
    stays uniform (r below the kick's ε/2); at 1.1 ν_c both uniform; at 0.95 ν_c up
    and down end at the same r (the branch is unique there)."""
    from wflow.studies import StudyOptions
    from wflow.studies._base import StudyData
    from wflow.studies._running import _run_chain

    class Small(U.Uniform):
        name = "uniform-small"

        def params(self, scale):
            p = super().params("quick")
            p["hyst"] = (("none", 4.0, 2, 32, 0.08, (0.95, 1.03, 1.1), 1000.0),)
            return p

    st = Small()
    (chain,) = st.chains(StudyOptions().configure(st.base("quick")), "quick")
    _run_chain(st, chain, tmp_path, StudyOptions())
    data = StudyData([str(tmp_path / f"{n}.h5") for n, _ in chain], chain, {})
    ms = {n.rsplit("-", 2)[1]: r for n, r in st.measure(data).items()}
    nuc = S.critical_nu(4.0, "none")
    rv, nub = S.branch_points(4.0, "none", 0.99, 120)
    top = int(np.argmax(nub))
    r_unstable = np.interp(1.03 * nuc, nub[: top + 1], rv[: top + 1])
    r_stable = S.stable_r(4.0, "none", 1.03 * nuc)
    assert r_unstable < ms["01up"]["r"] <= r_stable and ms["01up"]["stationary"]
    assert ms["03down"]["r"] < T.KICK / 2
    assert ms["02up"]["r"] < T.KICK / 2
    assert ms["04down"]["r"] == pytest.approx(ms["00up"]["r"], abs=1e-3)


def _unit(X):
    return X / np.linalg.norm(X, axis=-1, keepdims=True)


def _cloud(rng, D, centres, n, spread):
    """n tokens around the given centres (Gaussian of std ``spread`` in the ambient space,
    projected on the sphere)."""
    c = _unit(np.asarray(centres, dtype=float))
    return _unit(c[rng.integers(len(c), size=n)] + spread * rng.normal(size=(n, D)))


@pytest.mark.parametrize("D", [2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_cluster_count_equals_pairwise(D, seed):
    """The grid count (:func:`wflow.analysis.clusters.cluster_count`) equals the pairwise
    union–find count (:func:`wflow.model.diagnostics.n_clusters` on all tokens) on clustered
    states: random centres; centres on the corners of the grid's cells (clusters straddling
    2^D cells); the poles and the ends of the axes; clusters whose spread is of the order of
    the cluster angle (so that some break into several components); a uniform draw."""
    from wflow.analysis.clusters import cluster_count
    from wflow.model.diagnostics import n_clusters

    rng = np.random.default_rng(seed)
    angle = 0.1
    s = np.sqrt(2 - 2 * np.cos(angle)) / np.sqrt(D)  # the grid's cell side
    corners = np.round(_unit(rng.normal(size=(6, D))) / s) * s
    axes = np.concatenate([np.eye(D), -np.eye(D)])
    states = [_cloud(rng, D, rng.normal(size=(k, D)), 600, sp)
              for k, sp in ((3, 0.005), (7, 0.02), (15, 0.04))]
    states += [_cloud(rng, D, corners, 600, 0.01), _cloud(rng, D, axes, 600, 0.02),
               _cloud(rng, D, axes, 600, 0.0), _unit(rng.normal(size=(600, D)))]
    counts = []
    for X in states:
        want = n_clusters(X[None], angle, max_n=len(X))[0]
        assert cluster_count(X, angle) == want
        counts.append(want)
    assert len(set(counts)) >= 4  # the states differ: the check is not one count repeated
    P = np.stack(states[:3])
    np.testing.assert_array_equal(cluster_count(P, angle),
                                  n_clusters(P, angle, max_n=P.shape[1]))


@pytest.mark.parametrize("D", [2, 3])
def test_cluster_count_threshold_and_chains(D):
    """Two tokens at angle α(1 − 10⁻⁶) are one cluster, at α(1 + 10⁻⁶) two; a chain along a
    great circle with steps 0.9 α across many cells is one cluster, with steps 1.1 α as many
    clusters as tokens."""
    from wflow.analysis.clusters import cluster_count

    angle = 0.1

    def arc(phis):
        X = np.zeros((len(phis), D))
        X[:, 0], X[:, 1] = np.cos(phis), np.sin(phis)
        return X

    assert cluster_count(arc(np.array([0.3, 0.3 + angle * (1 - 1e-6)])), angle) == 1
    assert cluster_count(arc(np.array([0.3, 0.3 + angle * (1 + 1e-6)])), angle) == 2
    assert cluster_count(arc(0.9 * angle * np.arange(40)), angle) == 1
    assert cluster_count(arc(1.1 * angle * np.arange(40)), angle) == 40
    with pytest.raises(ValueError, match="angle"):
        cluster_count(arc(np.zeros(2)), 0.0)


def test_select_record_counts_clusters_on_all_tokens():
    """A selection run with its tokens stored: the cluster count at T is taken on all n tokens
    of the last record (two tight clusters of 4995 tokens each and 10 single tokens on the
    equator, per path: 12 components, 2 of at least 1% of the tokens; the pairwise series
    would count the first ``max_pairwise_n`` = 2000 only, all in one cluster here)."""
    from wflow.studies._uniform_results import BIG_CLUSTER, _select_record

    rng = np.random.default_rng(0)
    n, P = 10000, 2
    phi = 0.5 + 0.3 * np.arange(10)
    single = np.stack([np.cos(phi), np.sin(phi), np.zeros(10)], axis=1)
    X = np.stack([np.concatenate([_cloud(rng, 3, [[0, 0, 1]], 4995, 1e-3),
                                  _cloud(rng, 3, [[1, 0, 0]], 4995, 1e-3), single])
                  for _ in range(P)])
    t = np.linspace(0, 1, 11)
    hp = np.exp(np.outer(t, np.ones(P * 12))).reshape(11, P, 12) * 1e-5
    cfg = {"model": {"d": 3, "n": n, "beta": 2.0, "normalization": "head"},
           "diagnostics": {"cluster_angle": 0.1, "max_pairwise_n": 2000}}
    rec = _select_record(cfg, {"harmonic_power": hp, "X": np.stack([X, X])}, t)
    np.testing.assert_array_equal(rec["nclusters"], [12.0, 12.0])
    assert BIG_CLUSTER == 0.01
    np.testing.assert_array_equal(rec["nbig"], [2.0, 2.0])
    assert rec["counted"] == n
    rec = _select_record(cfg, {"harmonic_power": hp, "n_clusters": np.ones((11, P))}, t)
    assert rec["counted"] == 2000 and np.isnan(rec["nbig"]).all()
