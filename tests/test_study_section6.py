"""The Section 6 study's intervals: the same numbers and labels in the summary and the
head-scaling figure; per-path draws; one-path families by batch means."""

import numpy as np
import pytest

from wflow.analysis.intervals import CONDITIONAL_X0_D0, batch_means_interval, power_law_interval
from wflow.analysis.results import head_scaling_data
from wflow.figures import _figbase, plotting
from wflow.studies import get_study

H = np.array([1.0, 10.0, 100.0])


def _src(h, P, rng, seed=0, per_path=True, records=41):
    t = np.linspace(0.0, 10.0, records)
    G2 = 0.4 * h ** -0.9 * rng.lognormal(0.0, 0.3, size=(1, P)) * (
        1 + 0.1 * rng.standard_normal((records, P)))
    cfg = {"model": {"heads": int(h)}, "init": {"seed": seed, "per_path_tokens": per_path,
                                                "per_path_weights": per_path}}
    return cfg, {"t": t, "G2": G2}


def test_section6_draws_x0_and_d0_per_path():
    """The OU family's paths each draw X₀ and D(0): its intervals are over the law."""
    for name, cfg in get_study("section6").tasks():
        assert cfg["init"]["per_path_tokens"] and cfg["init"]["per_path_weights"], name


def test_head_scaling_data_paired_and_labelled():
    """One source per H with the same seed and path count: b is the paired jackknife
    interval of the per-path values; with shared draws the label says it is conditional."""
    rng = np.random.default_rng(1)
    srcs = [_src(h, 6, rng) for h in H]
    dat = head_scaling_data(srcs)
    Y = np.stack(dat["samples"], axis=1)
    ref = power_law_interval(H, Y)
    assert dat["fit"].as_tuple() == pytest.approx(ref.as_tuple())
    assert dat["fit"].label == "95% CI, jackknife Student-t, 6 paths"
    assert dat["intervals"][0].label == "95% CI, Student-t (log scale), 6 paths"
    shared = head_scaling_data([_src(h, 6, rng, per_path=False) for h in H])
    assert shared["fit"].conditional == CONDITIONAL_X0_D0
    assert shared["intervals"][1].label.endswith(CONDITIONAL_X0_D0)
    mixed = head_scaling_data([_src(h, 6, rng, seed=int(h)) for h in H])  # own seeds
    assert "H independent" in mixed["fit"].label


def test_head_scaling_data_one_path_batch_means():
    """One path per H: the interval of each mean is the batch-means interval of the path's
    late-window series, b's by the delta method on them; both conditional on one path."""
    rng = np.random.default_rng(2)
    srcs = [_src(h, 1, rng, records=201) for h in H]
    dat = head_scaling_data(srcs)
    late = srcs[0][1]["G2"][srcs[0][1]["t"] >= 5.0, 0]
    assert dat["intervals"][0].as_tuple() == pytest.approx(batch_means_interval(late).as_tuple())
    assert dat["intervals"][0].label == "95% CI, batch means, 5 blocks, conditional on one path"
    assert dat["fit"].ok and "delta method" in dat["fit"].label


def test_figure_and_summary_carry_the_same_interval(tmp_path, monkeypatch):
    """The head-scaling figure's legend prints b with the interval and label the summary
    uses; two paths: no bar, and the label says so (no least-squares ± anywhere)."""
    texts = []
    real = _figbase._save
    monkeypatch.setattr(_figbase, "_save", lambda f, *a: texts.extend(
        t.get_text().replace("\n    ", " ") for t in f.legends[0].get_texts()) or real(f, *a))
    rng = np.random.default_rng(3)
    srcs = [_src(h, 6, rng) for h in H]
    plotting.plot_head_scaling({"OU": srcs}, tmp_path, formats=("png",))
    fit = head_scaling_data(srcs)["fit"]
    assert any(f"[{fit.low:.3f}, {fit.high:.3f}]\n({fit.label})" in t for t in texts), texts
    texts.clear()
    plotting.plot_head_scaling({"OU": [_src(h, 2, rng) for h in H]}, tmp_path / "two",
                               formats=("png",))
    assert any("too few paths (2): no interval" in t for t in texts), texts
    assert not any("standard error" in t or "95% CI" in t for t in texts), texts


def test_head_scaling_compare_figure(tmp_path):
    """The cross-sphere figure: one PNG < 300 kB with a series per (sphere, family)."""
    from wflow.figures.section6 import head_scaling_compare

    rows = [dict(sphere=s, family=f, H=list(H), G2=list(0.4 * H ** b), ci=[0.01, np.nan, 1e-4],
                 a=0.4, b=b, b_ci=0.05) for s in ("S²", "S⁴") for f, b in (("ou", -1.0),
                                                                       ("oscillating", 0.0))]
    files = head_scaling_compare(rows, tmp_path, ("png",))
    assert [f.name for f in files] == ["head_scaling_spheres.png"]
    assert 0 < files[0].stat().st_size < 300_000
