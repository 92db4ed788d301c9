"""The long studies (marked slow): the head-count law and clustering vs non-clustering on S²."""

import numpy as np
import pytest

import wflow
from wflow.analysis.results import fit_power_law, head_scaling_data
from wflow.studies import StudyOptions, get_study

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs():
    """[model §9] setting, shortened: T = 5, 3 OU paths, late window t ≥ 2.5 (the paper's)."""
    tasks = get_study("section6").tasks(StudyOptions(overrides=("solver.T=5.0", "solver.paths=3")))
    return {name: wflow.simulate(cfg) for name, cfg in tasks}


def test_ou_G2_decays_like_inverse_head_count(runs):
    srcs = [runs[f"ou-heads={h}"] for h in (1, 10, 100)]
    data = head_scaling_data(srcs, window=2.5)
    a, b, se = fit_power_law(data["H"], data["mean"])
    assert -1.3 < b < -0.7, (data["mean"], b)
    # the G² means are ordered and separated by more than their confidence intervals
    assert np.all(np.diff(data["mean"]) < 0)


def test_oscillating_shared_does_not_decay_like_ou(runs):
    ou = head_scaling_data([runs[f"ou-heads={h}"] for h in (1, 10, 100)], window=2.5)
    osc = head_scaling_data([runs[f"oscillating-heads={h}"] for h in (1, 10, 100)], window=2.5)
    b_ou = fit_power_law(ou["H"], ou["mean"])[1]
    b_osc = fit_power_law(osc["H"], osc["mean"])[1]
    assert b_osc > b_ou + 0.4, (b_ou, b_osc)
    # at H = 100 the oscillating flow keeps moving much more than the OU flow
    assert osc["mean"][-1] > 3 * ou["mean"][-1]


def test_clustering_ascent_collapses_on_s2():
    """Ascent with D = I, frozen (Geshkovski et al.): the tokens of S² collapse to one cluster."""
    cfg = {"model": {"n": 32, "heads": 1, "sign": "ascent", "beta": 1.0},
           "init": {"tokens": "uniform", "weights": "identity", "seed": 1},
           "weights": {"process": "frozen"},
           "solver": {"method": "rk4", "dt": 0.05, "T": 30.0, "record_every": 100, "paths": 1}}
    r = wflow.simulate(cfg)
    assert r.n_clusters[0, 0] > 5 and r.n_clusters[-1, 0] == 1
    assert r.order_parameter[-1, 0] > 0.999 and r.min_cosine[-1, 0] > 0.99
