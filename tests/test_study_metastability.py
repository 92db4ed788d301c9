"""The ``metastability`` study: the growth-law fit on synthetic medians, the equiangular
reference against a run of orthogonal tokens, and the quick mode (summary + figure)."""

import math

import numpy as np
import pytest

from wflow.analysis.intervals import Interval, km_median_interval
from wflow.engine.run import Simulation
from wflow.studies import run_study
from wflow.studies.metastability import equiangular_rate, equiangular_time, fit_growth


def _medians(betas, a, b, rng, P=64):
    """KM medians of P exponential escape times with median e^{a + bβ} per β."""
    out = []
    for beta in betas:
        tau = rng.exponential(math.exp(a + b * beta) / math.log(2), P)
        out.append(km_median_interval(tau, math.inf))
    return out


def test_fit_growth_covers_the_true_slope_across_seeds():
    """Synthetic exponential escape times with log median a + bβ: the 95% interval of b
    covers b in most of 40 seeds (binomial: ≥ 32 of 40 has probability > 0.99 at 0.95
    coverage), and a is near its value."""
    betas = np.arange(1.0, 9.0)
    a, b = 0.5, 1.1
    hits = 0
    for seed in range(40):
        f = fit_growth(betas, _medians(betas, a, b, np.random.default_rng(seed)))
        hits += f.covers(b)
        assert abs(f.extra["a"] - a) < 6 * f.extra["a_se"]
    assert hits >= 32, hits


def test_fit_growth_leaves_censored_cells_out():
    nan, inf = math.nan, math.inf
    ivs = [Interval(math.e ** (1 + k), math.e ** (0.8 + k), math.e ** (1.2 + k), 0.95, "x", 9)
           for k in range(4)] + [Interval(inf, inf, inf, 0.95, "x", 9),
                                 Interval(5.0, nan, nan, 0.95, "x", 2)]
    f = fit_growth(np.arange(6.0), ivs)
    assert f.n == 4 and f.estimate == pytest.approx(1.0) and f.ok
    assert f.extra["a"] == pytest.approx(1.0)


def test_equiangular_time_against_the_integrated_ode():
    """τ_∞ from quad against a fine RK4 integration of the scalar ODE to its crossing."""
    n, beta, rho1 = 8, 3.0, 0.9
    t_star = equiangular_time(n, beta, rho1)
    h, t, r = 1e-3, 0.0, 0.0
    def f(x):
        return float(equiangular_rate(x, n, beta))

    while True:
        k1 = f(r)
        k2 = f(r + h * k1 / 2)
        k3 = f(r + h * k2 / 2)
        k4 = f(r + h * k3)
        rn = r + h * (k1 + 2 * k2 + 2 * k3 + k4) / 6
        if rn >= rho1:
            t += h * (rho1 - r) / (rn - r)
            break
        r, t = rn, t + h
    # the linear crossing between RK4 steps errs by O(h² ρ''), ~1e-6 here
    assert abs(t - t_star) < 1e-5 * t_star


def test_half_merge_event_of_orthogonal_tokens_is_the_equiangular_time():
    """n orthogonal tokens in d = n: every pair merges at once when ρ reaches 0.999, so the
    half-merge event time is τ_∞ (adaptive error 1e-8 and event_tol 1e-6 ≪ 1e-4)."""
    n, beta = 4, 2.0
    ov = ["model.n=4", "model.d=4", f"model.beta={beta}", 'model.normalization="head"',
          'model.sign="ascent"', 'model.values="identity"', 'init.weights="identity"',
          'weights.process="frozen"', "solver.T=50", "solver.paths=1", "solver.adaptive=true",
          'solver.method="dopri5"', "solver.rtol=1e-9", "solver.atol=1e-9",
          'solver.event="merged_fraction"', "solver.event_threshold=0.5",
          "solver.event_stop=true", "solver.event_tol=1e-6", "diagnostics.merge_cosine=0.999",
          "diagnostics.ledger=false", "output.store_tokens=false"]
    r = Simulation(None, ov, tokens=np.eye(n)).run()
    t_star = equiangular_time(n, beta, 0.999)
    assert abs(r.event_time[-1, 0] - t_star) < 1e-4 * t_star, (r.event_time[-1, 0], t_star)


def test_quick_study_writes_summary_and_figure(tmp_path):
    res = run_study("metastability", tmp_path / "m", scale="quick", formats=("png",))
    out = tmp_path / "m"
    text = (out / "summary.txt").read_text()
    assert "Growth law" in text and "equiangular" in text
    assert any(p.name == "escape.png" for p in out.rglob("*.png"))
    del res


def test_fit_growth_over_the_metastable_range_only():
    """Cells below beta_min (the first gathering: flat, narrow bands) are left out: the
    slope of synthetic medians e^{1 + β} over β ≥ 5 is recovered exactly although the small-β
    cells follow another law."""
    ivs = [Interval(math.e ** (1 + k), math.e ** (0.8 + k), math.e ** (1.2 + k), 0.95, "x", 9)
           for k in range(10)]
    for k in range(5):  # β < 5: flat at 10 with a narrow band
        ivs[k] = Interval(10.0, 9.9, 10.1, 0.95, "x", 9)
    f = fit_growth(np.arange(10.0), ivs, beta_min=5.0)
    assert f.n == 5 and f.estimate == pytest.approx(1.0) and list(f.extra["betas"]) == [5, 6, 7, 8, 9]
    assert fit_growth(np.arange(10.0), ivs).estimate < 0.9  # the flat cells pull it down
