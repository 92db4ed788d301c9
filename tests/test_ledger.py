"""The exact energy ledger, the paper's balance, and the gradient-flow identities [model §4, §6]."""

import numpy as np
import pytest
from conftest import small_config

import wflow
from wflow.engine.run import Simulation
from wflow.model.processes import DrivenOU, brownian_increments


def fit_order(dts, errs):
    return np.polyfit(np.log(dts), np.log(np.abs(errs)), 1)[0]


@pytest.mark.parametrize(
    "over",
    [
        {},
        {"weights.process": "oscillating", "weights.noise_var": 0.0},
        {"weights.scheme": "exact", "solver.method": "heun"},
        {"model.normalization": "joint", "solver.method": "rk4"},
        {"model.laplacian_heads": 1, "model.values": "gaussian", "model.sign": "ascent"},
        {"solver.method": "jko", "solver.T": 0.05},
    ],
)
def test_telescoping_identity(over):
    """E(X_K; D_K) − E(X_0; D_0) = Σ weight parts + Σ token parts, to round-off, at every record."""
    res = wflow.simulate(small_config(**over))
    dE = res.energy - res.energy[0]
    tele = dE - res.weight_work - res.token_work
    assert np.max(np.abs(tele)) <= 1e-12 * max(1.0, np.max(np.abs(res.energy)))
    np.testing.assert_array_equal(res.ledger_telescoping.shape, res.energy.shape)
    assert np.max(np.abs(res.ledger_telescoping)) <= 1e-12 * np.max(np.abs(res.energy))
    # the weight part splits exactly into drift + martingale + realised Itô
    np.testing.assert_allclose(res.weight_work, res.drift_work + res.martingale + res.ito_realised,
                               rtol=0, atol=1e-13)


@pytest.mark.parametrize("method,min_order", [("euler", 0.9), ("heun", 1.8), ("rk4", 1.8)])
def test_ledger_residual_order_oscillating(method, min_order):
    """Deterministic oscillating weights (shared phase, H = 10, n = 24, T = 0.6): the ledger
    residual → 0 at order min(p, 2). The residuals (≥ 8e-7 at the finest Δt) stay far above
    round-off; the user guide's table (n = 50, T = 2, four Δt) is `wflow study energy`."""
    errs = []
    dts = [0.02, 0.01, 0.005]
    for dt in dts:
        cfg = {
            "model": {"n": 24, "heads": 10},
            "init": {"seed": 3},
            "weights": {"process": "oscillating", "phase": "shared", "noise_var": 0.0},
            "solver": {"method": method, "dt": dt, "T": 0.6, "record_every": int(round(0.6 / dt)),
                       "paths": 1},
            "diagnostics": {"clustering": False},
        }
        res = wflow.simulate(cfg)
        errs.append(res.ledger_residual[-1, 0])
    order = fit_order(dts, errs)
    assert order >= min_order, (errs, order)


def test_ou_exact_ledger_closes_paper_residual_does_not():
    """OU, H = 10, head normalisation: the exact ledger closes as Δt → 0; the paper's residual
    stays near ∫(G² − 𝒟) (G² ≠ 𝒟 for unequal heads)."""
    led, pap, gap = [], [], []
    dW = brownian_increments(400, (2, 10, 3, 3), 1.0 / 400, np.random.default_rng(0))
    for dt in (0.02, 0.01, 0.005):
        cfg = {
            "model": {"n": 40, "heads": 10},
            "init": {"seed": 1},
            "weights": {"process": "ou", "noise_var": 2.0},
            "solver": {"dt": dt, "T": 1.0, "record_every": int(round(1.0 / dt)), "paths": 2},
            "diagnostics": {"clustering": False},
        }
        # one Brownian path, refined across Δt
        sim = Simulation(cfg, process=DrivenOU(dW, 1.0 / 400, rate=1.0, noise_var=2.0))
        r = sim.run()
        led.append(np.mean(np.abs(r.ledger_residual[-1])))
        pap.append(np.mean(np.abs(r.paper_residual[-1])))
        gap.append(np.mean(np.abs(r.int_G2[-1] - r.int_dissipation[-1])))
    assert led[0] > led[1] > led[2]
    assert fit_order([0.02, 0.01, 0.005], led) > 0.8
    assert pap[-1] > 10 * led[-1]
    assert 0.5 * gap[-1] < pap[-1] < 2.0 * gap[-1]


def test_ito_realised_vs_expected_sqrt_dt():
    """Refining one Brownian path: Σ realised Itô − Σ Δt Itô_expected shrinks like √Δt."""
    T, P, H, d = 0.5, 12, 2, 3
    dt_fine = T / 1024
    rng = np.random.default_rng(42)
    dW = brownian_increments(1024, (P, H, d, d), dt_fine, rng)
    dts = [T / 32, T / 64, T / 128, T / 256, T / 512]
    diffs = []
    for dt in dts:
        cfg = {
            "model": {"n": 16, "heads": H, "beta": 1.0},
            "init": {"seed": 5},
            "weights": {"process": "ou", "noise_var": 2.0},
            "solver": {"dt": dt, "T": T, "record_every": int(round(T / dt)), "paths": P},
            "diagnostics": {"clustering": False},
        }
        sim = Simulation(cfg, process=DrivenOU(dW, dt_fine, rate=1.0, noise_var=2.0))
        r = sim.run()
        diffs.append(np.sqrt(np.mean((r.ito_realised[-1] - r.int_ito_expected[-1]) ** 2)))
    slope = fit_order(dts, diffs)
    assert 0.3 < slope < 0.75, (diffs, slope)


def test_given_process_sets_the_ito_term():
    """Simulation(process=…) moves the weights with that process, whose noise_var sets the
    expected Itô rate (a frozen process has none)."""
    dW = brownian_increments(8, (1, 1, 3, 3), 0.01, np.random.default_rng(0))
    cfg = {"model": {"n": 6, "heads": 1}, "weights": {"process": "frozen"},
           "solver": {"dt": 0.01, "T": 0.08, "paths": 1, "backend": "numpy"}}
    sim = Simulation(cfg, process=DrivenOU(dW, 0.01, noise_var=0.5))
    assert isinstance(sim.process, DrivenOU) and sim.process.needs_ito
    r = sim.run()
    assert np.all(r.ito_expected[1:] > 0) and np.all(np.isfinite(r.ledger_residual))
    assert not Simulation(cfg).process.needs_ito


@pytest.mark.parametrize("norm", ["joint", "none"])
def test_gradient_flow_identities_every_record(norm):
    res = wflow.simulate(small_config(**{"model.normalization": norm}))
    if norm == "joint":
        np.testing.assert_allclose(res.G2_hm, res.dissipation, rtol=1e-10, atol=0)
    else:
        np.testing.assert_allclose(res.v2_mean, res.dissipation, rtol=1e-10, atol=0)


def test_paper_balance_terms_match_definitions():
    """dEdt_drift = ⟨∂_D E, f⟩ and ito_expected = β g²/4 · ito_sum at the recorded (X_k; D_k)."""
    cfg = small_config(**{"output.store_weights": True, "model.beta": 0.8})
    res = wflow.simulate(cfg)
    for r in (0, len(res.t) - 1):
        for p in range(2):
            F = wflow.field(res.X[r, p], res.D[r, p], beta=0.8)
            f = np.eye(3) - res.D[r, p]
            assert res.dEdt_drift[r, p] == pytest.approx(np.sum(F.dE_dD * f), rel=1e-12)
            assert res.ito_expected[r, p] == pytest.approx(0.8 * 2.0 / 4 * F.ito_sum, rel=1e-12)
            assert res.energy[r, p] == pytest.approx(F.energy, rel=1e-13)


def test_w2_geodesic_analytic_cases():
    from wflow.geometry import sphere
    from wflow.model.diagnostics import w2_geodesic

    rng = np.random.default_rng(3)
    X = sphere.uniform(15, 3, rng)
    assert w2_geodesic(X, X[rng.permutation(15)]) < 1e-7
    # two Dirac masses: W₂ = the geodesic distance
    a, b = X[:1], X[1:2]
    assert w2_geodesic(a, b) == pytest.approx(float(sphere.geodesic_distance(a, b)[0]), rel=1e-12)
    # a rigid rotation by angle θ about the pole moves every point on the equator by θ
    th = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    E = np.stack([np.cos(th), np.sin(th), 0 * th], axis=1)
    R = np.array([[np.cos(0.1), -np.sin(0.1), 0], [np.sin(0.1), np.cos(0.1), 0], [0, 0, 1]])
    assert w2_geodesic(E, E @ R.T) == pytest.approx(0.1, rel=1e-9)


def test_metric_speed_matches_velocity():
    """W₂ between successive records / Δt ≈ (mean |v|²)^{1/2} for short record intervals
    (the coupling is the identity and tokens move along near-geodesics)."""
    cfg = small_config(**{"diagnostics.w2": True, "solver.record_every": 2, "solver.dt": 0.001,
                          "solver.T": 0.021, "weights.process": "frozen", "solver.method": "rk4"})
    r = wflow.simulate(cfg)
    speed = np.sqrt(r.v2_mean)
    mid = 0.5 * (speed[1:] + speed[:-1])
    np.testing.assert_allclose(r.metric_speed[1:], mid, rtol=2e-3)
    assert np.all(np.isnan(r.w2_step[0]))


def test_per_step_ledger_sums_to_the_cumulative_series():
    """step_*[r, j] holds step (r − 1)·record_every + j; their running sums are the cumulative
    series at the records (the final, shorter interval is NaN-padded)."""
    res = wflow.simulate(small_config(**{"solver.T": 0.23, "solver.record_every": 5}))
    assert res.t[-1] == pytest.approx(0.23) and res.step_token_part.shape == (len(res.t), 5, 2)
    assert np.all(np.isnan(res.step_token_part[0]))
    assert np.all(np.isnan(res.step_token_part[-1, 3:])) and np.all(np.isfinite(res.step_token_part[-1, :3]))
    for step, cum in (("step_weight_part", "weight_work"), ("step_token_part", "token_work"),
                      ("step_drift", "drift_work"), ("step_martingale", "martingale"),
                      ("step_ito_realised", "ito_realised"), ("step_ledger_residual", "ledger_residual")):
        run = np.cumsum(np.nansum(res[step], axis=1), axis=0)
        np.testing.assert_allclose(run, res[cum], rtol=0, atol=1e-13, err_msg=step)


@pytest.mark.parametrize("over", [{}, {"model.d": 4}, {"model.normalization": "joint",
                                                   "solver.method": "heun"}])
def test_paired_evaluations_same_bits(monkeypatch, over):
    """With the ledger on, the run loop evaluates (X_{k+1}; D_k) and the next step's
    (X_{k+1}; D_{k+1}) as one batch of 2P paths where that is exact (the symmetric d = 3 pass;
    d = 4 takes two calls): every recorded series equals, bit for bit, a run with two calls."""
    from wflow import kernels as K
    from wflow.model.attention import AttentionModel

    batches = []
    fused = K.fused_pass

    def spy(X, *a, **kw):
        batches.append(np.shape(X)[0])
        return fused(X, *a, **kw)

    monkeypatch.setattr(K, "fused_pass", spy)
    cfg = small_config(**over)
    a = wflow.simulate(cfg)
    P = cfg["solver"]["paths"]
    assert (2 * P in batches) == (over.get("model.d", 3) == 3)
    monkeypatch.delattr(AttentionModel, "evaluate_pair")
    batches.clear()
    b = wflow.simulate(cfg)
    assert 2 * P not in batches
    assert set(a.keys()) == set(b.keys())
    for k in a.keys():
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
