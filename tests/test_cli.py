"""The ``wflow`` command: exit codes, one-line errors, run/resume/info/validate/experiments."""

from __future__ import annotations

import importlib.resources
import subprocess
import sys
import types
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_io import _fail_after_calls, status, tiny

import wflow
from wflow import config as C
from wflow.cli import _toml, main
from wflow.engine import driver
from wflow.storage import io

SHIPPED = Path(str(importlib.resources.files("wflow").joinpath("data", "experiments")))


@pytest.fixture
def cfg_file(tmp_path):
    p = tmp_path / "cfg.toml"
    p.write_text(_toml(tiny()))
    return p


@pytest.fixture(scope="module")
def result_file(tmp_path_factory):
    """A complete result of ``cfg_file``'s run, written once for the tests that only read it
    (info, plot, animate): ``run`` itself is tested on fresh files."""
    return driver.run_to_file(tiny(), tmp_path_factory.mktemp("result") / "o.h5")


def run_cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(err):
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0], f"expected one stderr line, got {err!r}"
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------ run
def test_run_writes_file_and_summary(tmp_path, cfg_file, capsys):
    out = tmp_path / "o.h5"
    rc, stdout, err = run_cli(capsys, "run", cfg_file, "-o", out, "-q")
    assert rc == 0, err
    assert err == ""  # -q: no progress bar
    assert "wflow run: n=12 d=3 H=3 paths=2" in stdout and "steps=20" in stdout
    assert f"wrote {out}" in stdout
    assert "energy" in stdout and "(mean over 2 paths)" in stdout
    assert status(out) == "complete"
    cfg, arrays, _ = io.read(out)
    assert cfg == C.validate(tiny())
    np.testing.assert_array_equal(arrays["energy"], wflow.simulate(tiny()).energy)


def test_run_default_path_is_output_path_and_progress_goes_to_stderr(tmp_path, cfg_file,
                                                                      capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, stdout, err = run_cli(capsys, "run", cfg_file, "--set", "output.path=here.h5")
    assert rc == 0
    assert status(tmp_path / "here.h5") == "complete"
    assert "20/20" in err  # the tqdm bar, on stderr only
    assert "20/20" not in stdout


BAD_SETS = [
    ("model.n=0", "model.n"),
    ("solver.dt=-0.01", "solver.dt"),
    ("model.heads=2.5", "model.heads"),
    ("model.normalization=foo", "model.normalization"),
    ("weights.process=brownian", "weights.process"),
    ("solver.paths=0", "solver.paths"),
    ("output.checkpoint_every=0", "output.checkpoint_every"),
    ("model.nonsense=1", "model.nonsense"),  # unknown key
    ("bogus.x=1", "bogus"),  # unknown section
    ("solver.T", "solver.T"),  # no '='
    ("solver.adaptive=true", "solver.method"),  # euler has no error estimate [model §6d]
    ("solver.event=energy", "solver.event"),  # not a per-path statistic
]


@pytest.mark.parametrize("bad,key", BAD_SETS)
def test_run_bad_override_exit_2_one_line(tmp_path, cfg_file, capsys, bad, key):
    out = tmp_path / "o.h5"
    rc, stdout, err = run_cli(capsys, "run", cfg_file, "-o", out, "--set", bad, "-q")
    assert rc == 2
    line = one_line(err)
    assert line.startswith("wflow: error:") and key in line
    assert not out.exists() and not Path(f"{out}.lock").exists()
    assert list(tmp_path.iterdir()) == [cfg_file]


def test_run_missing_config_file(tmp_path, capsys):
    out = tmp_path / "o.h5"
    rc, _, err = run_cli(capsys, "run", tmp_path / "nope.toml", "-o", out, "-q")
    assert rc == 2
    assert "nope.toml" in one_line(err) and "not found" in err
    assert not out.exists()


def test_run_refuses_existing_complete_output(tmp_path, cfg_file, capsys):
    out = tmp_path / "o.h5"
    assert run_cli(capsys, "run", cfg_file, "-o", out, "-q")[0] == 0
    before = out.read_bytes()
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", out, "-q", "--set", "init.seed=5")
    assert rc == 2
    assert "--overwrite" in one_line(err) and str(out) in err
    assert out.read_bytes() == before
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", out, "-q", "--set", "init.seed=5",
                         "--overwrite")
    assert rc == 0, err
    assert io.read(out)[0]["init"]["seed"] == 5 and status(out) == "complete"


def test_run_refuses_partial_output(tmp_path, cfg_file, capsys):
    out = tmp_path / "o.h5"
    io.H5Recorder(out, C.validate(tiny())).close()
    for extra in ([], ["--overwrite"]):
        rc, _, err = run_cli(capsys, "run", cfg_file, "-o", out, "-q", *extra)
        assert rc == 2
        assert "wflow resume" in one_line(err)
    assert status(out) == "running"


def test_numerical_error_exit_1_and_failed_status(tmp_path, cfg_file, capsys, monkeypatch):
    out = tmp_path / "o.h5"
    _fail_after_calls(monkeypatch, 15)
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", out, "-q")
    assert rc == 1
    line = one_line(err)
    assert "non-finite energy at step 7" in line and "-v" in line
    assert status(out) == "failed"
    rc, _, err = run_cli(capsys, "-v", "run", cfg_file, "-o", tmp_path / "v.h5", "-q")
    assert rc == 1 and "Traceback" in err  # -v shows the traceback
    monkeypatch.undo()
    rc, stdout, err = run_cli(capsys, "resume", out, "-q")
    assert rc == 1 and stdout == ""
    assert one_line(err) == (f"wflow: error: {out}: the run failed at step 7: non-finite energy "
                             "at step 7 (t = 0.07); nothing to resume (change the configuration "
                             "and run again with --overwrite)")
    rc, stdout, err = run_cli(capsys, "info", out)
    assert rc == 0 and err == ""
    assert "status         failed at step 7 of 20 (nothing to resume)\n" in stdout
    assert "wflow resume" not in stdout
    assert "error          non-finite energy at step 7 (t = 0.07)" in stdout


def test_run_beta_500_fails_for_good(tmp_path, capsys):
    """beta = 500 overflows the energy at step 0."""
    out = tmp_path / "b.h5"
    rc, _, err = run_cli(capsys, "run", "--set", "model.beta=500", "--set", "solver.T=0.05",
                         "--set", "solver.backend=numpy", "-o", out, "-q")
    assert rc == 1 and "non-finite" in one_line(err)
    assert status(out) == "failed" and io.inspect(out)["attrs"]["failed_step"] == 0
    rc, _, err = run_cli(capsys, "resume", out, "-q")
    assert rc == 1 and "the run failed at step 0" in one_line(err)


def test_unexpected_exception_exit_1(tmp_path, cfg_file, capsys, monkeypatch):
    def broken(*a, **k):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(driver, "run_to_file", broken)
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", tmp_path / "o.h5", "-q")
    assert rc == 1
    line = one_line(err)
    assert "internal error: ZeroDivisionError: boom" in line and "-v" in line


def test_usage_error_one_line(capsys):
    rc, _, err = run_cli(capsys, "frobnicate")
    assert rc == 2 and "invalid choice" in one_line(err)
    rc, _, err = run_cli(capsys, "run", "--no-such-flag")
    assert rc == 2 and "--no-such-flag" in one_line(err)


# ------------------------------------------------------------------ resume / info
def test_resume_complete_is_noop(tmp_path, cfg_file, capsys):
    out = tmp_path / "o.h5"
    run_cli(capsys, "run", cfg_file, "-o", out, "-q")
    before = out.read_bytes()
    rc, stdout, err = run_cli(capsys, "resume", out)
    assert rc == 0 and err == ""
    assert "already complete" in stdout and "nothing to do" in stdout
    assert out.read_bytes() == before


@pytest.mark.parametrize("cmd", ["resume", "info", "plot", "animate"])
def test_bad_result_files_exit_2(tmp_path, capsys, cmd):
    missing = tmp_path / "missing.h5"
    rc, _, err = run_cli(capsys, cmd, missing)
    assert rc == 2 and "missing.h5" in one_line(err)
    text = tmp_path / "text.h5"
    text.write_text("not hdf5")
    rc, _, err = run_cli(capsys, cmd, text)
    assert rc == 2 and "not an HDF5 file" in one_line(err) and "text.h5" in err
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = 1
    rc, _, err = run_cli(capsys, cmd, plain)
    assert rc == 2 and "not a wflow result" in one_line(err)


def test_info_complete_and_partial(tmp_path, cfg_file, capsys, monkeypatch, result_file):
    out = result_file
    rc, stdout, err = run_cli(capsys, "info", out)
    assert rc == 0 and err == ""
    assert "status         complete" in stdout
    assert "records        5 of 5" in stdout
    assert "[model]" in stdout and "n = 12" in stdout and "heads = 3" in stdout
    assert driver.result_hash(tiny()) in stdout
    assert "energy" in stdout and "series/energy" in stdout
    # the printed configuration is valid TOML describing the same run
    import tomllib

    text = stdout.split("# configuration\n", 1)[1].split("\n\nseries", 1)[0]
    shown = C.validate(tomllib.loads(text))
    assert shown["output"]["path"] == str(out.resolve())  # where the file is
    assert shown == C.validate(tiny(**{"output.path": str(out.resolve())}))
    assert "t = T" in stdout.split("\nseries", 1)[1].splitlines()[0]

    partial = tmp_path / "p.h5"
    _fail_after_calls(monkeypatch, 15, interrupt=True)
    assert run_cli(capsys, "run", cfg_file, "-o", partial, "-q")[0] == 1
    rc, stdout, _ = run_cli(capsys, "info", partial)
    assert rc == 0
    assert (f"status         interrupted at step 4 of 20 (resume with `wflow resume "
            f"{partial.resolve()}`)\n") in stdout
    assert "Interrupted" in stdout


def test_info_says_live_while_a_writer_holds_the_file(tmp_path, cfg_file, capsys, monkeypatch):
    import os

    from wflow.storage import _locks

    partial = tmp_path / "p.h5"
    _fail_after_calls(monkeypatch, 15, interrupt=True)
    assert run_cli(capsys, "run", cfg_file, "-o", partial, "-q")[0] == 1
    lock = _locks._Lock(partial).acquire(partial)  # as a running `wflow run` holds it
    try:
        rc, stdout, _ = run_cli(capsys, "info", partial)
        assert rc == 0
        assert (f"status         live (written by pid {os.getpid()}, last checkpoint at step 4 "
                "of 20)\n") in stdout
        assert "wflow resume" not in stdout
        assert io.lock_holder(partial) == os.getpid()
    finally:
        lock.release()
    assert io.lock_holder(partial) is None
    rc, stdout, _ = run_cli(capsys, "info", partial)
    assert "status         interrupted at step 4 of 20" in stdout
    # asking did not disturb the lock: a writer takes the file again
    _locks._Lock(partial).acquire(partial).release()


def test_info_labels_the_last_column_with_its_time(tmp_path, cfg_file, capsys, monkeypatch):
    partial = tmp_path / "p.h5"
    _fail_after_calls(monkeypatch, 15, interrupt=True)  # at step 7: records t = 0, 0.05
    assert run_cli(capsys, "run", cfg_file, "-o", partial, "-q")[0] == 1
    rc, stdout, _ = run_cli(capsys, "info", partial)
    assert rc == 0
    header = stdout.split("\nseries", 1)[1].splitlines()[0].split()
    assert header[:6] == ["t", "=", "0", "t", "=", "0.05"] and "T" not in header


def test_info_shows_the_real_path_instead_of_the_stored_one(tmp_path, capsys):
    cfg = tiny(**{"output.path": str(tmp_path / "first.h5")})
    first = driver.run_to_file(cfg)
    moved = tmp_path / "moved.h5"
    first.rename(moved)
    rc, stdout, _ = run_cli(capsys, "info", moved)
    assert rc == 0
    conf = stdout.split("# configuration\n", 1)[1]
    assert conf.startswith(f"# output.path: where the file is (its configuration says "
                           f"{str(tmp_path / 'first.h5')!r})\n")
    assert f'path = "{moved.resolve()}"' in conf and "first.h5\"" not in conf
    rc, stdout, _ = run_cli(capsys, "info", driver.run_to_file(cfg))  # not moved: as stored
    assert "# output.path" not in stdout and f'path = "{tmp_path / "first.h5"}"' in stdout


# ------------------------------------------------------------------ validate
def test_validate(cfg_file, capsys):
    rc, stdout, err = run_cli(capsys, "validate", cfg_file)
    assert rc == 0 and err == ""
    assert stdout.startswith("ok: n=12 d=3 H=3 paths=2 method=euler backend=numpy steps=20 "
                             "records=5\nmemory: about ")
    assert stdout.endswith(f"\nconfig_hash: {driver.result_hash(tiny())}\n")
    rc, stdout, _ = run_cli(capsys, "validate", cfg_file, "--set", "model.n=20")
    assert stdout.endswith(
        f"config_hash: {driver.result_hash(C.apply_overrides(tiny(), ['model.n=20']))}\n")
    for bad, key in BAD_SETS:
        rc, stdout, err = run_cli(capsys, "validate", cfg_file, "--set", bad)
        assert rc == 2 and stdout == ""
        assert key in one_line(err)


def test_validate_subprocess_entry_point(cfg_file):
    p = subprocess.run([sys.executable, "-m", "wflow.cli", "validate", str(cfg_file),
                        "--set", "model.beta=-1"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert one_line(p.stderr).startswith("wflow: error: model.beta")


# ------------------------------------------------------------------ experiments
def test_experiments_list_shipped(capsys):
    rc, stdout, err = run_cli(capsys, "experiments", "list")
    assert rc == 0 and err == ""
    shipped = sorted(p.stem for p in SHIPPED.glob("*.toml"))
    assert "paper_ou" in shipped
    listed = [line.split()[0] for line in stdout.strip().splitlines()]
    assert listed == shipped
    # the whole leading comment, one line per experiment
    assert "Vary the head count with `--set model.heads=1` / `model.heads=100`." in stdout
    # every shipped configuration validates
    for p in SHIPPED.glob("*.toml"):
        C.resolve(p)


def test_experiments_dir_and_run(tmp_path, cfg_file, capsys, monkeypatch):
    d = tmp_path / "exps"
    d.mkdir()
    (d / "mine.toml").write_text("# my tiny experiment\n" + _toml(tiny()))
    rc, stdout, _ = run_cli(capsys, "experiments", "list", "--dir", d)
    assert rc == 0 and stdout.split() == ["mine", "my", "tiny", "experiment"]
    out = tmp_path / "e.h5"
    rc, stdout, err = run_cli(capsys, "experiments", "run", "mine", "--dir", d, "-o", out, "-q")
    assert rc == 0, err
    assert status(out) == "complete"
    rc, _, err = run_cli(capsys, "experiments", "run", "nope", "--dir", d)
    assert rc == 2 and "unknown experiment 'nope'" in one_line(err) and "mine" in err
    rc, _, err = run_cli(capsys, "experiments", "list", "--dir", tmp_path / "none")
    assert rc == 2 and "not found" in one_line(err)
    # a shipped experiment, shrunk
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_cli(capsys, "experiments", "run", "paper_ou", "-q", "-o", "ou.h5",
                         "--set", "model.n=8", "--set", "solver.T=0.05",
                         "--set", "solver.paths=1", "--set", "solver.backend=numpy")
    assert rc == 0, err
    assert io.read(tmp_path / "ou.h5")[0]["model"]["heads"] == 10


# ------------------------------------------------------------------ plot / animate / bench
@pytest.fixture
def fake_plotting(monkeypatch):
    calls = []
    mod = types.ModuleType("wflow.figures.plotting")
    mod.KINDS = ("energy", "snapshots", "density")
    mod.PlotInputError = type("PlotInputError", (ValueError,), {})

    def plot(path, kind, outdir, formats=("png", "pdf")):
        calls.append(("plot", Path(path), kind, Path(outdir)))
        if kind == "density":
            raise mod.PlotInputError("density: not a density run")
        return [Path(outdir) / f"{kind}.png"]

    def animate(path, out, fps):
        calls.append(("animate", Path(path), Path(out), fps))
        return Path(out)

    mod.plot, mod.animate = plot, animate
    monkeypatch.setitem(sys.modules, "wflow.figures.plotting", mod)
    monkeypatch.setattr(wflow, "plotting", mod, raising=False)
    return calls


def test_plot_and_animate_wiring(tmp_path, capsys, fake_plotting, result_file):
    out = result_file
    rc, stdout, err = run_cli(capsys, "plot", out)
    assert rc == 0  # every kind that applies; the others skipped, each with its reason
    default_dir = out.parent / "o_plots"
    assert fake_plotting == [("plot", out, k, default_dir)
                             for k in ("energy", "snapshots", "density")]
    assert str(default_dir / "energy.png") in stdout
    assert err.strip() == "wflow plot: skipped density: not a density run"
    fake_plotting.clear()
    rc, _, err = run_cli(capsys, "plot", out, "--kind", "density", "-o", tmp_path / "d")
    assert rc == 2 and "not a density run" in one_line(err)  # asked for: an error
    assert not (tmp_path / "d").exists()  # nothing drawn, no folder left behind
    fake_plotting.clear()
    rc, _, _ = run_cli(capsys, "plot", out, "--kind", "snapshots", "-o", tmp_path / "figs")
    assert rc == 0 and fake_plotting == [("plot", out, "snapshots", tmp_path / "figs")]
    rc, _, err = run_cli(capsys, "plot", out, "--kind", "nope")
    assert rc == 2 and "'nope'" in one_line(err) and "'energy'" in err
    fake_plotting.clear()
    rc, stdout, _ = run_cli(capsys, "animate", out, "--fps", "7")
    assert rc == 0 and fake_plotting == [("animate", out, out.parent / "o.gif", 7)]
    rc, _, err = run_cli(capsys, "animate", out, "--fps", "0")
    assert rc == 2 and "--fps" in one_line(err)


def test_animate_needs_tokens(tmp_path, capsys, fake_plotting):
    out = driver.run_to_file(tiny(**{"output.store_tokens": False}), tmp_path / "o.h5")
    rc, _, err = run_cli(capsys, "animate", out)
    assert rc == 2 and "store_tokens" in one_line(err)
    assert fake_plotting == []


def test_plot_without_kind_draws_what_applies(tmp_path, capsys, monkeypatch):
    """``wflow plot FILE`` on a particle run without token snapshots: the kinds that apply,
    one stderr line per skipped kind, exit 0; with several files no empty folder. (Each
    figure is built, then saved as a stand-in file: drawing and saving them is
    tests/test_plotting.py's.)"""
    from wflow.figures import _figbase

    def undrawn(fig, outdir, kind, formats):
        assert fig.axes
        Path(outdir).mkdir(parents=True, exist_ok=True)
        for fmt in formats:
            (Path(outdir) / f"{kind}.{fmt}").write_bytes(b"built, not drawn")
        return [Path(outdir) / f"{kind}.{fmt}" for fmt in formats]

    monkeypatch.setattr(_figbase, "_save", undrawn)
    a = driver.run_to_file(tiny(**{"output.store_tokens": False}), tmp_path / "a.h5")
    b = driver.run_to_file(tiny(**{"model.heads": 1, "output.store_tokens": False}),
                           tmp_path / "b.h5")
    rc, stdout, err = run_cli(capsys, "plot", a, "--format", "png")
    assert rc == 0
    assert sorted(Path(p).name for p in stdout.split()) == [
        "G2.png", "balance.png", "clustering.png", "ledger.png"]
    skipped = sorted(line.split(":")[0] for line in err.strip().splitlines())
    assert skipped == ["wflow plot", "wflow plot", "wflow plot"]  # three lines, one each
    for kind in ("snapshots", "density", "head_scaling"):
        assert f"skipped {kind}: " in err
    rc, stdout, err = run_cli(capsys, "plot", a, b, "--format", "png", "-o", tmp_path / "m",
                              "--kind", "head_scaling", "--kind", "G2")
    assert rc == 0 and (tmp_path / "m" / "head_scaling.png").stat().st_size > 0
    assert sorted(p.relative_to(tmp_path / "m").as_posix() for p in
                  (tmp_path / "m").rglob("*.png")) == ["a/G2.png", "b/G2.png", "head_scaling.png"]


def test_bench_wiring(capsys, monkeypatch):
    from wflow.cli import bench

    seen = {}

    def quick_bench(torch=True):
        seen["torch"] = torch
        return [1, 2]

    monkeypatch.setattr(bench, "quick_bench", quick_bench)
    monkeypatch.setattr(bench, "format_quick_table", lambda rows: f"TABLE {rows}")
    rc, stdout, _ = run_cli(capsys, "bench", "--no-torch")
    assert rc == 0 and seen == {"torch": False} and stdout.strip() == "TABLE [1, 2]"


# ------------------------------------------------------------------ output locations
def _unwritable_argv(cmd, result, outdir):
    return {"plot": ["plot", result, "-o", outdir],
            "animate": ["animate", result, "-o", outdir / "a.gif"],
            "study": ["study", "energy", "--quick", "-q", "-o", outdir],
            "sweep": ["sweep", "--grid", "model.heads=[1, 2]", "-q", "-o", outdir],
            "run": ["run", "-q", "-o", outdir / "r.h5"]}[cmd]


@pytest.mark.parametrize("cmd", ["plot", "animate", "study", "sweep", "run"])
def test_unwritable_output_exit_2_one_line(tmp_path, capsys, monkeypatch, cmd, fake_plotting,
                                           result_file):
    result = result_file
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory should be")
    outdir = blocker / "out"
    rc, stdout, err = run_cli(capsys, *_unwritable_argv(cmd, result, outdir))
    assert rc == 2
    assert one_line(err) == (f"wflow: error: {outdir}: cannot write to the output directory "
                             "(Not a directory)")
    # a read-only file system (root can write through a chmod 555 directory, so simulated)
    import errno
    import tempfile

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    ro = tmp_path / "ro"
    rc, stdout, err = run_cli(capsys, *_unwritable_argv(cmd, result, ro))
    assert rc == 2
    assert one_line(err) == (f"wflow: error: {ro}: cannot write to the output directory "
                             "(Read-only file system)")
    assert fake_plotting == []


def test_write_errors_deep_inside_are_exit_2(tmp_path, capsys, fake_plotting, result_file):
    import errno

    out = result_file

    def animate(path, dest, fps):
        raise OSError(errno.EROFS, "Read-only file system", str(dest))

    sys.modules["wflow.figures.plotting"].animate = animate
    rc, _, err = run_cli(capsys, "animate", out, "-o", tmp_path / "a.gif")
    assert rc == 2
    assert one_line(err) == f"wflow: error: {tmp_path / 'a.gif'}: cannot write (Read-only file system)"


def test_missing_output_directories_are_created_by_every_command(tmp_path, cfg_file, capsys,
                                                                  fake_plotting):
    out = tmp_path / "new" / "deeper" / "o.h5"
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", out, "-q")
    assert rc == 0, err
    rc, _, err = run_cli(capsys, "plot", out, "-o", tmp_path / "p" / "q")
    assert rc == 0 and (tmp_path / "p" / "q").is_dir()
    rc, _, err = run_cli(capsys, "animate", out, "-o", tmp_path / "a" / "b" / "t.gif")
    assert rc == 0 and (tmp_path / "a" / "b").is_dir()


def test_sweep_empty_grid_is_bad_input(tmp_path, capsys):
    rc, stdout, err = run_cli(capsys, "sweep", "--grid", "model.heads=[]", "-q",
                              "-o", tmp_path / "sw")
    assert rc == 2 and stdout == ""
    assert one_line(err) == ("wflow: error: --grid 'model.heads=[]': the list of values is empty "
                             "(give at least one value, e.g. model.heads=[1, 2])")
    assert not (tmp_path / "sw").exists()


# ------------------------------------------------------------------ token files
def _tokens_file(tmp_path, X, name="x.npz"):
    p = tmp_path / name
    np.savez(p, X=X)
    return p


def test_tokens_file_rows_must_be_unit_vectors(tmp_path, cfg_file, capsys):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 3))
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    scaled = unit * np.linspace(0.65, 1.76, 12)[:, None]  # norms from 0.65 to 1.76
    sets = ["--set", "init.tokens=\"file\"", "-q", "--set", "solver.T=0.05"]
    good = _tokens_file(tmp_path, unit, "unit.npz")
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", tmp_path / "u.h5", *sets,
                         "--set", f"init.tokens_file=\"{good}\"")
    assert rc == 0, err
    np.testing.assert_allclose(io.read(tmp_path / "u.h5")[1]["X"][0, 0], unit, atol=1e-15)
    bad = _tokens_file(tmp_path, scaled, "scaled.npz")
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", tmp_path / "s.h5", *sets,
                         "--set", f"init.tokens_file=\"{bad}\"")
    assert rc == 2
    assert one_line(err) == (f"wflow: error: init.tokens_file = {str(bad)!r}: 12 of 12 rows of 'X' "
                             "are not unit vectors (norms 0.65 to 1.76); tokens lie on the sphere: "
                             "normalise them, or set init.normalize = true to project them")
    assert not (tmp_path / "s.h5").exists()
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", tmp_path / "s.h5", *sets,
                         "--set", f"init.tokens_file=\"{bad}\"", "--set", "init.normalize=true")
    assert rc == 0, err
    np.testing.assert_allclose(io.read(tmp_path / "s.h5")[1]["X"][0, 0], unit, atol=1e-14)
    # init.normalize without a tokens file does not apply
    rc, _, err = run_cli(capsys, "validate", cfg_file, "--set", "init.normalize=true")
    assert rc == 2 and "init.normalize" in one_line(err)


def test_tokens_file_non_finite_and_shape_messages(tmp_path, cfg_file, capsys):
    X = np.tile([1.0, 0.0, 0.0], (12, 1))
    X[3, 1] = np.nan
    X[7, 2] = np.inf
    sets = ["--set", "init.tokens=\"file\"", "-q"]
    p = _tokens_file(tmp_path, X)
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", tmp_path / "o.h5", *sets,
                         "--set", f"init.tokens_file=\"{p}\"")
    assert rc == 2
    assert one_line(err) == (f"wflow: error: init.tokens_file = {str(p)!r}: 2 of 12 rows of 'X' "
                             "hold NaN or infinite values (the first is row 3); tokens must be "
                             "finite")
    p = _tokens_file(tmp_path, np.tile([1.0, 0.0, 0.0], (10, 1)), "short.npz")
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", tmp_path / "o.h5", *sets,
                         "--set", f"init.tokens_file=\"{p}\"")
    assert rc == 2
    assert one_line(err) == (f"wflow: error: init.tokens_file = {str(p)!r}: 'X' has shape (10, 3), "
                             "the configuration needs (model.n, model.d) = (12, 3)")


def test_tokens_file_npy_and_missing_key(tmp_path, cfg_file, capsys):
    """A .npy file holds the token array itself (the same run as the .npz with key 'X'); an
    .npz without 'X' is refused naming the key and the shape it must have; a weights file's
    errors name the configuration key."""
    X = np.random.default_rng(3).standard_normal((12, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    np.save(tmp_path / "x.npy", X)
    sets = ["--set", "init.tokens=\"file\"", "-q"]
    out = {}
    for name in ("x.npy", _tokens_file(tmp_path, X).name):
        rc, _, _ = run_cli(capsys, "run", cfg_file, "-o", tmp_path / f"{name}.h5", *sets,
                           "--set", f"init.tokens_file=\"{tmp_path / name}\"")
        assert rc == 0
        out[name] = io.read(tmp_path / f"{name}.h5")[1]["X"]
    a, b = out.values()
    np.testing.assert_array_equal(a, b)
    np.savez(tmp_path / "y.npz", tokens=X)
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", tmp_path / "o.h5", *sets,
                         "--set", f"init.tokens_file=\"{tmp_path / 'y.npz'}\"")
    assert rc == 2 and "key 'X' missing" in one_line(err) and "(12, 3)" in err
    assert f"init.tokens_file = {str(tmp_path / 'y.npz')!r}" in err
    np.savez(tmp_path / "w.npz", W=np.eye(3)[None])
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", tmp_path / "o.h5", "-q",
                         "--set", "init.weights=\"file\"",
                         "--set", f"init.weights_file=\"{tmp_path / 'w.npz'}\"")
    assert rc == 2 and one_line(err).startswith(
        f"wflow: error: init.weights_file = {str(tmp_path / 'w.npz')!r}: key 'D' missing")


# ------------------------------------------------------------------ JKO with per-head normalisation
@pytest.mark.parametrize("norm,heads,warned", [("head", 3, True), ("head", 1, False),
                                               ("joint", 3, False)])
def test_jko_head_normalisation_warns(tmp_path, cfg_file, capsys, caplog, norm, heads, warned):
    import logging

    caplog.set_level(logging.WARNING, logger="wflow")
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", tmp_path / "j.h5", "-q",
                         "--set", "solver.method=\"jko\"", "--set", "solver.T=0.01",
                         "--set", "solver.record_every=1",  # one step: the warning is the test
                         "--set", f"model.normalization=\"{norm}\"", "--set", f"model.heads={heads}")
    assert rc == 0, err
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    want = (f"solver.method = 'jko' with model.normalization = 'head' and {heads} heads is not "
            "the exact gradient flow: no scalar mobility reproduces the head-normalised velocity, "
            "the steps use b_hat and are not expected to converge to the explicit flow [model §7]; "
            "model.normalization = 'joint' or 'none' is exact")
    assert (want in msgs) == warned, msgs


# ------------------------------------------------------------------ help, version
def test_help_version_and_bare_wflow(capsys):
    rc, out, err = run_cli(capsys, "--help")
    assert rc == 0 and err == ""
    desc = out.split("\n\n")[1]
    assert desc.startswith("wflow simulates the mean-field transformer PDE: n tokens on the sphere")
    assert "``" not in out and ":mod:" not in out  # no raw RST
    rc, bare, err = run_cli(capsys)
    assert rc == 0 and bare == out and err == ""
    rc, out, err = run_cli(capsys, "--version")
    assert rc == 0 and out == f"wflow {wflow.__version__}\n"


def test_plot_help_lists_the_kinds(capsys):
    from wflow.cli import PLOT_KINDS
    from wflow.figures._figbase import KINDS

    assert tuple(PLOT_KINDS) == KINDS
    rc, out, _ = run_cli(capsys, "plot", "--help")
    assert rc == 0
    assert "figure kinds (--kind; default: all of them):" in out
    for k, doc in PLOT_KINDS.items():
        assert f"  {k:<14}{doc}" in out


# ------------------------------------------------------------------ sizes
@pytest.mark.parametrize("setting,needs", [
    ("model.n=1000000000", "TB"),          # died after 65 s with MemoryError at 7.9 GB
    ("solver.paths=100000000", "TB"),      # MemoryError with an empty message
    ("model.heads=1000000", "GB"),         # left a 144 MB partial file that info said to resume
    ("model.d=100000", "TB"),              # an internal error
])
@pytest.mark.parametrize("cmd", ["validate", "run"])
def test_sizes_that_cannot_fit_are_refused_before_anything_is_written(tmp_path, capsys,
                                                                      monkeypatch, setting,
                                                                      needs, cmd):
    from wflow.engine import memory

    limit = tmp_path / "memory.max"  # a 1 GB cgroup, whatever the machine
    limit.write_text(f"{2**30}\n")
    monkeypatch.setattr(memory, "CGROUP_MAX", limit)
    monkeypatch.setattr(memory, "CGROUP_CURRENT", tmp_path / "none")
    out = tmp_path / "big.h5"
    argv = [cmd, "--set", setting] + (["-o", out, "-q"] if cmd == "run" else [])
    rc, stdout, err = run_cli(capsys, *argv)
    assert rc == 2 and stdout == ""
    line = one_line(err)
    assert line.startswith("wflow: error: the run needs about ")
    assert line.split(" of memory")[0].endswith(needs)
    assert "more than the 1.0 GB available (cgroup limit 1.0 GB, 0 B in use)" in line
    assert list(tmp_path.glob("*.h5*")) == []


def test_info_shows_the_resolved_path(tmp_path, cfg_file, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_cli(capsys, "run", cfg_file, "-o", "sub/o.h5", "-q")
    rc, stdout, _ = run_cli(capsys, "info", "sub/../sub/o.h5")
    assert rc == 0
    assert stdout.splitlines()[0] == f"file           {(tmp_path / 'sub' / 'o.h5').resolve()}"


def test_quick_says_what_it_does(capsys):
    """`--quick` in the help points to `wflow study list`, which says each study's quick scale."""
    from wflow.studies import available_studies

    assert main(["study", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--quick the study's quick scale: a reduced grid, short T and few paths" in text
    assert "('wflow study list' says what each study's quick scale is)" in text
    rc, out, _ = run_cli(capsys, "study", "list")
    studies = available_studies()
    quick = [line.strip() for line in out.splitlines() if line.strip().startswith("--quick: ")]
    assert rc == 0 and quick == [f"--quick: {s.quick}" for s in studies.values()]
    assert all(s.quick for s in studies.values())



def test_dask_quiet_silences_the_scheduler_and_workers(tmp_path, capsys, caplog):
    """`-q` with Dask: no INFO record of distributed's scheduler, nanny or client (they used to
    print ~25 lines: distributed sets its loggers to INFO whatever the CLI's level)."""
    argv = ["sweep", "--grid", "model.heads=[1, 2]", "--set", "model.n=12",
            "--set", "solver.T=0.05", "--set", "solver.paths=1", "--set", "solver.backend=numpy",
            "--executor", "dask",
            "--workers", "1", "-q", "-o", str(tmp_path / "sw")]
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 0, err
    assert "2 tasks: 0 skipped (complete), 2 ran" in out
    chatter = [f"{r.name}: {r.getMessage()}" for r in caplog.records
               if r.name.startswith("distributed") and r.levelno < 30]
    assert chatter == []


def test_numerical_failure_is_one_line_on_the_real_stderr(tmp_path):
    """NumPy's overflow warnings (the numpy backend at beta = 500) do not add lines to the
    one-line error on the real stderr (a process of its own: the warning filters are the
    process's); -v lets them through (in this process: Python's warning machinery receives
    them, which pytest records instead of printing)."""
    sets = ["--set", "model.beta=500", "--set", "solver.T=0.05", "--set", "solver.backend=\"numpy\"",
            "--set", "model.n=20", "-q"]
    argv = [sys.executable, "-m", "wflow.cli", "run", *sets, "-o", str(tmp_path / "b.h5")]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1
    assert one_line(p.stderr).startswith("wflow: error: non-finite energy at step 0 (t = 0)")
    with pytest.warns(RuntimeWarning) as shown:
        rc = main(["run", "-v", *sets, "-o", str(tmp_path / "v.h5")])
    assert rc == 1
    assert any("overflow encountered" in str(w.message) for w in shown), [str(w.message)
                                                                         for w in shown]
