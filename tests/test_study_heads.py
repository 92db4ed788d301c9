"""The ``heads`` study: its quick claim and honest head-scaling intervals (the intervals
themselves: ``tests/test_intervals.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from wflow.analysis.results import head_scaling_data
from wflow.figures import _figbase, plotting
from wflow.studies import get_study, run_study


# ------------------------------------------------------------------------- the quick claim
def test_quick_claim_ou_exponent(tmp_path, monkeypatch):
    """Quick mode (n = 16, T = 3, 4 paths): OU b < −0.5 over H ∈ {1, 4, 16, 64}, with its
    95% interval below zero, and the oscillating shared phase decays less with H than OU
    (b_shared > b_ou). Both hold for each of the seeds 0–9 (OU b from −0.99 to −0.72, its
    upper bound below −0.2; b_shared − b_ou ≥ 0.47); the shared phase's own b is not near 0
    at T = 3 for every seed (−0.38 to 0.29: the heads have not relaxed to one trajectory),
    so no bound on it is claimed here. The figure's legend and the summary print the same
    interval with the same label."""
    from wflow.figures import heads as fig

    legends = []
    real = fig._save
    monkeypatch.setattr(fig, "_save", lambda f, *a: legends.extend(
        t.get_text() for ax in f.axes if ax.get_legend() for t in ax.get_legend().get_texts())
        or real(f, *a))
    res = run_study("heads", tmp_path, scale="quick", formats=("png",))
    r = get_study("heads").analyse(res.data)
    ou, sh = r["fits"]["ou", "G2"], r["fits"]["shared", "G2"]
    assert sorted(r["groups"]["ou"]) == [1, 4, 16, 64]
    assert ou.estimate < -0.5 and ou.high < 0 and ou.low <= ou.estimate <= ou.high
    assert sh.estimate > ou.estimate
    assert ou.label == "95% CI, jackknife Student-t, 4 paths"
    assert f"b(G²) = {ou.fmt('.3f')} ({ou.label})" in res.text
    assert any(f"[{ou.low:.3f}, {ou.high:.3f}]\n({ou.label})" in t for t in legends)
    m = r["means"]["ou", 1, "G2"]
    assert any(m.label in t for t in legends) and m.label in res.text
    assert "Resolution" in res.text and "2 x 2 design" in res.text
    cell = r["means"]["cell_t0w0", 1, "G2"]  # one X0 and D(0) for all paths: said so
    assert cell.label.endswith("conditional on one X₀, D(0)") and cell.label in res.text
    assert not r["spread"]["cell_t0w0", 1].ok  # 4 paths: no bootstrap interval of the SD


# ------------------------------------------------------------------------- honest figures
def _source(H, P, rng):
    t = np.linspace(0.0, 10.0, 21)
    G2 = 0.5 / H * rng.lognormal(0.0, 1.0, size=(1, P)) * np.ones((t.size, 1))
    return {"model": {"heads": H}}, {"t": t, "G2": G2}


@pytest.mark.parametrize("P", [2])
def test_head_scaling_few_paths_no_interval(tmp_path, monkeypatch, P):
    """Two paths: no error bar is drawn (the old lower bar was clipped to ~1e-11 and the
    log axis spanned ten decades) and the legend says there is no interval, with no other
    ± on b (one path gets batch means: ``tests/test_study_section6.py``)."""
    figs = []
    real = _figbase._save
    monkeypatch.setattr(_figbase, "_save", lambda fig, *a: figs.append(fig) or real(fig, *a))
    rng = np.random.default_rng(P)
    srcs = [_source(H, P, rng) for H in (1, 10, 100)]
    assert np.all(np.isnan(head_scaling_data(srcs)["low"]))
    plotting.plot_head_scaling({"OU": srcs}, tmp_path, formats=("png",))
    ax = figs[0].axes[0]
    lo, hi = ax.get_ylim()
    assert hi / lo < 1e4  # three points over two decades, no bar to 1e-11
    texts = [t.get_text() for t in figs[0].legends[0].get_texts()]  # below the axes
    assert any("no interval" in t for t in texts) and not any("95% CI" in t for t in texts)
    assert not any("standard error" in t for t in texts)
