"""A result is judged by the input files its run read: their digests are stored when it runs.
A rerun after an input file's content changed is refused, never reused; ``resume`` reads the
inputs from the absolute paths the run started with and refuses a changed one."""

from __future__ import annotations

import numpy as np
import pytest
from test_io import Interrupted, _fail_after_calls, assert_same_records, tiny

from wflow.config import validate
from wflow.engine import driver
from wflow.errors import ConfigError
from wflow.geometry import sphere
from wflow.model.attention import AttentionModel
from wflow.storage import io
from wflow.sweeps.sweep import run_sweep

_EVALUATE = AttentionModel.evaluate


def _tokens(path, seed):
    np.savez(path, X=sphere.uniform(12, 3, np.random.default_rng(seed)))


def _trajectory(path, seed):
    A = np.random.default_rng(seed).standard_normal((21, 3, 3, 3))
    np.savez(path, D=(A + A.transpose(0, 1, 3, 2)) / 2, t=0.01 * np.arange(21))


def _cfg(name="Dt.npz"):
    return tiny(**{"init.tokens": "file", "init.tokens_file": name})


def _cfg_w():
    return tiny(**{"weights.process": "file", "weights.file": "Dt.npz"})


def test_sweep_rerun_after_the_tokens_file_changed_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _tokens("Dt.npz", 1)
    tasks = [("a", validate(_cfg()))]
    assert run_sweep(tasks, "out").counts["ran"] == 1
    assert run_sweep(tasks, "out").counts["skipped"] == 1  # same content: reused
    _tokens("Dt.npz", 2)
    with pytest.raises(ConfigError, match=r"out/a.h5: holds another computation .*the file "
                                          r"init.tokens_file = 'Dt.npz' changed since the "
                                          r"result was computed"):
        run_sweep(tasks, "out")
    assert run_sweep(tasks, "out", overwrite=True).counts["ran"] == 1


def test_check_reuse_uses_the_stored_digest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _tokens("Dt.npz", 1)
    p = driver.run_to_file(_cfg(), tmp_path / "r.h5")
    head = io.read_header(p)
    assert head["inputs"]["init.tokens_file"]["path"] == str(tmp_path / "Dt.npz")
    driver.check_reuse(p, _cfg())
    _tokens("Dt.npz", 3)
    with pytest.raises(ConfigError, match="changed since the result was computed"):
        driver.check_reuse(p, _cfg())


def _interrupted(folder, monkeypatch, cfg=None):
    _fail_after_calls(monkeypatch, 2 * 9 + 1, interrupt=True)
    with pytest.raises(Interrupted):
        driver.run_to_file(cfg or _cfg(), folder / "r.h5")
    monkeypatch.setattr("wflow.model.attention.AttentionModel.evaluate", _EVALUATE)
    return folder / "r.h5"


def test_resume_from_another_folder_reads_the_inputs_the_run_started_with(tmp_path,
                                                                          monkeypatch):
    """The weights follow the trajectory of weights.file: another Dt.npz in the current
    folder would change every record after the checkpoint."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    _trajectory(a / "Dt.npz", 1)
    _trajectory(b / "Dt.npz", 2)  # another file of the same name
    monkeypatch.chdir(a)
    ref = driver.run_to_file(_cfg_w(), a / "ref.h5")
    p = _interrupted(a, monkeypatch, _cfg_w())
    monkeypatch.chdir(b)
    r = driver.resume(p)
    assert r.action == "resumed" and r.from_step == 8
    assert_same_records(p, ref)


@pytest.mark.parametrize("change", ["edit", "delete"])
def test_resume_refuses_a_changed_input(tmp_path, monkeypatch, change):
    _tokens(tmp_path / "Dt.npz", 1)
    monkeypatch.chdir(tmp_path)
    p = _interrupted(tmp_path, monkeypatch)
    if change == "edit":
        _tokens(tmp_path / "Dt.npz", 2)
    else:
        (tmp_path / "Dt.npz").unlink()
    why = "which has changed since" if change == "edit" else "which is missing"
    with pytest.raises(ConfigError, match=f"cannot resume: the run read init.tokens_file = "
                                          f"'{tmp_path / 'Dt.npz'}', {why}; restore"):
        driver.resume(p)
    assert io.file_status(p) == "running"  # left as it was
