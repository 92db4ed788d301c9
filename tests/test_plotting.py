"""Figures and animations (wflow.figures.plotting): headless rendering, sizes, fits, frame counts."""

import sys
import types
from pathlib import Path

import numpy as np
import pytest
from PIL import Image  # pillow: a dependency of wflow (GIF animations)

import wflow
from wflow.engine import driver
from wflow.figures import _figbase, plotting


def _cfg(d=3, heads=3, **over):
    cfg = {
        "model": {"n": 30, "heads": heads, "d": d},
        "solver": {"T": 0.5, "dt": 0.01, "record_every": 5, "paths": 2, "backend": "numpy"},
    }
    for key, val in over.items():
        sec, k = key.split(".")
        cfg.setdefault(sec, {})[k] = val
    return cfg


@pytest.fixture(scope="module")
def res3():
    return wflow.simulate(_cfg(d=3))


@pytest.fixture(scope="module")
def res2():
    return wflow.simulate(_cfg(d=2))


@pytest.fixture(scope="module")
def h5_run(tmp_path_factory):
    """A result file (T = 0.2), written once for the tests that plot or animate from a file."""
    return driver.run_to_file(_cfg(**{"solver.T": 0.2}),
                              path=tmp_path_factory.mktemp("h5") / "run.h5")


def _check_png(path, kind):
    with Image.open(path) as im:
        w, h = plotting.FIGSIZE[kind]
        assert im.size[0] == round(w * plotting.DPI)
        if kind == "head_scaling":  # grows by its legend, below the axes
            assert round(h * plotting.DPI) < im.size[1] < round((h + 2) * plotting.DPI)
        else:
            assert im.size[1] == round(h * plotting.DPI)
        lo_hi = im.convert("RGB").getextrema()
        assert any(lo < hi for lo, hi in lo_hi), "image is a single colour"


def _check_pdf(path):
    data = path.read_bytes()
    assert data.startswith(b"%PDF") and len(data) > 1000


#: the kinds a particle run draws (``density`` needs a density run: tests/test_density.py)
PARTICLE_KINDS = tuple(k for k in plotting.KINDS if k != "density")


def _check_both_formats(files, kinds, tmp_path):
    """One PNG then one PDF per kind, in kind order (each figure drawn once, saved in both
    formats): the PNG's size and not a single colour, the PDF a PDF."""
    names = [f.name for f in files]
    assert sorted(names) == sorted(f"{k}.{e}" for k in kinds for e in ("png", "pdf"))
    for kind in kinds:
        assert names.index(f"{kind}.png") + 1 == names.index(f"{kind}.pdf"), names
        _check_png(tmp_path / f"{kind}.png", kind)
        _check_pdf(tmp_path / f"{kind}.pdf")


def test_every_kind_renders(res3, tmp_path, monkeypatch):
    """kind = "all" from a (config, arrays) pair builds every particle kind, each saved in the
    formats asked for; every particle kind drawn once, as a PNG (its size, not a single colour);
    two kinds (lines and bands, a 3-D scatter) as a PNG then a PDF, each figure drawn once and
    saved in both formats. Every kind in both formats: the slow twin below (the PDF's TrueType
    font subsetting costs ~1 s per figure)."""
    made = {}

    def capture(fig, outdir, kind, formats):  # "all": what is built and saved, undrawn
        made[kind] = fig
        return [Path(outdir) / f"{kind}.{fmt}" for fmt in formats]

    with monkeypatch.context() as m:
        m.setattr(_figbase, "_save", capture)
        files = plotting.plot((res3.config, res3.arrays), kind="all", outdir=tmp_path / "png",
                              formats=("png",))
    assert sorted(f.name for f in files) == sorted(f"{k}.png" for k in PARTICLE_KINDS)
    assert sorted(made) == sorted(PARTICLE_KINDS) and all(f.axes for f in made.values())
    both = ["G2", "snapshots"]
    png_only = [k for k in PARTICLE_KINDS if k not in both]
    files = plotting.plot((res3.config, res3.arrays), kind=png_only, outdir=tmp_path / "png",
                          formats=("png",))
    assert [f.name for f in files] == [f"{k}.png" for k in png_only]
    for kind in png_only:
        _check_png(tmp_path / "png" / f"{kind}.png", kind)
    files = plotting.plot((res3.config, res3.arrays), kind=both, outdir=tmp_path)
    _check_both_formats(files, both, tmp_path)


@pytest.mark.slow
def test_every_kind_renders_png_and_pdf(res3, tmp_path):
    """kind = "all" with the default formats: every particle kind, each as a PNG then a PDF."""
    files = plotting.plot((res3.config, res3.arrays), kind="all", outdir=tmp_path)
    _check_both_formats(files, PARTICLE_KINDS, tmp_path)


def test_snapshots_circle_and_high_dimension(res2, tmp_path):
    (png,) = plotting.plot(res2, kind="snapshots", outdir=tmp_path / "d2", formats=("png",))
    _check_png(png, "snapshots")
    res4 = wflow.simulate(_cfg(d=4, **{"solver.T": 0.1}))
    (png,) = plotting.plot(res4, kind="snapshots", outdir=tmp_path / "d4", formats=("png",),
                           path_index=1)
    _check_png(png, "snapshots")


def test_path_source_reads_lazily(res3, tmp_path, monkeypatch):
    fake = types.ModuleType("wflow.storage.io")
    fake.read = lambda path: (res3.config, res3.arrays, {"file": str(path)})
    monkeypatch.setitem(sys.modules, "wflow.storage.io", fake)
    files = plotting.plot(tmp_path / "run.h5", kind="G2", outdir=tmp_path, formats=("png",))
    _check_png(files[0], "G2")


# ----------------------------------------------------------------------------- missing inputs
def _without(res, drop=(), nan=()):
    arrays = {k: v for k, v in res.arrays.items() if k not in drop}
    for k in nan:
        arrays[k] = np.full_like(arrays[k], np.nan)
    return res.config, arrays


def test_missing_series_give_one_line_value_errors(res3, tmp_path, built):
    """Errors are raised while a figure is built: nothing needs drawing (``built``)."""
    no_x = _without(res3, drop=("X",))
    with pytest.raises(ValueError, match="snapshots: no token snapshots") as e:
        plotting.plot(no_x, kind="snapshots", outdir=tmp_path)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="animate: no token snapshots"):
        plotting.animate(no_x, out=tmp_path / "a.gif")
    no_ledger = _without(res3, nan=("weight_work", "token_work", "drift_work", "martingale",
                                    "ito_realised", "ledger_residual"))
    with pytest.raises(ValueError, match="ledger: series 'weight_work' is all NaN") as e:
        plotting.plot(no_ledger, kind="ledger", outdir=tmp_path)
    assert "\n" not in str(e.value)
    clustering = ("order_parameter", "min_cosine", "n_clusters", "variance", "spectral_rank")
    no_cluster = _without(res3, drop=clustering)
    with pytest.raises(ValueError, match="clustering"):
        plotting.plot(no_cluster, kind="clustering", outdir=tmp_path)
    # "all" skips what cannot be drawn
    files = plotting.plot(_without(res3, drop=("X",), nan=("weight_work",)), outdir=tmp_path,
                          formats=("png",))
    names = {f.name for f in files}
    assert "snapshots.png" not in names and "ledger.png" not in names
    assert {"G2.png", "balance.png", "clustering.png"} <= names


def test_bad_arguments(res3, tmp_path):
    with pytest.raises(ValueError, match="kind"):
        plotting.plot(res3, kind="nope", outdir=tmp_path)
    with pytest.raises(ValueError, match="formats"):
        plotting.plot(res3, kind="G2", outdir=tmp_path, formats=("jpg",))
    with pytest.raises(ValueError, match="path_index"):
        plotting.plot(res3, kind="snapshots", outdir=tmp_path, path_index=5)
    with pytest.raises(TypeError):
        plotting.plot(42, kind="G2", outdir=tmp_path)


# ----------------------------------------------------------------------------- head scaling
def test_fit_power_law_exact():
    H = np.array([1, 2, 5, 10, 100])
    a, b, se = plotting.fit_power_law(H, 0.52 * H**-1.0)
    assert a == pytest.approx(0.52, rel=1e-12)
    assert b == pytest.approx(-1.0, abs=1e-12)
    assert se == pytest.approx(0.0, abs=1e-10)
    a, b, se = plotting.fit_power_law([1, 10], [3.0, 0.3])
    assert (a, b) == (pytest.approx(3.0), pytest.approx(-1.0)) and np.isnan(se)


def test_fit_power_law_noisy():
    rng = np.random.default_rng(1)
    H = np.repeat([1, 3, 10, 30, 100], 4)
    G2 = 0.5 * H**-0.9 * np.exp(0.05 * rng.standard_normal(H.size))
    a, b, se = plotting.fit_power_law(H, G2)
    assert 0 < se < 0.05
    assert abs(b + 0.9) < 4 * se + 1e-3
    assert a == pytest.approx(0.5, rel=0.1)


def test_fit_power_law_rejects_bad_input():
    with pytest.raises(ValueError, match="two distinct"):
        plotting.fit_power_law([4, 4], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        plotting.fit_power_law([1, 2], [1.0, -2.0])


def _synthetic(H, a=0.5, b=-1.0, paths=5, seed=0):
    """A (config, arrays) pair whose late-window G² is a·H^b up to path noise."""
    rng = np.random.default_rng(seed + H)
    t = np.linspace(0.0, 4.0, 41)
    G2 = a * H**b * np.exp(0.05 * rng.standard_normal((t.size, paths)))
    G2[t < 2.0] *= 10.0  # the early transient must be ignored by the window t >= T/2
    return {"model": {"heads": H}}, {"t": t, "G2": G2}


def test_head_scaling_data_and_plot(tmp_path):
    sources = [_synthetic(H) for H in (1, 4, 16, 64)]
    dat = plotting.head_scaling_data(sources)
    np.testing.assert_array_equal(dat["H"], [1, 4, 16, 64])
    assert np.all(dat["paths"] == 5) and np.all(dat["ci"] > 0)
    a, b, se = plotting.fit_power_law(dat["H"], dat["mean"])
    assert b == pytest.approx(-1.0, abs=0.05) and a == pytest.approx(0.5, rel=0.1)
    files = plotting.plot_head_scaling(sources, tmp_path)
    _check_png(files[0], "head_scaling")
    _check_pdf(files[1])
    # two labelled families, an explicit window
    fam = {"OU": sources, "oscillating": [_synthetic(H, b=0.0) for H in (1, 4, 16)]}
    (png,) = plotting.plot_head_scaling(fam, tmp_path / "fam", window=2.0, formats=("png",))
    _check_png(png, "head_scaling")
    with pytest.raises(ValueError, match="window"):
        plotting.head_scaling_data(sources, window=(10.0, 11.0))


# ----------------------------------------------------------------------------- animation
def test_frame_indices():
    idx = plotting.frame_indices(11, 5)
    assert idx.tolist() == [0, 2, 5, 8, 10]
    assert plotting.frame_indices(7, 200).tolist() == list(range(7))
    for R, m in [(100, 7), (401, 200), (3, 3), (5, 1)]:
        idx = plotting.frame_indices(R, m)
        assert len(idx) == min(R, m) and len(set(idx.tolist())) == len(idx)
        assert idx[0] == 0 and (m == 1 or idx[-1] == R - 1)


@pytest.mark.parametrize("which, max_frames", [("res3", 6), ("res2", 200)])
def test_animation_frame_count(request, tmp_path, which, max_frames):
    res = request.getfixturevalue(which)
    records = len(res.t)
    out = plotting.animate(res, out=tmp_path / "tokens.gif", fps=10, max_frames=max_frames)
    with Image.open(out) as im:
        assert im.n_frames == min(records, max_frames)
        w, h = plotting.ANIMATION_FIGSIZE
        assert im.size == (round(w * plotting.ANIMATION_DPI), round(h * plotting.ANIMATION_DPI))


def test_mp4_out_of_the_box(h5_run, tmp_path, capsys):
    """`wflow animate -o tokens.mp4` with the ffmpeg that imageio-ffmpeg bundles."""
    import imageio_ffmpeg

    from wflow.cli import main

    path = h5_run
    from wflow.storage import io

    records = len(io.read(path)[1]["t"])
    out = tmp_path / "movie" / "tokens.mp4"
    rc = main(["animate", str(path), "-o", str(out), "--fps", "5"])
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    assert stdout.strip() == str(out) and out.stat().st_size > 1000
    assert out.read_bytes()[4:8] == b"ftyp"  # an MP4 container
    frames, secs = imageio_ffmpeg.count_frames_and_secs(str(out))
    assert frames == records and secs == pytest.approx(records / 5, abs=0.25)
    reader = imageio_ffmpeg.read_frames(str(out))
    meta = next(reader)
    assert meta["codec"] == "h264" and sum(1 for _ in reader) == records


def test_animation_output_errors(res2, tmp_path, monkeypatch):
    import imageio_ffmpeg

    def missing():
        raise RuntimeError("no ffmpeg")

    monkeypatch.setattr(imageio_ffmpeg, "get_ffmpeg_exe", missing)
    monkeypatch.setattr(plotting.shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match="ffmpeg") as e:
        plotting.animate(res2, out=tmp_path / "tokens.mp4")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"\.gif or \.mp4"):
        plotting.animate(res2, out=tmp_path / "tokens.avi")


def test_hdf5_round_trip(h5_run, tmp_path):
    path = h5_run
    files = plotting.plot(path, kind=["G2", "snapshots"], outdir=tmp_path, formats=("png",))
    _check_png(files[0], "G2")
    _check_png(files[1], "snapshots")
    out = plotting.animate(path, out=tmp_path / "t.gif", max_frames=3)
    with Image.open(out) as im:
        assert im.n_frames == 3


# ----------------------------------------------------------------------------- honest figures
@pytest.fixture
def figs(monkeypatch):
    """The figures drawn (saved as usual), by kind."""
    drawn = {}
    save = _figbase._save

    def capture(fig, outdir, kind, formats):
        out = save(fig, outdir, kind, formats)  # draws the canvas
        drawn[kind] = fig
        return out

    monkeypatch.setattr(_figbase, "_save", capture)
    return drawn


@pytest.fixture
def built(monkeypatch):
    """The figures as built, by kind, not drawn nor saved: for claims about what a figure
    contains (titles, texts), which are set when it is built; the drawing is
    test_every_kind_renders's."""
    made = {}

    def capture(fig, outdir, kind, formats):
        made[kind] = fig
        return [Path(outdir) / f"{kind}.{fmt}" for fmt in formats]

    monkeypatch.setattr(_figbase, "_save", capture)
    return made


def _with(res, laplacian=None, **arrays):
    config = {**res.config, "model": {**res.config["model"]}}
    if laplacian is not None:
        config["model"]["laplacian_heads"] = laplacian
    return config, {**res.arrays, **arrays}


def test_titles_name_the_laplacian_heads(res3, tmp_path, built):
    figs = built
    titles = {}
    for lap in ([], [2], [0, 1, 2], 2):  # the other kinds for two of them
        kinds = ["G2"] + (["clustering", "snapshots"] if lap in ([], 2) else [])
        plotting.plot(_with(res3, lap), kind=kinds, outdir=tmp_path, formats=("png",))
        titles[str(lap)] = {k: figs.pop(k).get_suptitle() for k in kinds}
    heads = {k: v["G2"].split("\n")[1].split(", n = ")[0] for k, v in titles.items()}
    assert heads == {"[]": "H = 3 attention heads", "[2]": "H = 3: 2 attention + 1 Laplacian head",
                     "[0, 1, 2]": "H = 3 Laplacian heads",
                     "2": "H = 3: 1 attention + 2 Laplacian heads"}
    for kind in ("G2", "clustering", "snapshots"):
        shown = [v[kind] for v in titles.values() if kind in v]
        assert len(set(shown)) == len(shown) >= 2, kind


def test_clustering_shows_no_offset_notation(res3, tmp_path, figs):
    mc = np.asarray(res3.arrays["min_cosine"])
    tiny = -1.0 + 1e-6 * np.abs(np.sin(np.arange(mc.size))).reshape(mc.shape)
    plotting.plot(_with(res3, min_cosine=tiny, variance=1.0 - 1e-7 * np.ones_like(mc)),
                  kind="clustering", outdir=tmp_path, formats=("png",))
    axes = [ax for ax in figs["clustering"].axes if ax.get_title()]
    assert any("smallest cosine" in ax.get_title() for ax in axes)
    for ax in axes:
        assert ax.yaxis.get_offset_text().get_text() == "", ax.get_title()


def test_snapshot_colours_are_explained(res3, res2, tmp_path, built):
    for res, where in ((res3, "hue = azimuth, brightness = height"),
                       (res2, "hue = angle on the circle")):
        plotting.plot(res, kind="snapshots", outdir=tmp_path, formats=("png",))
        texts = [t.get_text() for t in built["snapshots"].texts]
        assert any(t.startswith("colour: each token's position at $t = 0$") and where in t
                   for t in texts), texts


def test_G2_shows_negative_dissipation_and_the_window(res3, tmp_path, built):
    """The axis scale, legend, window patch and limits, as the figure is built (``built``:
    the limits are autoscaled on request, without drawing)."""
    figs = built
    plotting.plot(res3, kind="G2", outdir=tmp_path, formats=("png",))
    (ax,) = figs["G2"].axes
    assert ax.get_yscale() == "log"
    labels = ax.get_legend_handles_labels()[1]
    assert labels[0] == r"late window $t \geq T/2$ (summary means)"
    x0, x1 = ax.patches[0].get_x(), ax.patches[0].get_x() + ax.patches[0].get_width()
    assert (x0, x1) == pytest.approx((0.25, 0.5))  # T = 0.5
    D = np.asarray(res3.arrays["dissipation"])
    plotting.plot(_with(res3, dissipation=-D), kind="G2", outdir=tmp_path, formats=("png",))
    (ax,) = figs["G2"].axes
    assert ax.get_yscale() == "symlog"  # a log axis would hide every value of -D
    lo, hi = ax.get_ylim()
    assert lo <= -np.max(D) and hi >= np.max(res3.arrays["G2"])
    assert "symlog: linear within" in ax.get_ylabel()


@pytest.mark.parametrize("status,head", [("running", "PARTIAL (run not complete): 11 of 51 "
                                          "records"),
                                         ("failed", "FAILED run: 11 of 51 records"),
                                         ("complete", None)])
def test_partial_files_are_marked(res3, tmp_path, built, status, head):
    figs = built
    n = 11
    arrays = {k: np.asarray(v)[:n] for k, v in res3.arrays.items()}
    src = (res3.config, arrays, {"status": status, "n_records_expected": 51})
    plotting.plot(src, kind=["G2", "clustering"], outdir=tmp_path, formats=("png",))
    for kind, fig in figs.items():
        title = fig.get_suptitle()
        marks = [t for t in fig.texts if t.get_text() == "PARTIAL"]
        if head is None:
            assert "PARTIAL" not in title and "FAILED" not in title and marks == []
        else:
            assert title.startswith(head + "\n"), (kind, title)
            assert len(marks) == 1, kind


def test_layout_problems_sees_clipped_text_and_data_off_the_axes(tmp_path, monkeypatch):
    """The check every figure of the suite passes (``WFLOW_STRICT_FIGURES``): a title wider
    than the canvas and an error bar running off the axes are found; a clean figure passes."""
    from matplotlib.figure import Figure

    from wflow.figures import _figbase

    def fig_with(title="ok", bar=0.1):
        fig = Figure(figsize=(3, 2), dpi=100, layout="constrained")
        ax = fig.add_subplot()
        ax.errorbar([1, 2], [1.0, 1.0], yerr=[bar, 0.1], fmt="o")
        ax.set_ylim(0.5, 1.5)
        ax.set_title(title)
        return fig

    assert _figbase.layout_problems(fig_with()) == []
    wide = _figbase.layout_problems(fig_with(title="a title far wider than the canvas " * 3))
    assert len(wide) == 1 and "cut off by the canvas" in wide[0]
    off = _figbase.layout_problems(fig_with(bar=2.0))
    assert len(off) == 1 and "outside the axes" in off[0]
    monkeypatch.setenv("WFLOW_STRICT_FIGURES", "1")
    with pytest.raises(AssertionError, match="outside the axes"):
        _figbase._save(fig_with(bar=2.0), tmp_path, "bad", ("png",))
    assert not (tmp_path / "bad.png").exists()


def test_figure_context_marks_and_reports(tmp_path):
    """Inside ``figure_context`` a figure carries the mark and each file is reported."""
    from matplotlib.figure import Figure

    from wflow.figures import _figbase

    seen = []
    fig = Figure(figsize=(3, 2), dpi=100, layout="constrained")
    fig.add_subplot().plot([0, 1], [0, 1])
    with _figbase.figure_context(mark="quick: pipeline check", on_save=seen.append):
        out = _figbase._save(fig, tmp_path, "f", ("png", "svg"))
    assert seen == out
    assert "quick: pipeline check" in (tmp_path / "f.svg").read_text()
    fig2 = Figure(figsize=(3, 2), dpi=100, layout="constrained")
    fig2.add_subplot()
    _figbase._save(fig2, tmp_path, "g", ("svg",))  # outside: no mark, nothing reported
    assert "pipeline check" not in (tmp_path / "g.svg").read_text() and len(seen) == 2
