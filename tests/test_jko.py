"""JKO steps [model §7]: the JKO inequality, first-order convergence to the explicit flow,
stability where explicit Euler fails, and the identity coupling."""

import numpy as np
import pytest

import wflow
from wflow.geometry import sphere
from wflow.stepping.jko import exp_map_vjp


def jko_config(norm, H, tau, T, method="jko", n=10, seed=2, beta=1.0, sign="descent"):
    return {
        "model": {"n": n, "heads": H, "normalization": norm, "beta": beta, "sign": sign},
        "init": {"seed": seed, "tokens": "uniform"},
        "weights": {"process": "frozen"},
        "solver": {"method": method, "dt": tau, "T": T, "record_every": 1, "paths": 1,
                   # JKO options only where they apply (an explicit one that cannot is an error)
                   **({"jko_tol": 1e-12, "jko_maxiter": 500} if method == "jko" else {})},
        "diagnostics": {"clustering": False},
    }


def test_exp_map_vjp_matches_finite_differences():
    rng = np.random.default_rng(0)
    X = sphere.uniform(6, 3, rng)
    G = rng.standard_normal((6, 3))
    for scale in (1e-6, 0.3, 2.0):
        U = scale * sphere.project(X, rng.standard_normal((6, 3)))
        g = exp_map_vjp(X, U, G)
        dU = sphere.project(X, rng.standard_normal((6, 3)))
        h = 1e-6
        fd = (np.sum(G * sphere.exp_map(X, U + h * dU)) - np.sum(G * sphere.exp_map(X, U - h * dU))) / (2 * h)
        assert abs(fd - np.sum(g * dU)) < 1e-7 * max(1, abs(fd))


@pytest.mark.parametrize("norm,H,T", [("joint", 3, 0.32), ("none", 3, 0.08), ("head", 1, 0.32)])
def test_jko_converges_to_explicit_first_order(norm, H, T):
    """Three step sizes (τ = T/4, T/8, T/16: 28 JKO steps) fit the order; the user guide's table
    (experiments/gradient_flow_study.py) adds T/32."""
    taus = [T / 4, T / 8, T / 16]
    ref = wflow.simulate(jko_config(norm, H, taus[-1] / 8, T, method="rk4"))
    Xref = ref.X[-1, 0]
    errs = []
    for tau in taus:
        r = wflow.simulate(jko_config(norm, H, tau, T))
        assert np.all(r.jko_converged[1:] == 1)
        errs.append(np.max(sphere.geodesic_distance(r.X[-1, 0], Xref)))
    order = np.polyfit(np.log(taus), np.log(errs), 1)[0]
    assert abs(order - 1.0) < 0.25, (errs, order)


def test_jko_inequality_and_identity_coupling():
    r = wflow.simulate(jko_config("head", 4, 0.01, 0.1))
    drop = r.jko_objective_drop[1:]
    assert np.all(drop >= -1e-14)
    assert np.all(r.jko_identity[1:] == 1.0)
    # W₂ between X_k and X_{k+1} ≤ the cost of the identity coupling (= the transport cost b-weighted ≈)
    assert np.all(r.jko_w2[1:] > 0)


def test_jko_stable_where_euler_goes_the_wrong_way():
    """At a large τ explicit Euler's energy (descent, frozen weights) increases at some step;
    the JKO energy decreases monotonically."""
    tau, T = 2.0, 20.0
    kw = dict(n=12, seed=4, beta=3.0)
    e = wflow.simulate(jko_config("none", 2, tau, T, method="euler", **kw)).energy[:, 0]
    assert np.any(np.diff(e) > 1e-12), "choose a τ where Euler fails"
    j = wflow.simulate(jko_config("none", 2, tau, T, **kw)).energy[:, 0]
    assert np.all(np.diff(j) <= 1e-14)
    assert j[-1] < j[0]


def test_jko_refused_under_causal_mask():
    cfg = jko_config("head", 2, 0.01, 0.1)
    cfg["model"]["mask"] = "causal"
    with pytest.raises(wflow.ConfigError, match="causal"):
        wflow.simulate(cfg)
