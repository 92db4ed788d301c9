"""Adaptive steps [model §6d]: the controller's global error against the tolerance, per-path
independence, breakpoints hit exactly, record times, and the refusals."""

import h5py
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import wflow
from wflow.engine.driver import run_to_file
from wflow.engine.run import Simulation
from wflow.engine.setup import record_times
from wflow.errors import ConfigError
from wflow.model.attention import AttentionModel
from wflow.stepping.adaptive import Adaptive, hermite
from wflow.stepping.integrators import TABLEAUX

BETA, T, THETA0 = 1.5, 3.0, 1.0
BASE = ['solver.adaptive=true', 'solver.method="dopri5"', 'weights.process="frozen"',
        'model.n=6', 'model.d=3', 'solver.T=1.0', 'solver.dt=0.01', 'solver.record_every=10',
        'solver.backend="numpy"']


def _two_tokens(name, tol, sigma=1.0):
    """Two tokens, D = V = I, head normalisation: ρ = ⟨x₁, x₂⟩ obeys
    dρ/dt = 2σ(1 − ρ²)/(1 + e^{β(1−ρ)}) [test_integrators]; |ρ(T) − ρ_exact(T)|."""
    f = lambda t, r: 2 * sigma * (1 - r**2) / (1 + np.exp(BETA * (1 - r)))
    ref = solve_ivp(f, (0, T), [np.cos(THETA0)], method="DOP853", rtol=1e-13,
                    atol=1e-15).y[0, -1]
    X0 = np.array([[[1.0, 0.0, 0.0], [np.cos(THETA0), np.sin(THETA0), 0.0]]])
    M = AttentionModel(beta=BETA, backend="numpy")
    sol = Adaptive(TABLEAUX[name], tol, tol, 0.01, 100_000)
    Xr, _, st = sol.solve(lambda Y, D, t: sigma * M.velocity(Y, D), X0, np.eye(3)[None, None],
                          T, [0.0, T])
    return abs(Xr[-1, 0, 0] @ Xr[-1, 0, 1] - ref), st


@pytest.mark.parametrize("name", ["bs32", "dopri5", "tsit5"])
def test_global_error_tracks_tolerance(name):
    """The global error at T against rtol = atol = tol over four decades (1e-5 … 1e-9):
    log–log slope near 1 (0.7–1.3: the error is proportional to tol only asymptotically, and
    the fifth-order pairs take 12–34 steps here; measured bs32 0.98, dopri5 0.79, tsit5
    0.84), and the error never above 10·tol."""
    tols = 10.0 ** -np.arange(5, 10)
    errs = np.array([_two_tokens(name, tol)[0] for tol in tols])
    slope = np.polyfit(np.log(tols), np.log(errs), 1)[0]
    assert 0.7 < slope < 1.3, (errs, slope)
    assert np.all(errs < 10 * tols), errs


def test_hermite_is_cubic_exact():
    """The dense output reproduces every cubic exactly (order 3)."""
    p = np.poly1d([2.0, -1.0, 0.5, 3.0])
    y = hermite(p(1.0), p(1.5), p.deriv()(1.0), p.deriv()(1.5), 0.5, 0.3)
    assert y == pytest.approx(p(1.15), abs=1e-14)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_path_alone_equals_path_in_batch(backend):
    """Each path is controlled on its own: path 2 of a batch of 4 (its own tokens) equals,
    bit for bit, the run of that path alone (init.first_path = 2) — tokens, steps, counts."""
    opts = BASE + ["init.per_path_tokens=true", 'init.tokens="uniform"', "model.beta=4.0",
                   f'solver.backend="{backend}"']
    batch = wflow.simulate(overrides=opts + ["solver.paths=4"])
    alone = wflow.simulate(overrides=opts + ["solver.paths=1", "init.first_path=2"])
    np.testing.assert_array_equal(batch.X[:, 2], alone.X[:, 0])
    for name in ("steps_accepted", "steps_rejected", "field_evals", "step_size", "energy"):
        np.testing.assert_array_equal(batch[name][:, 2], alone[name][:, 0])
    # the paths took different steps (else the test would not tell)
    assert len(set(batch.steps_accepted[-1])) > 1


def test_breakpoints_hit_exactly():
    """Every jump time is a step end: the field is evaluated at t_b exactly (the last stage
    of the step ending there with the old weights, the first of the next with the new), and
    no stage elsewhere uses the weights of another layer."""
    M = AttentionModel(beta=2.0, backend="numpy")
    seen = []

    def field(Y, D, t):
        seen.extend(zip(t.tolist(), D[:, 0, 0, 0].tolist()))
        return M.velocity(Y, D)

    rng = np.random.default_rng(1)
    X0 = wflow.geometry.sphere.normalize(rng.standard_normal((2, 5, 3)))
    jumps = [0.3, 0.7 + 1e-9, 1.1]
    value = lambda t: 1.0 + sum(t >= b for b in jumps)
    reset = lambda t: value(t) * np.eye(3)[None]
    sol = Adaptive(TABLEAUX["bs32"], 1e-6, 1e-8, 0.05, 10_000)
    sol.solve(field, X0, np.broadcast_to(np.eye(3), (2, 1, 3, 3)), 1.5, [0.0, 1.5],
              breakpoints=jumps, reset=reset)
    for b in jumps:  # the last stage of the step ending at t_b (left limit), then the new
        assert {D for t, D in seen if t == b} == {value(b) - 1, value(b)}, b
    assert all(D == value(t) for t, D in seen if t not in jumps), "a stage crossed a jump"


def test_layers_breakpoints_in_a_run():
    """A layers run under adaptive steps records the new layer's weights from its start on."""
    layers = ('weights.layers=[{duration = 0.35, weights = "identity"}, '
              '{duration = 0.4, weights = "symmetric_gaussian", seed = 3}]')
    r = wflow.simulate(overrides=BASE + ['weights.process="layers"', layers,
                                         "output.store_weights=true", "solver.paths=1",
                                         "solver.stop_at_records=true",
                                         "solver.record_every=5"])
    k = np.flatnonzero(np.isclose(r.t, 0.35))[0]
    np.testing.assert_array_equal(r.D[k - 1, 0], r.D[0, 0])
    assert not np.array_equal(r.D[k, 0], r.D[0, 0])
    assert np.all(np.isfinite(r.X))


def test_oscillating_weights_follow_their_ode():
    """Oscillating weights are integrated with the tokens: D(t) against the exact solution
    P(t) + e^{−t}(D(0) − P(0)) of dD/dt = F(t) − D, within a few tolerances."""
    r = wflow.simulate(overrides=BASE + ['weights.process="oscillating"', "solver.paths=1",
                                         "output.store_weights=true", "solver.rtol=1e-8",
                                         "solver.atol=1e-10", "solver.stop_at_records=true"])
    from wflow.model.processes import Oscillating

    osc = Oscillating(3, 1)
    D0 = r.D[0, 0]
    for t, D in zip(r.t, r.D[:, 0]):
        exact = osc.periodic_solution(t) + np.exp(-t) * (D0 - osc.periodic_solution(0.0))
        np.testing.assert_allclose(D, exact, atol=1e-6)


def test_geometric_record_times(tmp_path):
    """Geometric records: the adaptive run records at t_j = t₁(T/t₁)^{j/(N−1)}; a fixed
    stepper at the nearest steps; the file says which."""
    geo = ['solver.record_times="geometric"', "solver.records=6", "solver.first_record=0.02"]
    times = np.concatenate([[0.0], 0.02 * (1.0 / 0.02) ** (np.arange(6) / 5)])
    r = wflow.simulate(overrides=BASE + geo)
    np.testing.assert_allclose(r.t, times, rtol=1e-14)
    fixed = [o for o in BASE if not o.startswith("solver.adaptive")] + geo
    f = wflow.simulate(overrides=fixed)
    np.testing.assert_allclose(f.t, np.round(times / 0.01) * 0.01, atol=1e-12)
    assert np.all(np.isfinite(f.ledger_residual)) and "step_ledger_residual" not in f.keys()
    path = run_to_file(overrides=fixed + ["solver.T=0.5"], path=tmp_path / "g.h5")
    with h5py.File(path, "r") as h:
        assert h.attrs["record_times"] == "geometric"
    cfg = Simulation(None, fixed).config
    assert record_times(cfg)[-1] == 1.0


@pytest.mark.parametrize("extra, key", [
    (['solver.method="rk4"'], "solver.method"),
    (["solver.rtol=0"], "solver.rtol"),
    (["solver.atol=1.0"], "solver.atol"),
    (['solver.representation="density"', 'solver.method="ssprk3"', 'init.tokens="uniform"'],
     "solver.method"),
    (['weights.process="ou"', "weights.noise_var=1.0"], "weights.process"),
])
def test_refusals_name_the_key(extra, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        Simulation(None, BASE + extra)


def _equiangular_time(n, beta, rho1):
    r"""GLPR's equiangular reduction: n pairwise orthogonal tokens in d ≥ n, H = 1, D = V = I,
    head normalisation, ascent, stay equiangular with ρ = ⟨x_i, x_j⟩ (i ≠ j) and

    .. math:: \dot\rho = \frac{2 e^{\beta\rho}(1 - \rho)(1 + (n-1)\rho)}{e^\beta + (n-1)e^{\beta\rho}},

    (from v_i = Σ_j e^{βρ_ij}(x_j − ρ_ij x_i)/Z_i); the time ρ first reaches ρ₁ from 0."""
    from scipy.integrate import quad

    rate = lambda r: (2 * np.exp(beta * r) * (1 - r) * (1 + (n - 1) * r)
                      / (np.exp(beta) + (n - 1) * np.exp(beta * r)))
    lo, hi = sorted((0.0, rho1))
    t = quad(lambda r: 1 / rate(r), lo, hi, epsabs=1e-13, epsrel=1e-13)[0]
    return t


@pytest.mark.parametrize("tol, within", [(1e-6, 1e-4), (1e-10, 1e-6)])
def test_event_time_against_equiangular_ode(tol, within):
    """The event min_cosine ≥ 1/2 of four orthogonal tokens in d = 4 (β = 2, ascent) at the
    closed-form crossing time; the located time's error is that of the dense output (order
    3, measured 1.4e-5 at tol 1e-6 and 1.2e-7 at 1e-10); with event_stop the last record
    holds the state at the event."""
    n, beta = 4, 2.0
    t_star = _equiangular_time(n, beta, 0.5)
    ov = BASE + [f"model.n={n}", f"model.d={n}", f"model.beta={beta}", 'model.sign="ascent"',
                 'init.weights="identity"', "solver.T=2.0", 'solver.event="min_cosine"',
                 "solver.event_threshold=0.5", f"solver.rtol={tol}", f"solver.atol={tol}",
                 "solver.event_tol=1e-10", "solver.event_stop=true", "solver.paths=2"]
    r = Simulation(None, ov, tokens=np.eye(n)).run()
    assert np.all(np.abs(r.event_time[0] - t_star) < within), (r.event_time[0], t_star)
    assert r.t[-1] >= r.event_time[0, 0] and r.t[-1] < 2.0
    np.testing.assert_allclose(r.min_cosine[-1], 0.5, atol=1e-6)


def test_event_refusals():
    with pytest.raises(ConfigError, match=r"solver\.event"):
        Simulation(None, BASE + ['solver.event="energy"'])
    fixed = [o for o in BASE if not o.startswith("solver.adaptive")]
    with pytest.raises(ConfigError, match=r"solver\.event"):
        Simulation(None, fixed + ['solver.event="min_cosine"'])


def test_max_steps_stops_the_run():
    from wflow.errors import NumericalError

    with pytest.raises(NumericalError, match=r"solver\.max_steps = 3"):
        wflow.simulate(overrides=BASE + ["solver.max_steps=3", "solver.rtol=1e-9"])


@pytest.mark.parametrize("name", ["merged_fraction", "n_clusters", "min_cosine",
                                  "order_parameter", "variance", "spectral_rank"])
def test_event_statistic_is_the_series_value_per_path(name):
    """The event's statistic (one statistic, on the batch of paths that just stepped) has the
    bits of the recorded series computed path by path: an event does not depend on which
    other paths stepped with it."""
    from wflow.model.diagnostics import clustering_series, clustering_statistic

    rng = np.random.default_rng(4)
    for n, d in ((32, 2), (12, 3), (9, 8)):
        X = rng.standard_normal((7, n, d))
        X[:3, : n // 2] = X[:3, :1]  # clustered paths: merged pairs and few components
        X /= np.linalg.norm(X, axis=-1, keepdims=True)
        got = clustering_statistic(X, name, 0.1, 2000, 0.999)
        for j in range(7):
            want = clustering_series(X[j : j + 1], 0.1, 2000, 0.999)[name]
            assert got[j : j + 1].tobytes() == np.asarray(want, dtype=float).tobytes()


def test_record_steps_without_a_list_of_steps():
    """The record steps of a uniform grid, arithmetically, against the set they stand for,
    and a run of 10¹² steps holds none of them."""
    from wflow.engine.setup import RecordSteps

    for nsteps, every in ((0, 1), (1, 5), (10, 5), (11, 5), (17, 4), (400, 5), (7, 7)):
        want = sorted(set(range(0, nsteps + 1, every)) | {nsteps})
        rs = RecordSteps(nsteps, every)
        assert list(rs) == want and len(rs) == len(want)
        assert [k for k in range(-1, nsteps + 3) if k in rs] == want
        assert [rs.before(k) for k in range(-1, nsteps + 3)] == [
            sum(1 for s in want if s < k) for k in range(-1, nsteps + 3)]
    big = RecordSteps(10**12, 5)
    assert len(big) == 2 * 10**11 + 1 and 10**12 in big and 10**12 - 1 not in big
    assert big.before(10**12 + 1) == len(big)


def test_a_step_below_the_floor_stops_in_one_line():
    """A field that is undefined from t = 0.5 on (NaN at every stage past it): the
    controller shrinks the step toward the singularity until it falls below the floor,
    then stops (NumericalError naming the step size, the path and the time) instead of
    rejecting forever; a field non-finite at the start stops at once."""
    from wflow.errors import NumericalError
    from wflow.stepping.adaptive import H_FLOOR, Adaptive
    from wflow.stepping.integrators import TABLEAUX

    def rot(Y):  # a rotation about e_3: tangent, smooth
        return np.stack([-Y[..., 1], Y[..., 0], np.zeros_like(Y[..., 0])], axis=-1)

    def field(Y, D, t):
        return np.where((np.asarray(t) < 0.5)[:, None, None], rot(Y), np.nan)

    X0 = np.array([[[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]]])
    D0 = np.zeros((1, 1, 3, 3))
    solver = Adaptive(TABLEAUX["bs32"], 1e-8, 1e-10, 0.01, 10**7)
    with pytest.raises(NumericalError, match=r"step size .* on path 0 at t = 0\.5 is below "
                                             r"the floor .*error estimate is not finite"):
        solver.solve(field, X0, D0, 1.0, np.array([0.0, 1.0]))
    assert H_FLOOR < 1e-13
    with pytest.raises(NumericalError, match=r"non-finite field on path 0 at t = 0"):
        solver.solve(lambda Y, D, t: np.full_like(Y, np.inf), X0, D0, 1.0, np.array([0.0, 1.0]))
