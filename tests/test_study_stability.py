"""The stability study and what it stands on: the stable geodesic distance (against mpmath),
W₂ at tiny distances, the perturbations of the start, weight decay as a reparametrised OU,
and the quick study's claims (δ/ε curves coincide, the Grönwall envelope, rate 1 in ε)."""

import mpmath
import numpy as np
import pytest

from wflow.engine.run import perturb_tokens, perturb_weights
from wflow.geometry import sphere
from wflow.model.diagnostics import geodesic, geodesic_pairwise, w2_geodesic
from wflow.model.processes import OrnsteinUhlenbeck
from wflow.studies import run_study
from wflow.studies.stability import coincidence, fit_rates, stability_curves

mpmath.mp.dps = 50


def _mp_angle(x, y):
    """The angle between the float vectors x, y (taken as exact) in 50-digit arithmetic."""
    X = [mpmath.mpf(float(v)) for v in x]
    Y = [mpmath.mpf(float(v)) for v in y]
    nx = mpmath.sqrt(sum(a * a for a in X))
    ny = mpmath.sqrt(sum(b * b for b in Y))
    dot = sum(a * b for a, b in zip(X, Y)) / (nx * ny)
    cross2 = sum((X[i] * Y[j] - X[j] * Y[i]) ** 2 for i in range(len(X))
                 for j in range(i + 1, len(X))) / (nx * ny) ** 2
    return mpmath.atan2(mpmath.sqrt(cross2), dot)


@pytest.mark.parametrize("theta", [1e-12, 1e-10, 1e-8, 1e-4, 0.3, 2.0, np.pi - 1e-6])
@pytest.mark.parametrize("d", [3, 8])
def test_geodesic_matches_mpmath(theta, d):
    # y = exp_x(θ u) rounded to floats; the reference is the exact angle of the rounded floats
    rng = np.random.default_rng(int(d + 1e3 * theta))
    x = sphere.uniform(1, d, rng)[0]
    u = sphere.project(x, rng.standard_normal(d))
    u /= np.linalg.norm(u)
    y = np.cos(theta) * x + np.sin(theta) * u
    exact = float(_mp_angle(x, y))
    assert abs(exact - theta) <= 1e-15 * max(1.0, theta) + 4e-16  # y is the intended point
    got = float(geodesic(x, y))
    # round-off: the difference of nearby vectors is exact in floating point; what remains is
    # the inputs' own rounding onto the sphere (~1e-16 absolute)
    assert abs(got - exact) <= 1e-12 * exact + 1e-15
    if theta <= 1e-8:  # the arccos form cannot see it at all
        assert np.arccos(np.clip(x @ y, -1, 1)) <= 2 * 1.5e-8 and abs(
            np.arccos(np.clip(x @ y, -1, 1)) - theta) > 0.1 * theta


def test_geodesic_pairwise_blocks_and_symmetry(monkeypatch):
    import wflow.model.diagnostics as dg

    rng = np.random.default_rng(1)
    X, Y = sphere.uniform(37, 4, rng), sphere.uniform(11, 4, rng)
    full = geodesic_pairwise(X, Y)
    monkeypatch.setattr(dg, "_BLOCK", 50)  # many row blocks
    np.testing.assert_array_equal(geodesic_pairwise(X, Y), full)
    np.testing.assert_allclose(full, np.arccos(np.clip(X @ Y.T, -1, 1)), atol=1e-7)
    np.testing.assert_allclose(geodesic_pairwise(Y, X), full.T, rtol=1e-14)


@pytest.mark.parametrize("theta", [1e-10, 1e-6])
def test_w2_resolves_tiny_rigid_rotation(theta):
    # a rotation by θ about a fixed axis moves x by the angle θ·sin(angle to the axis);
    # far apart tokens: the identity coupling is optimal and W2² = mean of the squared angles
    X = np.vstack([np.eye(3), -np.eye(3)])  # ±e_a: pairwise angles π/2 or π
    a = sphere.normalize(np.array([1.0, 2.0, 3.0]))
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    R = np.eye(3) + np.sin(theta) * K + (1 - np.cos(theta)) * K @ K
    Y = X @ R.T
    s = np.linalg.norm(np.cross(X, a), axis=1)  # sin of the angle to the axis
    exact = theta * np.sqrt(np.mean(s**2))
    w2, plan = w2_geodesic(X, Y, return_plan=True)
    np.testing.assert_allclose(np.diag(plan) * len(X), 1.0)
    assert abs(w2 - exact) <= 1e-6 * exact


def test_perturbations_stay_on_the_sphere_at_the_stated_size():
    rng = np.random.default_rng(3)
    X = np.stack([sphere.uniform(40, 5, rng)] * 2)
    for eps in (1e-9, 1e-3, 0.5):
        Xe = perturb_tokens(X, eps, np.random.default_rng(4))
        np.testing.assert_allclose(np.linalg.norm(Xe, axis=-1), 1.0, atol=1e-15)
        # the stored point carries a rounding of ~1e-16 (absolute) of its own
        np.testing.assert_allclose(geodesic(X, Xe), np.arctan(eps), rtol=1e-9, atol=3e-16)
        np.testing.assert_array_equal(Xe[0], Xe[1])  # same direction for every path
    D = np.zeros((2, 3, 4, 4)) + np.eye(4)
    De = perturb_weights(D, 1e-3, np.random.default_rng(5))
    np.testing.assert_allclose(np.linalg.norm(De - D, axis=(-2, -1)), 1e-3, rtol=1e-12)
    np.testing.assert_allclose(De, De.transpose(0, 1, 3, 2), atol=0)


def test_weight_decay_is_a_reparametrised_ou():
    # λ(M − D) − εD = (λ + ε)(λM/(λ + ε) − D), and the EM noise does not depend on the rate
    lam, M, eps, dt = 1.3, 0.7, 0.05, 0.01
    rng = np.random.default_rng(6)
    D = rng.standard_normal((2, 3, 4, 4))
    D = D + D.transpose(0, 1, 3, 2)
    plain = OrnsteinUhlenbeck(lam, M, 2.0)
    decayed = OrnsteinUhlenbeck(lam + eps, lam * M / (lam + eps), 2.0)
    np.testing.assert_allclose(decayed.drift(D, 0.0), plain.drift(D, 0.0) - eps * D,
                               rtol=1e-13, atol=1e-13)
    a = decayed.step(D, 0.0, dt, [np.random.default_rng(s) for s in (7, 8)])
    b = plain.step(D, 0.0, dt, [np.random.default_rng(s) for s in (7, 8)])
    np.testing.assert_allclose(a - b, -eps * D * dt, atol=1e-13)


def test_simulation_applies_perturbations_only_when_asked():
    import wflow

    cfg = {"model": {"n": 10, "heads": 2}, "solver": {"T": 0.02, "dt": 0.01, "record_every": 1},
           "diagnostics": {"ledger": False}}
    ref = wflow.simulate(cfg)
    pert = wflow.simulate({**cfg, "init": {"token_perturbation": 1e-7}})
    np.testing.assert_allclose(geodesic(ref.X[0], pert.X[0]), np.arctan(1e-7), rtol=1e-8)
    again = wflow.simulate({**cfg, "init": {"token_perturbation": 0.0}})
    np.testing.assert_array_equal(ref.X, again.X)


def test_simulation_takes_initial_tokens():
    from wflow.engine.run import Simulation
    from wflow.errors import ConfigError

    cfg = {"model": {"n": 10, "heads": 2},
           "solver": {"T": 0.02, "dt": 0.01, "paths": 2, "record_every": 1},
           "diagnostics": {"ledger": False}}
    base = Simulation(cfg)
    Xe = perturb_tokens(base.X0, 1e-6, np.random.default_rng(9))
    sim = Simulation(cfg, tokens=Xe[0])
    np.testing.assert_allclose(sim.X0, Xe, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(sim.D0, base.D0)  # the other streams are untouched
    # and equals the configured perturbation drawn from stream (3,)
    conf = Simulation({**cfg, "init": {"token_perturbation": 1e-6}})
    np.testing.assert_allclose(conf.X0[0], perturb_tokens(base.X0, 1e-6, np.random.default_rng(
        np.random.SeedSequence(0, spawn_key=(3,))))[0], atol=1e-15)
    with pytest.raises(ConfigError, match="tokens: shape"):
        Simulation(cfg, tokens=np.ones((3, 3)))
    with pytest.raises(ConfigError, match="unit vectors"):
        Simulation(cfg, tokens=2 * base.X0[0])


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("stability")
    return run_study("stability", out, scale="quick", formats=())  # figures: see the full run


def test_quick_stability_claims(quick):
    curves = stability_curves(quick.data)
    rates = fit_rates(curves, 1e-6)
    # δ(t)/ε coincide within 10% for ε ≤ 1e-4 (the linear regime)
    gaps = coincidence(curves, 1e-6, 1e-4)
    assert set(gaps) == {1e-8, 1e-4}
    assert max(gaps.values()) < 0.1
    # δ(0) is the prescribed angle atan ε (so the stable distance resolves 1e-8)
    for (_h, fam, e), c in curves.items():
        if fam == "tokens":
            np.testing.assert_allclose(c["delta"][0], np.arctan(e), rtol=1e-6)
    # every curve ε ≤ 1e-4 stays below ε e^{L t} with L fitted (per path) on ε = 1e-6
    LG = rates[False]["LG"]
    assert np.all(LG > 0) and np.all(np.isfinite(LG))
    for e in (1e-8, 1e-4):
        c = curves[(False, "tokens", e)]
        env = np.arctan(e) * np.exp(np.outer(c["t"], LG))
        assert np.all(c["delta"] <= 1.1 * env)
    # the Grönwall envelope is informative: reached somewhere (within 10%), not a loose bound
    c = curves[(False, "tokens", 1e-4)]
    assert np.all(np.max(c["delta"] / (np.arctan(1e-4) * np.exp(np.outer(c["t"], LG))),
                         axis=0) > 0.9)
    # perturbed weights and weight decay: trajectories converge linearly in ε
    for fam in ("weights", "decay"):
        r = rates[False][f"r_{fam}"]
        assert np.all(np.abs(r - 1.0) < 0.05), (fam, r)
    assert "coincidence" in quick.text
