"""Tests of wflow.model.weights and wflow.model.processes against the mathematics of [model §5]
(not against the code).

Statistical checks allow Z = 5 standard errors derived from the sample size:
a sample mean of n iid values with variance v within 5·sqrt(v/n); a sample variance
(Gaussian values) within 5·v·sqrt(2/(n−1)). All seeds are fixed.
"""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

from wflow.errors import ConfigError
from wflow.model.processes import (
    FromFile,
    Frozen,
    Layers,
    OrnsteinUhlenbeck,
    Oscillating,
    make_process,
)
from wflow.model.weights import check_weights, initial_weights, load_weight_file

Z = 5.0


def gens(seed, P):
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(P)]


def sym_random(rng, shape):
    X = rng.standard_normal(shape)
    return X + np.swapaxes(X, -1, -2)


def swap(A):
    return np.swapaxes(A, -1, -2)


def assert_mean(x, mu, var):
    x = np.ravel(x)
    assert abs(x.mean() - mu) <= Z * np.sqrt(var / x.size), (x.mean(), mu)


def assert_var(x, var):
    x = np.ravel(x)
    n = x.size
    assert abs(x.var(ddof=1) - var) <= Z * var * np.sqrt(2 / (n - 1)), (x.var(ddof=1), var)


def one_line_error(match, fn, *args, **kw):
    with pytest.raises(ConfigError, match=match) as exc:
        fn(*args, **kw)
    assert "\n" not in str(exc.value)
    return str(exc.value)


def F3(t):
    """[model §5], d = 3, written out by hand."""
    return np.array([
        [2 + 1.5 * np.cos(t), np.sin(2 * t), np.sin(t)],
        [np.sin(2 * t), 2 + 1.5 * np.sin(t), np.cos(2 * t)],
        [np.sin(t), np.cos(2 * t), 2 + 1.5 * np.cos(t + np.pi / 4)],
    ])


def F2(t):
    """[model §5], d = 2."""
    return np.array([[2 + 1.5 * np.cos(t), np.sin(2 * t)], [np.sin(2 * t), 2 - 1.5 * np.cos(t)]])


def run(proc, D, t0, dt, K, rngs=None):
    for k in range(K):
        D = proc.step(D, t0 + k * dt, dt, rngs)
    return D, t0 + K * dt


# --------------------------------------------------------------------------- initial weights


def test_symmetric_gaussian_moments():
    D = initial_weights("symmetric_gaussian", 20000, 3, np.random.default_rng(0))
    assert D.shape == (20000, 3, 3) and np.array_equal(D, swap(D))
    diag = np.concatenate([D[:, a, a] for a in range(3)])
    off = np.concatenate([D[:, a, b] for a, b in [(0, 1), (0, 2), (1, 2)]])
    assert_mean(diag, 0.0, 4.0)
    assert_var(diag, 4.0)  # 2 Ξ_aa
    assert_mean(off, 0.0, 2.0)
    assert_var(off, 2.0)  # Ξ_ab + Ξ_ba


def test_symmetric_gaussian_draw_order():
    X = np.random.default_rng(3).standard_normal((2, 4, 4))
    D = initial_weights("symmetric_gaussian", 2, 4, np.random.default_rng(3))
    np.testing.assert_array_equal(D, X + X.transpose(0, 2, 1))


def test_identity_and_given():
    I3 = initial_weights("identity", 3, 4, None)
    np.testing.assert_array_equal(I3, np.tile(np.eye(4), (3, 1, 1)))
    A = sym_random(np.random.default_rng(1), (2, 3, 3))
    B = A.copy()
    B[0, 0, 1] += 1e-13 * np.abs(A).max()  # within rtol 1e-10 of max|entry|
    out = initial_weights("given", 2, 3, None, given=B)
    assert np.array_equal(out, swap(out)) and np.allclose(out, A, atol=1e-12)
    out[0, 0, 0] = 99.0
    assert B[0, 0, 0] != 99.0  # a copy


@pytest.mark.parametrize(
    "A, H, d, match",
    [
        (np.zeros((2, 3, 4)), 2, 3, "shape"),
        (np.zeros((3, 3, 3)), 2, 3, "shape"),
        (np.zeros((3, 3)), None, None, "shape"),
        (np.array([[[1.0, np.nan], [np.nan, 1.0]]]), 1, 2, "NaN"),
        (np.array([[[1.0, 2.0], [2.0 + 1e-6, 1.0]]]), 1, 2, "not symmetric"),
        (np.array([[["a", "b"], ["b", "a"]]]), 1, 2, "numeric"),
    ],
)
def test_check_weights_rejects(A, H, d, match):
    msg = one_line_error(match, check_weights, A, H, d, name="init.weights")
    assert msg.startswith("init.weights")


def test_initial_weights_unknown_kind():
    one_line_error("allowed values", initial_weights, "cauchy", 1, 3, np.random.default_rng(0))


# --------------------------------------------------------------------------- Ornstein-Uhlenbeck


@pytest.mark.parametrize(
    "rate, mean, noise_var",
    [(1.0, None, 2.0), (2.0, [[1.0, 0.5, 0.0], [0.5, -1.0, 0.2], [0.0, 0.2, 0.3]], 0.5)],
)
def test_ou_exact_stationary_law(rate, mean, noise_var):
    P, d, dt, K = 4000, 3, 0.5, 12  # T = 6 >= 6/λ: variance within e^{-12} of stationary
    proc = OrnsteinUhlenbeck(rate, mean, noise_var, scheme="exact", d=d)
    M = np.eye(d) if mean is None else np.asarray(mean)
    D, _ = run(proc, np.broadcast_to(M, (P, 1, d, d)).copy(), 0.0, dt, K, gens(11, P))
    var_diag, var_off = noise_var / (2 * rate), noise_var / (4 * rate)
    assert np.allclose(proc.stationary_variance(), (var_diag, var_off))
    for a in range(d):
        for b in range(a, d):
            v = var_diag if a == b else var_off
            assert_mean(D[:, 0, a, b], M[a, b], v)
            assert_var(D[:, 0, a, b], v)


def test_ou_exact_one_step_conditional_law():
    P, d, lam, g2, dt = 4000, 3, 1.5, 0.8, 0.3
    D0 = np.array([[2.0, -1.0, 0.5], [-1.0, 0.0, 0.3], [0.5, 0.3, -2.0]])
    M = 0.5 * np.eye(d)
    proc = OrnsteinUhlenbeck(lam, 0.5, g2, scheme="exact")
    D1 = proc.step(np.broadcast_to(D0, (P, 1, d, d)), 0.0, dt, gens(5, P))
    mean = M + np.exp(-lam * dt) * (D0 - M)
    var = g2 * (1 - np.exp(-2 * lam * dt)) / (2 * lam)
    for a in range(d):
        for b in range(a, d):
            v = var if a == b else var / 2
            assert_mean(D1[:, 0, a, b], mean[a, b], v)
            assert_var(D1[:, 0, a, b], v)


def test_ou_euler_maruyama_mean_converges_at_order_one():
    rng = np.random.default_rng(2)
    lam, T = 1.3, 1.0
    M = sym_random(rng, (3, 3)) / 2
    D0 = sym_random(rng, (1, 2, 3, 3))
    exact = M + np.exp(-lam * T) * (D0 - M)
    proc = OrnsteinUhlenbeck(lam, M, 0.0, scheme="euler_maruyama")
    dts = np.array([0.1, 0.05, 0.025, 0.0125])
    errs = [np.abs(run(proc, D0, 0.0, dt, round(T / dt))[0] - exact).max() for dt in dts]
    order = np.polyfit(np.log(dts), np.log(errs), 1)[0]
    assert abs(order - 1) < 0.2, order


def test_ou_euler_maruyama_law_after_k_steps():
    P, d, lam, g2, dt, K = 4000, 2, 1.0, 2.0, 0.1, 10
    D0 = np.array([[3.0, 1.0], [1.0, -1.0]])
    proc = OrnsteinUhlenbeck(lam, None, g2, scheme="euler_maruyama")
    D, _ = run(proc, np.broadcast_to(D0, (P, 1, d, d)).copy(), 0.0, dt, K, gens(8, P))
    r = 1 - lam * dt
    mean = np.eye(d) + r**K * (D0 - np.eye(d))
    var = g2 * dt * sum(r ** (2 * j) for j in range(K))
    for a, b in [(0, 0), (1, 1), (0, 1)]:
        v = var if a == b else var / 2
        assert_mean(D[:, 0, a, b], mean[a, b], v)
        assert_var(D[:, 0, a, b], v)


def test_ou_noise_increment_is_the_drawn_noise():
    P, H, d, dt, g2 = 2000, 2, 3, 0.04, 0.7
    rng = np.random.default_rng(4)
    D = sym_random(rng, (P, H, d, d))
    proc = OrnsteinUhlenbeck(0.8, None, g2, scheme="euler_maruyama")
    D1 = proc.step(D, 1.0, dt, gens(9, P))
    xi = proc.noise_increment(D, D1, 1.0, dt)
    Xi = np.stack([r.standard_normal((H, d, d)) for r in gens(9, P)])
    np.testing.assert_allclose(xi, np.sqrt(g2 * dt) * (Xi + swap(Xi)) / 2, atol=1e-12)
    diag = np.stack([xi[..., a, a] for a in range(d)])
    off = np.stack([xi[..., a, b] for a, b in [(0, 1), (0, 2), (1, 2)]])
    assert_mean(diag, 0.0, g2 * dt)
    assert_var(diag, g2 * dt)
    assert_var(off, g2 * dt / 2)


def test_ou_deterministic_noise_increment():
    D = sym_random(np.random.default_rng(6), (3, 2, 3, 3))
    em = OrnsteinUhlenbeck(1.7, 0.3, 0.0, scheme="euler_maruyama")
    assert em.deterministic
    D1 = em.step(D, 0.0, 0.1, None)  # no generators needed: no draws at all
    assert np.all(em.noise_increment(D, D1, 0.0, 0.1) == 0)
    # exact transition: ξ = (e^{-λΔt} − 1 + λΔt)(D − M) = O(Δt²)
    ex = OrnsteinUhlenbeck(1.7, 0.3, 0.0, scheme="exact")
    for dt in (0.1, 0.01):
        xi = ex.noise_increment(D, ex.step(D, 0.0, dt), 0.0, dt)
        want = (np.exp(-1.7 * dt) - 1 + 1.7 * dt) * (D - 0.3 * np.eye(3))
        np.testing.assert_allclose(xi, want, atol=1e-13)


def test_ou_zero_noise_makes_no_draws():
    rngs = gens(1, 2)
    state = [r.bit_generator.state for r in rngs]
    OrnsteinUhlenbeck(1.0, None, 0.0, "exact").step(np.zeros((2, 1, 2, 2)), 0.0, 0.1, rngs)
    assert [r.bit_generator.state for r in rngs] == state


@settings(max_examples=30, deadline=None)
@given(
    st.floats(0.01, 1.0), st.floats(0.01, 1.0), st.floats(0.0, 10.0), st.floats(0.1, 3.0)
)
def test_exact_schemes_are_semigroups(a, b, t, lam):
    """Two exact steps a, b equal one step a + b (deterministic flows)."""
    D = sym_random(np.random.default_rng(0), (2, 3, 3, 3))
    for proc in (OrnsteinUhlenbeck(lam, 0.5, 0.0, "exact"), Oscillating(3, 3, "spread", "exact")):
        two = proc.step(proc.step(D, t, a), t + a, b)
        np.testing.assert_allclose(two, proc.step(D, t, a + b), atol=1e-11)


# --------------------------------------------------------------------------- all processes


def all_processes(H, d):
    rng = np.random.default_rng(12)
    sets = [sym_random(rng, (H, d, d)) for _ in range(3)]
    return [
        Frozen(),
        OrnsteinUhlenbeck(1.0, None, 2.0, "euler_maruyama"),
        OrnsteinUhlenbeck(0.7, 1.5, 0.3, "exact"),
        Oscillating(d, H, "spread", "euler"),
        Oscillating(d, H, "shared", "exact"),
        Layers(sets, [0.1, 0.1, 0.1], 0.05),
        FromFile([0.0, 0.12, 0.4], np.stack(sets)),
    ]


def test_every_produced_weight_is_exactly_symmetric():
    P, H, d, dt = 3, 2, 4, 0.05
    D0 = sym_random(np.random.default_rng(13), (P, H, d, d))
    for proc in all_processes(H, d):
        D = D0
        for k in range(8):
            D_next = proc.step(D, k * dt, dt, gens(k, P))
            assert D_next.shape == (P, H, d, d) and D_next is not D
            assert np.array_equal(D_next, swap(D_next)), proc.name
            assert np.array_equal(proc.drift(D, k * dt), swap(proc.drift(D, k * dt)))
            D = D_next
        json.dumps(proc.describe())


def test_frozen():
    D = sym_random(np.random.default_rng(0), (2, 1, 3, 3))
    proc = Frozen()
    D1 = proc.step(D, 0.0, 0.1, None)
    assert np.array_equal(D1, D) and D1 is not D
    assert np.all(proc.noise_increment(D, D1, 0.0, 0.1) == 0)


@pytest.mark.parametrize("scheme", ["euler_maruyama", "exact"])
def test_reproducible_and_independent_of_batching(scheme):
    P, H, d, dt, K = 4, 2, 3, 0.1, 5
    proc = OrnsteinUhlenbeck(1.0, None, 2.0, scheme)
    D0 = sym_random(np.random.default_rng(1), (P, H, d, d))
    a, _ = run(proc, D0, 0.0, dt, K, gens(7, P))
    b, _ = run(proc, D0, 0.0, dt, K, gens(7, P))
    assert a.tobytes() == b.tobytes()
    rngs = gens(7, P)
    for p in range(P):
        alone, _ = run(proc, D0[p:p + 1], 0.0, dt, K, [rngs[p]])
        assert alone[0].tobytes() == a[p].tobytes()
    rngs = gens(7, P)
    halves = [run(proc, D0[s], 0.0, dt, K, rngs[s])[0] for s in (slice(0, 2), slice(2, 4))]
    assert np.concatenate(halves).tobytes() == a.tobytes()


# --------------------------------------------------------------------------- oscillating


def test_forcing_matches_spec_d2_d3():
    for t in (0.0, 0.7, 2.3, -4.1):
        np.testing.assert_allclose(Oscillating(3, 1).forcing(t)[0], F3(t), atol=1e-14)
        np.testing.assert_allclose(Oscillating(2, 1).forcing(t)[0], F2(t), atol=1e-14)
    t = 0.7  # the matrix of [model §5] at t = 0.7, entries computed by hand
    c, s, c2, s2 = np.cos(0.7), np.sin(0.7), np.cos(1.4), np.sin(1.4)
    want = [[2 + 1.5 * c, s2, s], [s2, 2 + 1.5 * s, c2], [s, c2, 2 + 1.5 * np.cos(0.7 + np.pi / 4)]]
    np.testing.assert_allclose(Oscillating(3, 1).forcing(t)[0], want, atol=1e-14)


def test_forcing_d5_documented_formula():
    d, t = 5, 1.3
    F = Oscillating(d, 1).forcing(t)[0]
    for a in range(d):
        assert np.isclose(F[a, a], 2 + 1.5 * np.cos(t + 2 * np.pi * a / d))
        for b in range(a + 1, d):
            w = 1 + (a + b) % 2
            assert np.isclose(F[a, b], np.sin(w * t + a * np.pi / 2))
    assert np.isclose(np.trace(F), 2 * d)


@pytest.mark.parametrize("d", [2, 3, 5])
def test_forcing_symmetric(d):
    proc = Oscillating(d, 4, "spread")
    for t in np.linspace(-3, 9, 7):
        F = proc.forcing(t)
        assert F.shape == (4, d, d) and np.array_equal(F, swap(F))


def test_phases_shared_and_spread():
    H, t = 5, 0.9
    spread = Oscillating(3, H, "spread")
    np.testing.assert_allclose(spread.phases, 2 * np.pi * np.arange(H) / H)
    for h in range(H):
        np.testing.assert_allclose(spread.forcing(t)[h], F3(t + 2 * np.pi * h / H), atol=1e-13)
    shared = Oscillating(3, H, "shared").forcing(t)
    assert all(np.array_equal(shared[h], shared[0]) for h in range(H))


def test_oscillating_drift_definition():
    H = 3
    proc = Oscillating(3, H, "spread")
    D = sym_random(np.random.default_rng(2), (2, H, 3, 3))
    want = np.stack([F3(1.1 + 2 * np.pi * h / H) for h in range(H)]) - D
    np.testing.assert_allclose(proc.drift(D, 1.1), want, atol=1e-13)


def reference_solution(D0, phases, T):
    """solve_ivp of dD_h/dt = F3(t + φ_h) − D_h with tight tolerances."""
    H = len(phases)

    def rhs(t, y):
        D = y.reshape(H, 3, 3)
        return (np.stack([F3(t + p) for p in phases]) - D).ravel()

    sol = solve_ivp(rhs, (0.0, T), D0.ravel(), method="DOP853", rtol=1e-12, atol=1e-12)
    return sol.y[:, -1].reshape(H, 3, 3)


def test_oscillating_euler_converges_at_order_one():
    H, T = 2, 2.0
    proc = Oscillating(3, H, "spread", "euler")
    D0 = sym_random(np.random.default_rng(3), (1, H, 3, 3))
    ref = reference_solution(D0[0], proc.phases, T)
    dts = np.array([0.04, 0.02, 0.01, 0.005])
    errs = []
    for dt in dts:
        D = D0
        for k in range(round(T / dt)):
            D_next = proc.step(D, k * dt, dt)
            assert np.all(proc.noise_increment(D, D_next, k * dt, dt) == 0)
            D = D_next
        errs.append(np.abs(D[0] - ref).max())
    order = np.polyfit(np.log(dts), np.log(errs), 1)[0]
    assert abs(order - 1) < 0.2, order


def test_oscillating_exact_scheme_solves_the_ode():
    H, T = 3, 2.5
    proc = Oscillating(3, H, "spread", "exact")
    D0 = sym_random(np.random.default_rng(4), (1, H, 3, 3))
    ref = reference_solution(D0[0], proc.phases, T)
    np.testing.assert_allclose(proc.step(D0, 0.0, T)[0], ref, atol=1e-9)  # one big step
    D, _ = run(proc, D0, 0.0, 0.1, 25)
    np.testing.assert_allclose(D[0], ref, atol=1e-9)


def test_periodic_solution_d5():
    """P is 2π-periodic and solves dP/dt = F − P (central differences)."""
    proc = Oscillating(5, 2, "spread")
    t, h = 0.8, 1e-5
    dP = (proc.periodic_solution(t + h) - proc.periodic_solution(t - h)) / (2 * h)
    np.testing.assert_allclose(dP, proc.forcing(t) - proc.periodic_solution(t), atol=1e-8)
    np.testing.assert_allclose(proc.periodic_solution(t + 2 * np.pi), proc.periodic_solution(t),
                               atol=1e-12)


# --------------------------------------------------------------------------- layers


def test_layers_switch_on_step_boundaries():
    rng = np.random.default_rng(5)
    sets = [sym_random(rng, (2, 3, 3)) for _ in range(3)]
    dt = 0.1
    proc = Layers(sets, [0.3, 0.26, 0.2], dt)  # 3, 2.6 -> 3, 2 steps
    assert proc.steps_per_layer == [3, 3, 2]
    assert "layer 1" in proc.rounding_note and "0.26" in proc.rounding_note
    assert "layer 0" not in proc.rounding_note and "layer 2" not in proc.rounding_note
    expected = lambda j: 0 if j < 3 else 1 if j < 6 else 2  # last set held after step 8
    D, t = np.broadcast_to(proc.at(0.0), (2, 2, 3, 3)).copy(), 0.0
    assert np.array_equal(D[0], sets[0])
    for k in range(12):
        D_next = proc.step(D, t, dt)
        t += dt  # accumulated float time: the index must still be exact
        assert all(np.array_equal(D_next[p], sets[expected(k + 1)]) for p in range(2))
        assert np.array_equal(proc.noise_increment(D, D_next, t - dt, dt), D_next - D)
        assert np.array_equal(proc.at(t), sets[expected(k + 1)])
        D = D_next


def test_layers_rounding_and_errors():
    I = np.eye(2)[None]
    assert Layers([I, 2 * I], [0.25, 0.5], 0.05).rounding_note == ""
    one_line_error("rounds to 0 steps", Layers, [I, 2 * I], [0.5, 0.02], 0.05)
    one_line_error("duration", Layers, [I], [-1.0], 0.05)
    one_line_error("same number", Layers, [I, I], [0.1], 0.05)
    one_line_error("not symmetric", Layers, [np.array([[[1.0, 2.0], [0.0, 1.0]]])], [0.1], 0.05)


# --------------------------------------------------------------------------- from file


def test_from_file_interpolation_and_drift():
    rng = np.random.default_rng(6)
    times = np.array([0.0, 0.5, 1.5])
    Dk = sym_random(rng, (3, 2, 3, 3))
    proc = FromFile(times, Dk)
    assert proc.deterministic
    for k, tk in enumerate(times):
        assert np.array_equal(proc.at(tk), Dk[k])
    np.testing.assert_allclose(proc.at(0.25), (Dk[0] + Dk[1]) / 2, atol=1e-14)
    np.testing.assert_allclose(proc.at(1.25), (Dk[1] + 3 * Dk[2]) / 4, atol=1e-14)
    assert np.array_equal(proc.at(-1.0), Dk[0]) and np.array_equal(proc.at(7.0), Dk[2])
    D = np.broadcast_to(proc.at(0.1), (2, 2, 3, 3))
    np.testing.assert_allclose(proc.drift(D, 0.1)[1], (Dk[1] - Dk[0]) / 0.5, atol=1e-13)
    np.testing.assert_allclose(proc.drift(D, 0.7)[0], Dk[2] - Dk[1], atol=1e-13)
    assert np.all(proc.drift(D, -0.5) == 0) and np.all(proc.drift(D, 1.5) == 0)
    D1 = proc.step(D, 0.1, 0.3)  # inside [0, 0.5]: the increment is the slope times dt
    np.testing.assert_allclose(D1[0], proc.at(0.4), atol=1e-14)
    np.testing.assert_allclose(proc.noise_increment(D, D1, 0.1, 0.3), 0.0, atol=1e-12)


def test_from_file_single_set_and_errors():
    W = sym_random(np.random.default_rng(7), (2, 3, 3))
    proc = FromFile(None, W)
    D = proc.step(np.zeros((1, 2, 3, 3)), 3.0, 0.1)
    assert np.array_equal(D[0], W) and np.all(proc.drift(D, 3.0) == 0)
    Dk = np.stack([W, W])
    one_line_error("strictly increasing", FromFile, [1.0, 1.0], Dk)
    one_line_error("strictly increasing", FromFile, [0.0, 1.0, 2.0], Dk)
    one_line_error("shape", FromFile, [0.0], np.zeros((2, 3)))


# --------------------------------------------------------------------------- files


def test_npz_and_hdf5_round_trip(tmp_path):
    import h5py

    rng = np.random.default_rng(8)
    D = sym_random(rng, (4, 2, 3, 3))
    t = np.array([0.0, 0.1, 0.3, 0.6])
    np.savez(tmp_path / "w.npz", D=D, t=t)
    with h5py.File(tmp_path / "w.h5", "w") as f:
        f["D"], f["t"] = D, t
    for name in ("w.npz", "w.h5"):
        out = load_weight_file(tmp_path / name)
        assert np.array_equal(out["D"], D) and np.array_equal(out["t"], t)
    np.savez(tmp_path / "one.npz", D=D[0])
    out = load_weight_file(str(tmp_path / "one.npz"))
    assert np.array_equal(out["D"], D[0]) and out["t"] is None
    np.testing.assert_array_equal(initial_weights("file", 2, 3, None, tmp_path / "w.npz"), D[0])


def _bad_files(tmp_path):
    import h5py

    W = np.tile(np.eye(3), (2, 1, 1))
    asym = W.copy()
    asym[0, 0, 1] = 0.5
    nan = W.copy()
    nan[1, 2, 2] = np.nan
    cases = {
        "nokey.npz": ({"X": W}, "key 'D' missing"),
        "asym.npz": ({"D": asym}, "key 'D'.*not symmetric"),
        "nan.npz": ({"D": nan}, "key 'D'.*NaN"),
        "ndim.npz": ({"D": np.eye(3)}, "key 'D'.*shape"),
        "tlen.npz": ({"D": np.stack([W, W]), "t": [0.0]}, "key 't'.*shape"),
        "tdec.npz": ({"D": np.stack([W, W]), "t": [1.0, 0.0]}, "key 't'.*increasing"),
        "obj.npz": ({"D": np.array([W, "x"], dtype=object)}, "cannot read"),
        "nokey.h5": ({"E": W}, "key 'D' missing"),
        "asym.hdf5": ({"D": asym}, "key 'D'.*not symmetric"),
    }
    for name, (data, match) in cases.items():
        path = tmp_path / name
        if name.endswith(".npz"):
            np.savez(path, **data)
        else:
            with h5py.File(path, "w") as f:
                for k, v in data.items():
                    f[k] = v
        yield path, match
    (tmp_path / "w.txt").write_text("D")
    yield tmp_path / "w.txt", "suffix"
    yield tmp_path / "absent.npz", "not found"


def test_weight_file_errors(tmp_path):
    for path, match in _bad_files(tmp_path):
        msg = one_line_error(match, load_weight_file, path)
        assert msg.startswith(str(path)), msg


# --------------------------------------------------------------------------- factory


def test_make_process_builds_each_process(tmp_path):
    H, d, dt = 2, 3, 0.05
    assert isinstance(make_process({"process": "frozen"}, H, d, dt), Frozen)
    ou = make_process({"process": "ou"}, H, d, dt)
    assert isinstance(ou, OrnsteinUhlenbeck)
    assert (ou.rate, ou.noise_var, ou.scheme) == (1.0, 2.0, "euler_maruyama")
    np.testing.assert_array_equal(ou.mean_matrix(d), np.eye(d))
    ou = make_process({"process": "ou", "rate": 2, "noise_var": 0, "scheme": "exact",
                       "mean": [[1, 0, 0], [0, 2, 0], [0, 0, 3]]}, H, d, dt)
    assert ou.deterministic and ou.scheme == "exact"
    np.testing.assert_array_equal(ou.mean_matrix(d), np.diag([1.0, 2.0, 3.0]))
    osc = make_process({"process": "oscillating", "phase": "spread", "scheme": "exact"}, H, d, dt)
    assert isinstance(osc, Oscillating) and (osc.phase, osc.scheme) == ("spread", "exact")
    W = sym_random(np.random.default_rng(0), (H, d, d))
    np.savez(tmp_path / "layer.npz", D=W)
    layers = make_process({"process": "layers", "layers": [
        {"duration": 0.1, "weights": "identity"},
        {"duration": 0.2, "weights": "symmetric_gaussian", "seed": 5},
        {"duration": 0.1, "weights": str(tmp_path / "layer.npz")},
    ]}, H, d, dt)
    assert layers.steps_per_layer == [2, 4, 2] and layers.rounding_note == ""
    X = np.random.default_rng(5).standard_normal((H, d, d))  # documented seeding
    np.testing.assert_array_equal(layers.sets[1], X + X.transpose(0, 2, 1))
    np.testing.assert_array_equal(layers.sets[2], W)
    np.savez(tmp_path / "traj.npz", D=np.stack([W, 2 * W, 3 * W]))
    ff = make_process({"process": "file", "file": str(tmp_path / "traj.npz")}, H, d, dt)
    np.testing.assert_allclose(ff.times, [0.0, dt, 2 * dt])  # one set per step without t
    for proc in (ou, osc, layers, ff):
        json.dumps(proc.describe())


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"process": "foo"}, "^weights.process = 'foo': allowed values are frozen, ou, "
                             "oscillating, layers, file"),  # then any registered later
        ({"process": "ou", "scheme": "rk4"}, "weights.scheme = 'rk4'"),
        ({"process": "ou", "noise_var": -1}, "weights.noise_var"),
        ({"process": "ou", "rate": "fast"}, "weights.rate"),
        ({"process": "ou", "mean": [[1, 2], [2, 1]]}, "weights.mean.*shape"),
        ({"process": "oscillating", "phase": "random"}, "weights.phase = 'random'"),
        ({"process": "oscillating", "scheme": "rk4"}, "weights.scheme"),
        ({"process": "layers"}, "weights.layers"),
        ({"process": "layers", "layers": [{"duration": 0.1, "weights": "symmetric_gaussian"}]},
         r"weights.layers\[0\].seed"),
        ({"process": "layers", "layers": [{"duration": 0.1, "weights": "identty"}]},
         r"weights.layers\[0\].weights = 'identty'"),
        ({"process": "file"}, "weights.file"),
    ],
)
def test_make_process_rejects(spec, match):
    one_line_error(match, make_process, spec, 2, 3, 0.05)


def test_make_process_file_shape_mismatch(tmp_path):
    np.savez(tmp_path / "w.npz", D=np.tile(np.eye(3), (2, 1, 1)))
    one_line_error("expected", make_process, {"process": "file", "file": str(tmp_path / "w.npz")},
                   4, 3, 0.05)


# ------------------------------------------------------- refined noise (pathwise Δt/2 checks)
@pytest.mark.parametrize("r", [2, 4])
def test_ou_refined_exact_step_equals_r_fine_steps(r):
    """Exact scheme: one step of Δt with noise_refine = r is r exact steps of Δt/r driven by the
    same draws (same generators, same order): equal to round-off, at any rate."""
    rng = np.random.default_rng(11)
    P, H, d, dt, K = 3, 2, 3, 0.2, 5
    D0 = sym_random(rng, (P, H, d, d))
    M = sym_random(rng, (d, d)) / 4
    coarse = OrnsteinUhlenbeck(1.7, M, 0.9, scheme="exact", refine=r)
    fine = OrnsteinUhlenbeck(1.7, M, 0.9, scheme="exact")
    Dc, _ = run(coarse, D0, 0.0, dt, K, gens(3, P))
    Df, _ = run(fine, D0, 0.0, dt / r, K * r, gens(3, P))
    np.testing.assert_allclose(Dc, Df, rtol=0, atol=1e-13 * np.abs(Df).max())


def test_ou_refined_em_noise_is_the_sum_of_the_fine_noise():
    """Euler–Maruyama: the coarse step's noise is g√δ Σ S_l, so one coarse step and the two fine
    steps D → D₁ → D₂ on the same draws differ by the drift's discretisation alone:
    D₂ − D_coarse = −λδ (D₁ − D) exactly (0 for λ = 0)."""
    rng = np.random.default_rng(12)
    P, H, d, dt = 4, 2, 3, 0.1
    D0 = sym_random(rng, (P, H, d, d))
    for lam in (0.0, 1.0):
        Dc = OrnsteinUhlenbeck(lam, 1.0, 2.0, refine=2).step(D0, 0.0, dt, gens(5, P))
        fine, g = OrnsteinUhlenbeck(lam, 1.0, 2.0), gens(5, P)
        D1 = fine.step(D0, 0.0, dt / 2, g)
        D2 = fine.step(D1, dt / 2, dt / 2, g)
        np.testing.assert_allclose(D2 - Dc, -lam * dt / 2 * (D1 - D0), rtol=0,
                                   atol=1e-14 * np.abs(D0).max())
    Dplain = OrnsteinUhlenbeck(1.0, 1.0, 2.0).step(D0, 0.0, dt, gens(5, P))
    assert np.abs(Dplain - Dc).max() > 0.1  # unrefined: other draws


def test_ou_refined_exact_step_has_the_exact_transition_law():
    """The combined innovation has the variance of one exact step of Δt: g² s(Δt)²."""
    P, d, lam, g2, dt, r = 4000, 2, 1.5, 0.8, 0.6, 3
    D0 = np.array([[1.0, 0.5], [0.5, -1.0]])
    proc = OrnsteinUhlenbeck(lam, 0.0, g2, scheme="exact", refine=r)
    D1 = proc.step(np.broadcast_to(D0, (P, 1, d, d)), 0.0, dt, gens(6, P))
    var = g2 * (1 - np.exp(-2 * lam * dt)) / (2 * lam)
    for a, b in [(0, 0), (1, 1), (0, 1)]:
        v = var if a == b else var / 2
        assert_mean(D1[:, 0, a, b], np.exp(-lam * dt) * D0[a, b], v)
        assert_var(D1[:, 0, a, b], v)


def test_noise_refine_config_shares_the_path_across_dt():
    """Through the config: a run at Δt with weights.noise_refine = 2 and one at Δt/2 sees the
    same Brownian path (exact scheme: the same D at the common records); without refinement
    the draws differ."""
    import wflow

    def cfg(dt, r, every):
        return {"model": {"n": 12, "heads": 2}, "init": {"seed": 3},
                "weights": {"process": "ou", "scheme": "exact", "noise_refine": r},
                "solver": {"T": 0.2, "dt": dt, "record_every": every, "paths": 2},
                "diagnostics": {"ledger": False}, "output": {"store_weights": True}}

    coarse = wflow.simulate(cfg(0.02, 2, 5))
    fine = wflow.simulate(cfg(0.01, 1, 10))
    np.testing.assert_allclose(coarse.D, fine.D, rtol=0, atol=1e-12)
    # the tokens: the time-step error alone, O(Δt), far below the noise-driven spread
    assert np.abs(coarse.X[-1] - fine.X[-1]).max() < 0.05
    plain = wflow.simulate(cfg(0.02, 1, 5))
    assert np.abs(plain.D[-1] - fine.D[-1]).max() > 0.05
    one_line_error("noise_refine", wflow.simulate, cfg(0.02, 0, 5))
