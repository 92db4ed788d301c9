"""The harmonic power per degree of a token cloud [model §8] (``wflow.model.harmonics``) and its
series ``harmonic_power`` (``diagnostics.harmonic_degree``).

- against a reference twin: the real harmonics of ``wflow.model.density.real_harmonic``
  (scipy's associated Legendre functions), and on S¹ the sum of cos and sin;
- a single point: :math:`P_\\ell = (2\\ell+1)/(4\\pi)` (the addition theorem), S¹: 1, also at
  the poles;
- rotation invariance (S²: a random orthogonal matrix; S¹: a rotation and a reflection);
- uniform draws: :math:`\\mathbb E\\,nP_\\ell = (2\\ell+1)/(4\\pi)` (S¹: 1), the mean over
  draws within 5 of its standard errors, across seeds;
- the series: recorded at every record, equal to the function of the stored tokens; off by
  default; refused in one line off S¹/S² and on a density.
"""

from __future__ import annotations

import numpy as np
import pytest

from wflow import config
from wflow.engine.run import simulate
from wflow.errors import ConfigError
from wflow.model.density import real_harmonic
from wflow.model.harmonics import harmonic_power, point_power


def _sphere(rng, n, d=3):
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


@pytest.mark.parametrize("n", [1, 5, 300, 20000])
def test_s2_against_real_harmonics(n):
    """P_ℓ = (1/4π) Σ_m (mean Ỹ_ℓm)² with Ỹ of mean square 1 (scipy's lpmv); 20000 tokens
    take two blocks of the recurrence."""
    rng = np.random.default_rng(n)
    X = _sphere(rng, n)
    L = 9
    ref = [sum(np.mean(real_harmonic(ell, m, X)) ** 2 for m in range(-ell, ell + 1))
           / (4 * np.pi) for ell in range(1, L + 1)]
    np.testing.assert_allclose(harmonic_power(X, L), ref, rtol=1e-12, atol=1e-18)


def test_s1_against_cos_sin():
    rng = np.random.default_rng(3)
    th = rng.uniform(0, 2 * np.pi, 777)
    X = np.stack([np.cos(th), np.sin(th)], axis=1)
    k = np.arange(1, 9)[:, None]
    ref = np.mean(np.cos(k * th), axis=1) ** 2 + np.mean(np.sin(k * th), axis=1) ** 2
    np.testing.assert_allclose(harmonic_power(X, 8), ref, rtol=1e-12)


def test_single_point_addition_theorem():
    """One token: P_ℓ = Σ_m |Y_ℓm(x)|² = (2ℓ+1)/(4π) for every x (poles and equator too);
    S¹: 1."""
    rng = np.random.default_rng(0)
    pts = np.concatenate([_sphere(rng, 20), [[0, 0, 1.0], [0, 0, -1.0], [1.0, 0, 0]]])
    L = 40
    for x in pts:
        np.testing.assert_allclose(harmonic_power(x[None], L), point_power(L, 3), rtol=1e-12)
    for x in _sphere(rng, 5, 2):
        np.testing.assert_allclose(harmonic_power(x[None], L), point_power(L, 2), rtol=1e-12)


def test_rotation_invariance():
    rng = np.random.default_rng(1)
    X = _sphere(rng, 400)
    R, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    np.testing.assert_allclose(harmonic_power(X @ R.T, 12), harmonic_power(X, 12), rtol=1e-11)
    Y = _sphere(rng, 400, 2)
    c, s = np.cos(0.7), np.sin(0.7)
    for M in (np.array([[c, -s], [s, c]]), np.array([[1.0, 0], [0, -1.0]])):
        np.testing.assert_allclose(harmonic_power(Y @ M.T, 12), harmonic_power(Y, 12),
                                   rtol=1e-11)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("d", [2, 3])
def test_uniform_draws_mean(seed, d):
    r"""n uniform tokens: :math:`E\,q_\ell = E P_\ell/P^{\rm point}_\ell = 1/n` exactly; over
    M draws the mean of :math:`n q_\ell` is within 5 standard errors (from the draws) of 1,
    every degree; and the paths of a (P, n, d) batch are the per-path values."""
    rng = np.random.default_rng(seed)
    M, n, L = 200, 500, 8
    X = _sphere(rng, M * n, d).reshape(M, n, d)
    q = n * harmonic_power(X, L) / point_power(L, d)
    se = q.std(axis=0, ddof=1) / np.sqrt(M)
    assert np.all(np.abs(q.mean(axis=0) - 1) <= 5 * se), (q.mean(axis=0), se)
    np.testing.assert_array_equal(harmonic_power(X[3], L), harmonic_power(X, L)[3])


def test_bad_arguments():
    with pytest.raises(ValueError, match="d = 4"):
        harmonic_power(np.eye(4), 3)
    with pytest.raises(ValueError, match="L = 0"):
        harmonic_power(np.eye(3), 0)


def _cfg(d=3, L=5):
    return {"model": {"d": d, "n": 300, "beta": 3.0, "heads": 1, "normalization": "head",
                      "sign": "ascent", "values": "identity"},
            "init": {"tokens": "uniform", "weights": "identity", "seed": 4,
                     "per_path_tokens": True},
            "weights": {"process": "frozen"},
            "solver": {"method": "heun", "dt": 0.1, "T": 1.0, "record_every": 2, "paths": 2},
            "diagnostics": {"ledger": False, "clustering": False, "harmonic_degree": L},
            "output": {"store_tokens": True}}


@pytest.mark.parametrize("d", [2, 3])
def test_series_recorded(d):
    r = simulate(_cfg(d))
    hp, X = np.asarray(r.arrays["harmonic_power"]), np.asarray(r.arrays["X"])
    assert hp.shape == (6, 2, 5)
    for k in range(hp.shape[0]):
        np.testing.assert_array_equal(hp[k], harmonic_power(X[k], 5))
    c = _cfg(d)
    del c["diagnostics"]["harmonic_degree"]
    assert "harmonic_power" not in simulate(c).arrays


def test_key_refused_where_it_cannot_apply():
    with pytest.raises(ConfigError, match="diagnostics.harmonic_degree = 5: must be 0 with "
                                          "model.d = 4"):
        config.validate(_cfg(4))
    c = _cfg(2)
    c["solver"]["representation"] = "density"
    with pytest.raises(ConfigError, match="diagnostics.harmonic_degree = 5 with "
                                          "solver.representation = 'density': cannot apply"):
        config.validate(c)
