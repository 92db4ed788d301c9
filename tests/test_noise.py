r"""Token noise [model §6b]: Brownian motion on the sphere by projected Euler–Maruyama.

Tested against exact laws: the free diffusion (the scheme's own law after k steps, and its
convergence at weak order 1 to :math:`e^{-\nu(d-1)t}` and
:math:`1/d + (1 - 1/d)e^{-2\nu dt}`), the stationary law of the cosine of two interacting
tokens, and the split of the energy's change (drift, Itô term, martingale). Monte Carlo
bands are 5 standard errors of the number of independent samples, on several seeds.
"""

import numpy as np
import pytest
from conftest import small_config
from test_io import crash_in_checkpoint

import wflow
from wflow import config as wconfig
from wflow.cli import main
from wflow.engine.run import Simulation, State
from wflow.errors import ConfigError
from wflow.geometry import sphere
from wflow.model import noise
from wflow.stepping.registry import StepContext, get_stepper

Z = 5.0  # width of a Monte Carlo band, in standard errors


def _free_steps(d, nu, dt, k, N, seed):
    """k projected Euler–Maruyama steps of N independent tokens without a field (the Euler
    stepper with a zero velocity), all started at e_0: the cosines <x_k, x_0> (N,)."""
    rng = np.random.default_rng(seed)
    stepper = get_stepper("euler")
    X = np.zeros((1, N, d))
    X[..., 0] = 1.0
    zero = np.zeros_like(X)
    for _ in range(k):
        eta = np.sqrt(2 * nu * dt) * rng.standard_normal(X.shape)
        X, _ = stepper.step(StepContext(X=X, dt=dt, sigma=1.0, velocity=None, k1=zero,
                                        noise=eta))
    return X[0, :, 0]


def _band(c, exact, what):
    """Mean of the samples c within Z standard errors of ``exact``."""
    se = c.std() / np.sqrt(c.size)
    assert abs(c.mean() - exact) <= Z * se, f"{what}: {c.mean():.5f} vs {exact:.5f} (se {se:.1e})"


# ------------------------------------------------------------------ configuration
@pytest.mark.parametrize("over,text", [
    (["model.diffusion=-0.1"], ">= 0"),
    (["model.diffusion=0.5", "solver.method='heun'"], "stated SDE order"),
    (["model.diffusion=0.5", "solver.method='rk4'"], "stated SDE order"),
    (["model.diffusion=0.5", "solver.method='jko'"], "stated SDE order"),
])  # a density takes ν > 0 with any of its SSP schemes (tests/test_diffusion.py)
def test_bad_diffusion_is_one_config_error(over, text):
    with pytest.raises(ConfigError, match="model.diffusion") as e:
        wconfig.resolve(None, over)
    assert text in str(e.value) and "\n" not in str(e.value)


def test_bad_diffusion_cli_exit_2(tmp_path, capsys):
    rc = main(["run", "-o", str(tmp_path / "o.h5"), "-q", "--set", "model.diffusion=0.5",
               "--set", "solver.method='heun'"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "model.diffusion" in err
    assert not (tmp_path / "o.h5").exists()


def test_zero_diffusion_is_todays_flow():
    """ν = 0 given explicitly is the run without the key, to the bit, with no noise series."""
    a = wflow.simulate(small_config())
    b = wflow.simulate(small_config(**{"model.diffusion": 0.0}))
    assert sorted(a.keys()) == sorted(b.keys())
    assert "token_martingale" not in a.keys()
    for k in a.keys():
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# ------------------------------------------------------------------ free diffusion
@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("seed", [0, 1])
def test_free_diffusion_is_the_schemes_exact_law(d, seed):
    """After k steps E<x_k, x_0> = λ^k and E<x_k, x_0>² = 1/d + (1 − 1/d) r^k exactly
    (scheme_factors); 10 steps of Δt = 0.05, ν = 0.5, 10⁵ independent tokens."""
    k, dt, nu = 10, 0.05, 0.5
    c = _free_steps(d, nu, dt, k, 100_000, seed)
    m1, m2 = noise.scheme_moments(k, dt, nu, d)
    _band(c, m1, f"d={d} E<x,x0>")
    _band(c**2, m2, f"d={d} E<x,x0>^2")


def test_the_issues_data_point():
    """d = 5, ν = 0.5, Δt = 0.05: E<x(0.5), x(0)> = λ¹⁰ = 0.4212 against e^{-1} = 0.3679."""
    m1, _ = noise.scheme_moments(10, 0.05, 0.5, 5)
    assert m1 == pytest.approx(0.4212427, abs=1e-6)
    assert noise.free_moments(0.5, 0.5, 5)[0] == pytest.approx(np.exp(-1.0))


@pytest.mark.parametrize("d", [2, 3, 5])
def test_scheme_law_converges_at_weak_order_one(d):
    """The scheme's exact law tends to the closed forms at order 1 in Δt, with the leading
    constant ν²(d−1)(d+2) t e^{−ν(d−1)t} of [model §6b] (deterministic quadrature)."""
    t, nu = 0.5, 0.5
    dts = 0.05 / 2.0 ** np.arange(7)
    e1, e2 = noise.free_moments(t, nu, d)
    b1 = np.array([noise.scheme_moments(round(t / h), h, nu, d)[0] - e1 for h in dts])
    b2 = np.array([noise.scheme_moments(round(t / h), h, nu, d)[1] - e2 for h in dts])
    for b in (b1, b2):
        local = np.log2(b[:-1] / b[1:])  # observed order of each halving of Δt
        assert np.all(np.diff(local) > 0) and local[0] > 0.8  # tends to 1 from below
        assert local[-1] == pytest.approx(1.0, abs=0.02)
    lead = nu**2 * (d - 1) * (d + 2) * t * e1
    assert b1[-1] / dts[-1] == pytest.approx(lead, rel=0.01)


def test_free_diffusion_through_the_run_loop(tmp_path):
    """D = 0 with tied values is a zero field: a run is the free diffusion, path p draws its
    own noise (stream (6, p)), so a batch of paths [2, 4) is paths 2, 3 of one run of 4, and
    the tokens follow the scheme's exact law."""
    d, n, nu, dt, k = 3, 400, 0.5, 0.05, 10
    np.savez(tmp_path / "zero.npz", D=np.zeros((1, d, d)))
    cfg = {"model": {"d": d, "n": n, "heads": 1, "diffusion": nu},
           "init": {"tokens": "uniform", "weights": "file", "weights_file": str(tmp_path / "zero.npz"),
                    "seed": 3},
           "weights": {"process": "frozen"},
           "solver": {"dt": dt, "T": k * dt, "paths": 4, "record_every": k},
           "diagnostics": {"clustering": False}}
    r = wflow.simulate(cfg)
    c = np.einsum("pia,pia->pi", r.X[-1], r.X[0]).ravel()
    m1, m2 = noise.scheme_moments(k, dt, nu, d)
    _band(c, m1, "E<x,x0>")
    _band(c**2, m2, "E<x,x0>^2")
    assert np.all(r.energy == r.energy[0])  # D = 0: E = 1/(2β) at any tokens
    batch = wflow.simulate({**cfg, "init": {**cfg["init"], "first_path": 2},
                            "solver": {**cfg["solver"], "paths": 2}})
    np.testing.assert_array_equal(batch.X, r.X[:, 2:])
    # the noise is per path: paths with the same start part at once
    assert np.all(np.abs(r.X[-1, 0] - r.X[-1, 1]).max(axis=-1) > 0)


def test_noise_resumes_bit_identically():
    """The token streams are part of the state: a run stopped after 7 steps and continued
    from its (checkpointed) state ends on the tokens of an uninterrupted run."""
    cfg = small_config(**{"model.diffusion": 0.2, "solver.T": 0.15})
    full = Simulation(cfg).run()
    s1 = Simulation(cfg)
    s1.run(stop_after=7)
    assert len(s1.final_state.rng_states) == 2 * s1.P
    st = State.from_checkpoint(s1.final_state.to_checkpoint())
    rest = Simulation(cfg).run(state=st)
    np.testing.assert_array_equal(rest.X[-1], full.X[-1])
    np.testing.assert_array_equal(rest.token_martingale[-1], full.token_martingale[-1])


def test_noise_resumes_from_a_file_checkpoint(tmp_path, monkeypatch):
    """A noisy run that dies while writing a checkpoint resumes from the file (the token
    streams are stored after the weight streams) to the arrays of an uninterrupted run."""
    import h5py

    from wflow.engine import driver

    cfg = small_config(**{"model.diffusion": 0.2, "output.checkpoint_every": 4})
    ref = driver.run_to_file(cfg, tmp_path / "ref.h5")
    crash_in_checkpoint(monkeypatch, cfg, tmp_path / "r.h5", 3)
    assert driver.resume(tmp_path / "r.h5").action == "resumed"
    with h5py.File(ref, "r") as a, h5py.File(tmp_path / "r.h5", "r") as b:
        for name in ("X", "series/energy", "series/token_martingale",
                     "series/token_ito_realised"):
            np.testing.assert_array_equal(a[name][()], b[name][()], err_msg=name)


# ------------------------------------------------------------------ two tokens
def _pair_run(d, nu, sign, normalization, seed, P=2000, dt=0.02, T=5.0, burn=1.5):
    cfg = {"model": {"n": 2, "d": d, "heads": 1, "beta": 1.0, "sign": sign, "diffusion": nu,
                     "normalization": normalization},
           "init": {"tokens": "uniform", "per_path_tokens": True, "weights": "identity",
                    "seed": seed},
           "weights": {"process": "frozen"},
           "solver": {"dt": dt, "T": T, "paths": P, "record_every": round(0.1 / dt)},
           "diagnostics": {"ledger": False, "clustering": False}}
    r = wflow.simulate(cfg)
    g = np.einsum("rpa,rpa->rp", r.X[:, :, 0], r.X[:, :, 1])[r.t >= burn]
    return g.mean(axis=0), (g**2).mean(axis=0)  # per-path time averages: independent samples


@pytest.mark.parametrize("d,nu,sign,normalization,seed", [
    (3, 0.5, "ascent", "head", 2),
    (2, 1.0, "descent", "none", 5),
])
def test_two_token_stationary_law(d, nu, sign, normalization, seed):
    """The cosine γ of two tokens (H = 1, D = V = I) is stationary with density
    ∝ (1 − γ²)^((d−3)/2) exp(σΦ(γ)/ν) [model §6b]: its first two moments, from the time
    averages over t ≥ 1.5 of 2000 independent paths, within the Monte Carlo band."""
    m1, m2 = _pair_run(d, nu, sign, normalization, seed)
    q1, q2 = noise.pair_moments(d, 1.0, nu, sigma=1.0 if sign == "ascent" else -1.0,
                                normalization=normalization)
    _band(m1, q1, "E gamma")
    _band(m2, q2, "E gamma^2")


def test_pair_law_limits():
    """Without interaction (ν → ∞) the law is that of two independent uniform tokens
    (E γ = 0, E γ² = 1/d); ascent moves γ up and descent down."""
    for d in (2, 3, 5):
        q1, q2 = noise.pair_moments(d, 1.0, 1e9)
        assert q1 == pytest.approx(0.0, abs=1e-8) and q2 == pytest.approx(1 / d, rel=1e-7)
    assert noise.pair_moments(3, 1.0, 0.5, sigma=1.0)[0] > 0.1
    assert noise.pair_moments(3, 1.0, 0.5, sigma=-1.0)[0] < -0.1


# ------------------------------------------------------------------ energy
def test_token_ito_rate_is_the_laplacian_of_the_energy():
    r"""ν Σ_i Δ_{x_i} E against second differences along geodesics in an orthonormal tangent
    basis (Δ_S f(x) = Σ_a d²/ds² f(cos s x + sin s e_a) at s = 0), with random symmetric D."""
    rng = np.random.default_rng(4)
    n, d, H, beta, nu = 5, 3, 2, 1.3, 0.7
    X = sphere.uniform(n, d, rng)
    A = rng.standard_normal((H, d, d))
    D = A + A.transpose(0, 2, 1)
    h = 1e-4
    lap = 0.0
    for i in range(n):
        basis = np.linalg.svd(np.eye(d) - np.outer(X[i], X[i]))[0][:, : d - 1]
        for a in range(d - 1):
            vals = []
            for s in (-h, 0.0, h):
                Y = X.copy()
                Y[i] = np.cos(s) * X[i] + np.sin(s) * basis[:, a]
                vals.append(wflow.energy(Y, D, beta))
            lap += (vals[0] - 2 * vals[1] + vals[2]) / h**2
    E = wflow.energy(X, D, beta)
    assert noise.token_ito_rate(X, D, beta, nu) == pytest.approx(nu * lap, rel=1e-5,
                                                                   abs=1e-7 * nu * E / h**2)


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_energy_split_with_token_noise(seed):
    r"""dE = σ𝒟 dt + ν Σ_i Δ_{x_i}E dt + dM [model §6b]: over 300 paths the recorded ledger
    residual is the martingale plus the realised Itô term (to round-off), the martingale has
    mean 0 and the realised Itô term has the mean ∫ ν Σ_i Δ_{x_i}E dt (trapezoid over every
    step), within the Monte Carlo band plus the weak error."""
    nu, dt = 0.3, 0.005
    cfg = {"model": {"n": 8, "d": 3, "heads": 2, "beta": 1.0, "diffusion": nu},
           "init": {"tokens": "uniform", "seed": seed}, "weights": {"process": "frozen"},
           "solver": {"dt": dt, "T": 0.5, "paths": 300, "record_every": 1},
           "diagnostics": {"clustering": False}}
    sim = Simulation(cfg)
    r = sim.run()
    R, M, I = r.ledger_residual[-1], r.token_martingale[-1], r.token_ito_realised[-1]
    np.testing.assert_allclose(M + I, R, rtol=0, atol=1e-12 * np.abs(r.token_work).max())
    rate = np.array([noise.token_ito_rate(r.X[k], sim.D0, 1.0, nu) for k in range(len(r.t))])
    expected = np.sum(0.5 * (rate[1:] + rate[:-1]), axis=0) * dt
    P = R.size
    assert abs(M.mean()) <= Z * M.std() / np.sqrt(P)
    diff = I - expected
    # weak error of the mean: O(Δt); measured within 2 standard errors at Δt = 0.005 (5 seeds)
    assert abs(diff.mean()) <= Z * diff.std() / np.sqrt(P) + 0.01 * abs(expected.mean())
    assert abs(expected.mean()) > 10 * diff.std() / np.sqrt(P)  # the Itô term is resolved


# ------------------------------------------------------------------ slow: Monte Carlo orders
@pytest.mark.slow
def test_weak_order_from_monte_carlo():
    """d = 5, ν = 0.5, t = 0.5, 4·10⁵ tokens per Δt: the Monte Carlo bias of E<x(t), x(0)>
    against e^{−1} is the scheme's exact bias within the band, and its fitted order over
    Δt = 0.05 … 0.0125 is that of the exact law (≈ 0.93 there, tending to 1)."""
    d, nu, t = 5, 0.5, 0.5
    dts = np.array([0.05, 0.025, 0.0125])
    exact = noise.free_moments(t, nu, d)[0]
    bias, exact_bias = [], []
    for j, dt in enumerate(dts):
        c = _free_steps(d, nu, dt, round(t / dt), 400_000, seed=10 + j)
        _band(c, noise.scheme_moments(round(t / dt), dt, nu, d)[0], f"dt={dt}")
        assert c.std() / np.sqrt(c.size) < 0.1 * (c.mean() - exact)  # MC error below the bias
        bias.append(c.mean() - exact)
        exact_bias.append(noise.scheme_moments(round(t / dt), dt, nu, d)[0] - exact)
    slope = np.polyfit(np.log(dts), np.log(bias), 1)[0]
    want = np.polyfit(np.log(dts), np.log(exact_bias), 1)[0]
    assert slope == pytest.approx(want, abs=0.1) and want == pytest.approx(1.0, abs=0.1)


@pytest.mark.slow
@pytest.mark.parametrize("d", [2, 3, 5])
def test_free_diffusion_closed_forms_by_extrapolation(d):
    """The continuous-time closed forms from Monte Carlo alone: the Richardson combination
    2 m(Δt/2) − m(Δt) of two independent runs removes the O(Δt) bias (what is left, O(Δt²),
    is below the Monte Carlo error), and falls within the band of e^{−ν(d−1)t} and
    1/d + (1 − 1/d)e^{−2νdt}."""
    nu, t, dt, N = 0.5, 0.5, 0.0125, 200_000
    e1, e2 = noise.free_moments(t, nu, d)
    ca = _free_steps(d, nu, dt, round(t / dt), N, seed=20 + d)
    cb = _free_steps(d, nu, dt / 2, round(2 * t / dt), N, seed=30 + d)
    for f, e, what in ((lambda c: c, e1, "E<x,x0>"), (lambda c: c**2, e2, "E<x,x0>^2")):
        a, b = f(ca), f(cb)
        rich = 2 * b.mean() - a.mean()
        se = np.sqrt(4 * b.var() / N + a.var() / N)
        assert abs(rich - e) <= Z * se, f"d={d} {what}: {rich:.5f} vs {e:.5f} (se {se:.1e})"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 12])
def test_two_token_stationary_histogram(seed):
    """One sample of γ per path at t = 4 (independent samples), 6000 paths, d = 3, head,
    ascent, ν = 0.5, Δt = 0.01: a χ² test on 10 bins of equal probability under the
    stationary law (statistic below the 1e-4 quantile of χ²₉, 33.7)."""
    from scipy import stats

    d, nu, P = 3, 0.5, 6000
    cfg = {"model": {"n": 2, "d": d, "heads": 1, "beta": 1.0, "sign": "ascent",
                     "diffusion": nu},
           "init": {"tokens": "uniform", "per_path_tokens": True, "weights": "identity",
                    "seed": seed},
           "weights": {"process": "frozen"},
           "solver": {"dt": 0.01, "T": 4.0, "paths": P, "record_every": 400},
           "diagnostics": {"ledger": False, "clustering": False}}
    r = wflow.simulate(cfg)
    g = np.einsum("pa,pa->p", r.X[-1, :, 0], r.X[-1, :, 1])
    # the law in θ = arccos γ: q(cos θ) sin θ dθ; its CDF at equal-probability edges
    th = (np.arange(20000) + 0.5) * np.pi / 20000
    w = np.exp(noise.pair_log_density(np.cos(th), d, 1.0, nu, 1.0)) * np.sin(th)
    tail = np.concatenate([[0.0], np.cumsum(w)])  # ∝ P(θ' < θ) = P(γ > cos θ)
    tail /= tail[-1]
    theta_edges = np.interp(np.linspace(1, 0, 11), tail, np.linspace(0, np.pi, 20001))
    edges = np.cos(theta_edges)  # increasing in γ, from −1 to 1
    counts = np.histogram(g, bins=edges)[0]
    chi2 = np.sum((counts - P / 10) ** 2 / (P / 10))
    assert chi2 < stats.chi2.isf(1e-4, 9), f"chi2 = {chi2:.1f}, counts {counts}"
