"""What the ``wflow`` command says: the summary line's times, Ctrl-C (exit 130), the files and
keys it skips or leaves out, and the errors that name the real cause."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_cli import one_line, run_cli
from test_io import status, tiny

from wflow.cli import _toml
from wflow.model.attention import AttentionModel
from wflow.storage import io

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cfg_file(tmp_path):
    p = tmp_path / "cfg.toml"
    p.write_text(_toml(tiny()))
    return p


def _interrupt_at_call(monkeypatch, ncalls):
    """Ctrl-C (KeyboardInterrupt) at the ``ncalls``-th field evaluation (1 + 2 per step)."""
    real = AttentionModel.evaluate
    count = {"n": 0}

    def evaluate(self, *a, **kw):
        count["n"] += 1
        if count["n"] >= ncalls:
            raise KeyboardInterrupt
        return real(self, *a, **kw)

    monkeypatch.setattr(AttentionModel, "evaluate", evaluate)


# ------------------------------------------------------------------ the summary line
def test_run_line_names_the_total_and_the_stepping_time(tmp_path, cfg_file, capsys):
    rc, stdout, err = run_cli(capsys, "run", cfg_file, "-o", tmp_path / "o.h5", "-q")
    assert rc == 0, err
    m = re.search(r"steps=20 in ([0-9.]+) s \(([0-9.]+) s stepping; the rest setup, compiling, "
                  r"writing\)", stdout)
    assert m, stdout
    total, stepping = float(m[1]), float(m[2])
    assert 0 < stepping <= total


# ------------------------------------------------------------------ Ctrl-C
def test_ctrl_c_during_a_run_names_the_checkpoint_and_how_to_resume(tmp_path, cfg_file, capsys,
                                                                    monkeypatch):
    out = tmp_path / "o.h5"
    _interrupt_at_call(monkeypatch, 15)  # step 7 of 20; checkpoints every 4 steps
    rc, stdout, err = run_cli(capsys, "run", cfg_file, "-o", out, "-q")
    assert rc == 130
    assert one_line(err) == (f"wflow: interrupted; {out} keeps the checkpoint at step 4 of 20 "
                             f"(`wflow resume {out}` continues from there)")
    assert status(out) == "running"
    monkeypatch.undo()
    rc, stdout, err = run_cli(capsys, "resume", out, "-q")
    assert rc == 0, err
    assert f"resumed {out} from step 4 of 20" in stdout and status(out) == "complete"


def test_ctrl_c_during_a_resume_says_the_same(tmp_path, cfg_file, capsys, monkeypatch):
    out = tmp_path / "o.h5"
    _interrupt_at_call(monkeypatch, 11)  # step 5
    assert run_cli(capsys, "run", cfg_file, "-o", out, "-q")[0] == 130
    monkeypatch.undo()
    _interrupt_at_call(monkeypatch, 2 * 6 + 1)  # resumed at step 4: Ctrl-C at step 10
    rc, _, err = run_cli(capsys, "resume", out, "-q")
    assert rc == 130
    assert "keeps the checkpoint at step 8 of 20" in one_line(err) and f"wflow resume {out}" in err


def test_ctrl_c_while_parsing_is_one_line(capsys, monkeypatch):
    import wflow.cli as cli

    def build_parser():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", build_parser)
    rc, _, err = run_cli(capsys, "run")
    assert rc == 130 and one_line(err) == "wflow: interrupted"


def test_ctrl_c_during_the_start_up_imports_is_one_line(tmp_path):
    """A KeyboardInterrupt while ``wflow.cli`` imports its commands (numpy): exit 130, one line,
    no traceback."""
    script = textwrap.dedent("""
        import runpy, sys

        class Finder:
            def find_spec(self, name, path=None, target=None):
                if name == "wflow.cli.commands":
                    raise KeyboardInterrupt
                return None

        sys.meta_path.insert(0, Finder())
        runpy.run_module("wflow.cli", run_name="__main__")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", script, "--version"], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 130, p.stderr
    assert p.stderr == "wflow: interrupted\n"


def test_import_wflow_loads_no_numba():
    """The command line's start (``import wflow``, ``wflow.cli``) imports no numba: the window in
    which Ctrl-C would print Python's traceback is the interpreter's own start."""
    code = "import sys, wflow.cli; print('numba' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert p.stdout.strip() == "False", p.stderr


def test_exit_codes_in_the_readme_and_the_help_include_130(capsys):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"\b130\b.*interrupt", readme, re.I | re.S)
    rc, out, _ = run_cli(capsys, "--help")
    assert rc == 0 and "130 interrupted" in " ".join(out.split())


def test_io_status_of_an_interrupted_run_is_resumable(tmp_path, monkeypatch):
    """The file a Ctrl-C leaves is the one `wflow resume` continues: status running, its
    checkpoint at the last multiple of output.checkpoint_every."""
    from wflow.engine import driver

    _interrupt_at_call(monkeypatch, 15)
    with pytest.raises(KeyboardInterrupt):
        driver.run_to_file(tiny(), tmp_path / "r.h5")
    info = io.inspect(tmp_path / "r.h5")
    assert info["status"] == "running" and info["checkpoint_step"] == 4


# ------------------------------------------------------------------ plot: a sweep's summary
@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    """Two runs and the summary table a sweep writes beside them."""
    from wflow.engine import driver
    from wflow.storage.tables import write_columns

    d = tmp_path_factory.mktemp("sweep")
    for h in (1, 3):
        driver.run_to_file(tiny(**{"model.heads": h, "output.store_tokens": False}), d / f"run-{h}.h5")
    write_columns(d / "sweep_summary.h5", {"point": ["run-1", "run-3"], "path": [0, 0],
                                           "G2": [0.5, 0.2]}, "wflow-sweep-summary/1")
    return d


def test_plot_skips_the_summary_table_beside_the_runs(sweep_dir, tmp_path, capsys):
    files = sorted(sweep_dir.glob("*.h5"))  # what `wflow plot sweep/*.h5` passes
    assert [f.name for f in files] == ["run-1.h5", "run-3.h5", "sweep_summary.h5"]
    rc, stdout, err = run_cli(capsys, "plot", *files, "--kind", "G2", "--format", "png",
                              "-o", tmp_path / "p")
    assert rc == 0, err
    assert sorted(Path(p).relative_to(tmp_path / "p").as_posix() for p in stdout.split()) == [
        "run-1/G2.png", "run-3/G2.png"]
    assert one_line(err) == (f"wflow plot: skipped {sweep_dir / 'sweep_summary.h5'}: the summary "
                             "table of a sweep, not a run (the .csv beside it holds the same columns)")
    rc, _, err = run_cli(capsys, "plot", sweep_dir / "sweep_summary.h5")
    assert rc == 2 and "the summary table of a sweep, not a run: nothing to plot" in one_line(err)


def test_plot_still_refuses_a_foreign_h5(tmp_path, capsys):
    import h5py

    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = [1.0]
    rc, _, err = run_cli(capsys, "plot", tmp_path / "other.h5")
    assert rc == 2 and "not a wflow result file" in one_line(err)


# ------------------------------------------------------------------ info: the keys that apply
def _config_block(stdout):
    return stdout.split("# configuration", 1)[1].split("\n\n(mean")[0]


def test_info_shows_the_keys_that_apply_and_all_on_request(sweep_dir, capsys):
    """An OU particle run: no [density] table, no weights.layers, no Mix-LN switch; --all
    shows them."""
    from wflow.config import schema

    f = sweep_dir / "run-1.h5"
    rc, stdout, err = run_cli(capsys, "info", f)
    assert rc == 0, err
    block = stdout.split("# configuration", 1)[1]
    assert "\n[density]" not in block and "\nlayers =" not in block and "\nmix_switch =" not in block
    assert "[model]" in block and "\nheads = 1" in block and 'process = "ou"' in block
    cfg = io.inspect(f)["config"]
    hidden = [p.key for p in schema.params() if p.key.split(".")[1] in cfg.get(p.key.split(".")[0], {})
              and not all(c.holds(cfg) for c in p.applies)]
    assert "density.cells" in hidden and "weights.layers" in hidden
    assert f"{len(hidden)} that cannot apply" in block and "`wflow info --all`" in block
    rc, stdout, err = run_cli(capsys, "info", f, "--all")
    assert rc == 0, err
    block = stdout.split("# configuration", 1)[1]
    assert "[density]" in block and "mix_switch = 5.0" in block and "cannot apply" not in block


# ------------------------------------------------------------------ token noise: figures, summary
@pytest.fixture(scope="module")
def noisy_result(tmp_path_factory):
    from wflow.engine import driver

    return driver.run_to_file(tiny(**{"model.diffusion": 0.5}), tmp_path_factory.mktemp("nu") / "n.h5")


def test_token_noise_in_titles_and_the_ledger_split(noisy_result, tmp_path, monkeypatch):
    from wflow.figures import _figbase, plotting

    figs = []

    def save(fig, outdir, name, formats):  # built, not drawn (the drawing: test_plotting)
        figs.append(fig)
        return [tmp_path / f"{name}.{fmt}" for fmt in formats]

    monkeypatch.setattr(_figbase, "_save", save)
    plotting.plot(noisy_result, "ledger", tmp_path, formats=("png",))
    plotting.plot(noisy_result, "G2", tmp_path, formats=("png",))
    for fig in figs:
        assert "ν = 0.5" in fig._suptitle.get_text()
    ledger = figs[0]
    panel_b = ledger.axes[1]
    right = [ax for ax in ledger.axes if ax is not panel_b and ax.bbox.bounds == panel_b.bbox.bounds]
    assert len(right) == 1
    lines = {ln.get_label(): ln.get_ydata() for ln in right[0].get_lines()}
    R = lines["residual $R$ (right)"]
    M, I = lines["token martingale $M$ (right)"], lines["token Itô, realised $I$ (right)"]
    np.testing.assert_allclose(M + I, R, rtol=1e-10, atol=1e-12 * np.abs(R).max())
    assert np.abs(M).max() > 0 and np.abs(I).max() > 0
    assert "R = M + I" in panel_b.get_title(loc="left")


def test_no_noise_no_nu_and_no_split(tmp_path, monkeypatch, sweep_dir):
    from wflow.figures import _figbase, plotting

    figs = []  # the figures as built, not drawn (the drawing: test_plotting)
    monkeypatch.setattr(_figbase, "_save", lambda fig, outdir, name, formats:
                        figs.append(fig) or [tmp_path / f"{name}.{formats[0]}"])
    plotting.plot(sweep_dir / "run-1.h5", "ledger", tmp_path, formats=("png",))
    assert "ν" not in figs[0]._suptitle.get_text()
    labels = [ln.get_label() for ax in figs[0].axes for ln in ax.get_lines()]
    assert "residual $R$ (right)" in labels and not any("martingale $M$" in x for x in labels)


def test_summary_explains_the_ledger_residual(noisy_result, sweep_dir, capsys):
    rc, stdout, _ = run_cli(capsys, "info", noisy_result)
    assert rc == 0
    table = stdout.split("(mean over", 1)[1]
    assert "token_martingale" in table and "token_ito_realised" in table
    assert "R = token_martingale + token_ito_realised" in table
    rc, stdout, _ = run_cli(capsys, "info", sweep_dir / "run-1.h5")
    table = stdout.split("(mean over", 1)[1]
    assert "ledger_residual: R = token part of the energy change - sigma * int D dt" in table
    assert "the integrator's error" in table and "token_martingale" not in table


# ------------------------------------------------------------------ Mix-LN that never switches
@pytest.mark.parametrize("switch, warned", [(0.2, True), (5.0, True), (0.1, False)])
def test_mix_that_never_switches_warns(tmp_path, cfg_file, capsys, caplog, switch, warned):
    import logging

    caplog.set_level(logging.WARNING, logger="wflow")
    sets = ["--set", 'model.layernorm="mix"', "--set", f"model.mix_switch={switch}",
            "--set", "diagnostics.ledger=false", "--set", 'solver.method="heun"']
    rc, _, err = run_cli(capsys, "validate", cfg_file, *sets)  # T = 0.2
    assert rc == 0, err
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    want = (f"model.layernorm = 'mix' switches from post- to pre-LN at model.mix_switch = {switch:g}, "
            "not before solver.T = 0.2: this run is post-LN throughout (set model.mix_switch below T) "
            "[model §1c]")
    assert (want in msgs) == warned, msgs


# ------------------------------------------------------------------ output folders
@pytest.mark.parametrize("folder, why", [("/proc/nope", "No such file or directory"),
                                         ("/sys/nope", "Operation not permitted")])
@pytest.mark.parametrize("cmd", ["run", "study", "experiments"])
def test_a_folder_that_cannot_be_created_is_named_not_the_disk(capsys, cfg_file, folder, why, cmd):
    """/proc and /sys report no free space: the folder is the cause (exit 2, one line)."""
    if not Path(folder).parent.is_dir() or Path(folder).exists():
        pytest.skip(f"no {Path(folder).parent} here")
    argv = {"run": ["run", cfg_file, "-q", "-o", f"{folder}/c.h5"],
            "study": ["study", "energy", "--quick", "-q", "-o", folder],
            "experiments": ["experiments", "run", "paper_ou", "-q", "-o", f"{folder}/sub/c.h5"]}[cmd]
    rc, stdout, err = run_cli(capsys, *argv)
    assert rc == 2
    line = one_line(err)
    assert line.startswith(f"wflow: error: {folder}") and "cannot create the output directory" in line
    assert why in line and "disk" not in line


def test_check_folder_leaves_nothing_behind(tmp_path):
    from wflow.storage.files import check_folder

    check_folder(tmp_path / "a" / "b" / "c")  # can be created: no error, nothing made
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "f").write_text("x")
    with pytest.raises(Exception, match=r"f/d: cannot create the output directory \(Not a directory\)"):
        check_folder(tmp_path / "f" / "d")


# ------------------------------------------------------------------ names: did you mean
def test_study_typo_says_did_you_mean(capsys):
    rc, _, err = run_cli(capsys, "study", "sectoin6", "--quick")
    assert rc == 2
    line = one_line(err)
    assert "study 'sectoin6': did you mean 'section6'? allowed values are" in line
    rc, _, err = run_cli(capsys, "study", "zzzz")
    assert rc == 2 and "did you mean" not in one_line(err) and "section6" in err


def test_experiment_typo_says_did_you_mean(capsys):
    rc, _, err = run_cli(capsys, "experiments", "run", "paper_uo")
    assert rc == 2 and "did you mean 'paper_ou'?" in one_line(err)


# ------------------------------------------------------------------ weights.process = module:Class
@pytest.mark.parametrize("name, why", [
    ("no_such_mod:X", "module 'no_such_mod' not found"),
    ("wflow.no_such_mod:X", "module 'wflow.no_such_mod' not found"),
    ("numpy:NoSuchClass", "module 'numpy' has no 'NoSuchClass'"),
    ("numpy:ndarray", "numpy.ndarray is not a WeightProcess subclass"),
])
def test_process_module_class_errors_say_why(name, why):
    from wflow.model.processes.registry import get_process

    with pytest.raises(ValueError) as info:
        get_process(name)
    assert str(info.value) == f"process = {name!r}: {why}"


# ------------------------------------------------------------------ README and docs
def test_readme_and_docs_say_what_the_package_does():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = readme.split("## The two commands", 1)[1].split("```", 1)[0]
    pulls = install.split("it pulls", 1)[1].split(";", 1)[0]
    assert "dask" not in pulls.lower()  # dask is the [distributed] extra, not the install
    assert "[distributed]" in install
    table = readme.split("## Studies", 1)[1].split("| study |", 1)[1].split("\n\n", 1)[0]
    from wflow.studies import available_studies

    listed = set(re.findall(r"^\| \[`([a-z0-9_]+)`\]", table, re.M))
    assert set(available_studies()) <= listed, set(available_studies()) - listed
    studies_page = (ROOT / "docs" / "studies.md").read_text(encoding="utf-8")
    assert "**The energy identity (`energy`).**" in studies_page
    assert "the energy identity" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert "wflow_run.h5" in ignored and "wflow_run.gif" in ignored  # `wflow animate wflow_run.h5`


def test_a_module_class_process_that_cannot_be_imported_says_why(capsys):
    rc, _, err = run_cli(capsys, "validate", "--set", 'weights.process="no_such_mod:X"')
    assert rc == 2
    assert one_line(err) == ("wflow: error: weights.process = 'no_such_mod:X': module 'no_such_mod' "
                             "not found"), err
