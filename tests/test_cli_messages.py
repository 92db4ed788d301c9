"""What the ``wflow`` command says: the summary line's times, Ctrl-C (exit 130), the files and
keys it skips or leaves out, and the errors that name the real cause."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

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
    with pytest.raises(SystemExit):
        from wflow.cli import main
        main(["--help"])
    assert "130" in capsys.readouterr().out


def test_io_status_of_an_interrupted_run_is_resumable(tmp_path, monkeypatch):
    """The file a Ctrl-C leaves is the one `wflow resume` continues: status running, its
    checkpoint at the last multiple of output.checkpoint_every."""
    from wflow.engine import driver

    _interrupt_at_call(monkeypatch, 15)
    with pytest.raises(KeyboardInterrupt):
        driver.run_to_file(tiny(), tmp_path / "r.h5")
    info = io.inspect(tmp_path / "r.h5")
    assert info["status"] == "running" and info["checkpoint_step"] == 4
