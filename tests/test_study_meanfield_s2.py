"""The S² meanfield study and what it stands on: the sphere W₂ (POT) against hand cases, the
floor-corrected fit recovering a known exponent, and the quick study's rate in n."""

import numpy as np
import pytest

from wflow.studies import get_study, run_study
from wflow.studies.meanfield_s2 import (
    _fit_floor,
    meanfield_s2_errors,
    meanfield_s2_fits,
    w2_sphere,
)


def _ring(theta, K):
    """K equally spaced points at colatitude θ about e₃."""
    phi = 2 * np.pi * np.arange(K) / K
    return np.stack([np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi),
                     np.full(K, np.cos(theta))], axis=1)


@pytest.mark.parametrize("theta", [1e-3, 0.7, 2.5])
def test_w2_sphere_dirac_against_a_ring_is_the_colatitude(theta):
    # every mass of the ring travels the geodesic to the pole: W₂ = θ exactly
    pole = np.array([[0.0, 0.0, 1.0]])
    assert abs(w2_sphere(pole, _ring(theta, 37)) - theta) <= 1e-7 * theta + 1e-7


def test_w2_sphere_of_a_permutation_is_zero_and_a_rotation_is_bounded():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    assert w2_sphere(X, X[rng.permutation(300)]) < 1e-6
    # a rotation by α about e₃ moves x by its geodesic chord arccos(z² + (1 − z²) cos α):
    # the rotation is one coupling, so W₂ is at most its cost, and it is not far below
    # (the uniform-in-expectation sample is nearly rotation invariant only at large n)
    a = 0.05
    Rz = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
    Y = X @ Rz.T
    z = X[:, 2]
    bound = np.sqrt(np.mean(np.arccos(np.clip(z**2 + (1 - z**2) * np.cos(a), -1, 1)) ** 2))
    d = w2_sphere(X, Y)
    assert 0 < d <= bound * (1 + 1e-9)
    # weights: a two-point measure against itself with the masses swapped
    P = np.array([[1.0, 0, 0], [0, 1.0, 0]])
    assert abs(w2_sphere(P, P, [0.75, 0.25], [0.25, 0.75]) - np.sqrt(0.5) * np.pi / 2) < 1e-9


def test_fit_floor_recovers_the_exponent_under_a_floor():
    # W₂²(μⁿ, ν_m) = c n^(2a) + F with multiplicative noise, F measured by its own noisy values:
    # the raw fit is biased toward 0 by F, the floor-corrected one recovers a with its interval
    rng = np.random.default_rng(5)
    n = np.array([100, 200, 400, 800, 1600, 3200])
    a_true, F0 = -0.5, 2e-4
    raw = [(0.5 * k ** (2 * a_true)) * rng.lognormal(0, 0.15, 8) + F0 for k in n]
    floor = F0 * rng.lognormal(0, 0.1, 8)
    a, C, (lo, hi) = _fit_floor(n, raw, floor)
    assert lo < a_true < hi and hi - lo < 0.15
    assert abs(C - np.sqrt(0.5)) < 0.1 * np.sqrt(0.5)
    slope_raw = np.polyfit(np.log(n), np.log([np.sqrt(r.mean()) for r in raw]), 1)[0]
    assert slope_raw > a_true + 0.05  # the uncorrected fit is visibly too shallow
    # log-corrected: for c·log n/n data the log fit gives −1/2, the power fit does not
    raw_log = [0.5 * np.log(k) / k * rng.lognormal(0, 0.1, 8) for k in n]
    a_l, _, (lo_l, hi_l) = _fit_floor(n, raw_log, np.zeros(8) + 1e-12, log_corrected=True)
    a_p, _, (lo_p, hi_p) = _fit_floor(n, raw_log, np.zeros(8) + 1e-12)
    # (noise 0.1 in log over 8 seeds: intervals ≈ ±0.02; the pure power fit of log n/n over
    # n = 100 … 3200 has the mean local slope −1/2 + 1/(2 log n) ≈ −0.42)
    assert abs(a_l + 0.5) < max(0.03, hi_l - lo_l), (a_l, lo_l, hi_l)
    assert -0.46 < a_p < -0.38 and lo_p > -0.5


def test_quick_study_rate_and_resolution(tmp_path):
    run = run_study("meanfield_s2", tmp_path, scale="quick", formats=())
    res = meanfield_s2_errors(run.data, {"m": 800, "floor_pairs": 2})
    fits = meanfield_s2_fits(res)
    assert list(res["n"]) == [50, 100, 200, 400] and res["n_ref"] == 3200 and res["R"] == 2
    for r, t in enumerate(res["t"]):
        raw = np.array([np.sqrt(res["w2sq_raw"][k][r]).mean() for k in res["n"]])
        assert np.all(np.diff(raw) < 0), (t, raw)  # W₂ decreases with n
        f = fits[float(t)]
        a, _, (lo, hi) = f["w2sq"]
        # the floor-corrected exponent: the i.i.d. rate, not a constant
        assert lo < -0.5 < hi and hi < -0.25, (t, a, lo, hi)
        # the floor (m = 2n at n = 400) makes the raw exponent visibly shallower
        assert f["w2"][0] > a + 0.03, (t, f["w2"][0], a)
    # the particles' time-step error is far below the sampling W₂
    assert res["dt_check"]["max_disp"].max() < 1e-3 * np.sqrt(res["w2sq_raw"][400]).mean()


@pytest.mark.slow
def test_quick_study_figure(tmp_path):
    """The study's figure (recomputes every W₂; ~10 s of CPU, so under -m slow)."""
    run = run_study("meanfield_s2", tmp_path, scale="quick", formats=())
    files = get_study("meanfield_s2").figures(run.data, tmp_path / "figures", ("png",))
    assert [f.name for f in files] == ["meanfield_s2.png"]
    assert 0 < files[0].stat().st_size < 300_000
