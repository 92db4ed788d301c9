"""What the command line says of an adaptive run [model §6d]: the summary line and ``wflow
info`` count accepted and rejected steps and field evaluations (the sums over the paths of
the last record's series) and the event times, not the first step's grid; checkpoints count
rounds of the adaptive loop; NaN ledger rows say why."""

from __future__ import annotations

import numpy as np

from wflow.cli import inspect as commands
from wflow.cli import main
from wflow.storage.io import read

ADAPTIVE = ["solver.adaptive=true", 'solver.method="bs32"', "model.n=12", "model.heads=2",
            "solver.T=0.5", "weights.noise_var=0", "solver.rtol=1e-4", "solver.atol=1e-6",
            'solver.event="order_parameter"', "solver.event_threshold=0.225",
            "solver.event_direction=\"down\""]


def _sets(sets):
    return [a for s in sets for a in ("--set", s)]


def test_summary_and_info_count_the_adaptive_steps(tmp_path, capsys):
    out = tmp_path / "a.h5"
    assert main(["run", "-q", "-o", str(out), *_sets(ADAPTIVE)]) == 0
    text = capsys.readouterr().out
    line = text.splitlines()[0]
    _, arrays, _ = read(out, tokens=False)
    acc, rej, ev = (int(np.sum(arrays[k][-1])) for k in
                    ("steps_accepted", "steps_rejected", "field_evals"))
    assert acc > 0 and ev >= 3 * acc  # bs32: three new stages per attempted step (FSAL)
    want = f"adaptive steps accepted={acc} rejected={rej} field_evals={ev} (sums over 2 paths)"
    assert want in line and "steps=100" not in line and "dt0=0.005" in line
    tau = arrays["event_time"][-1]
    times = ", ".join("none" if not np.isfinite(x) else f"{x:.6g}" for x in tau)
    assert f"event order_parameter <= 0.225 at t = {times}" in line
    # the NaN rows of the table are marked and explained
    assert "ledger_residual" in text and "* nan: an adaptive run computes no ledger" in text
    assert "the integrator's error" not in text  # (the note of a computed ledger_residual)

    assert main(["info", str(out)]) == 0
    rows = {ln[:15].strip(): ln[15:] for ln in capsys.readouterr().out.splitlines()
            if ln[:15].strip() in ("steps", "status")}
    assert rows["status"] == "complete"
    assert rows["steps"].startswith(want)


def test_fixed_step_summary_unchanged_and_nan_rows_say_why(tmp_path, capsys):
    """A fixed-step run says steps=N; with the ledger off its NaN rows say so."""
    out = tmp_path / "f.h5"
    sets = ["model.n=12", "model.heads=2", "solver.T=0.1", 'solver.backend="numpy"',
            "diagnostics.ledger=false"]
    assert main(["run", "-q", "-o", str(out), *_sets(sets)]) == 0
    text = capsys.readouterr().out
    assert " steps=20 " in text.splitlines()[0]
    starred = [ln.split()[0] for ln in text.splitlines() if ln.endswith("  *")]
    _, arrays, _ = read(out, tokens=False)
    shown = [ln.split()[0] for ln in text.splitlines()[1:] if ln.split()
             and ln.split()[0] in arrays]
    assert starred == [k for k in shown if np.isnan(arrays[k]).all()]
    assert "ledger_residual" in starred
    assert "* nan: the exact ledger is off (diagnostics.ledger = false)" in text


def test_adaptive_checkpoints_count_rounds_not_grid_steps(tmp_path):
    """An interrupted or live adaptive file: its checkpoint is a round of the loop, never
    "step 384800 of 100"."""
    cfg = {"solver": {"adaptive": True}}
    info = {"status": "running", "path": tmp_path / "a.h5", "checkpoint_step": 384800,
            "nsteps": 100, "attrs": {}, "config": cfg}
    line = commands._info_status(info, None)
    assert "round 384800 of the adaptive loop" in line and "of 100" not in line
    assert "wflow resume" in line
    live = commands._info_status(info, 1234)
    assert live == "live (written by pid 1234, last checkpoint after round 384800 of the " \
                   "adaptive loop)"
    fresh = commands._info_status({**info, "checkpoint_step": None}, None)
    assert "before its first checkpoint" in fresh and "t = 0" in fresh
    # a fixed-step file keeps its steps
    fixed = commands._info_status({**info, "config": {"solver": {}}}, None)
    assert "at step 384800 of 100" in fixed


def test_killed_adaptive_file_info_and_resume_count_rounds(tmp_path, monkeypatch, capsys):
    """A real adaptive file killed in a checkpoint write: ``info`` and ``resume`` name the
    round of the loop (the fixed grid would say "step 10 of 2000")."""
    from test_adaptive_checkpoint import CASES
    from test_io import crash_in_checkpoint

    p = tmp_path / "r.h5"
    crash_in_checkpoint(monkeypatch, CASES["frozen"], p, 4)  # checkpoints 0, 5, 10, † 15
    monkeypatch.undo()
    capsys.readouterr()
    assert main(["info", str(p)]) == 0
    out = capsys.readouterr().out
    status = [ln for ln in out.splitlines() if ln.startswith("status")][0]
    assert "interrupted, checkpoint after round 10 of the adaptive loop" in status
    assert "of 800" not in out
    steps = [ln for ln in out.splitlines() if ln.startswith("steps")][0]
    assert steps.split(None, 1)[1] == "adaptive (no records yet)"
    assert main(["resume", "-q", str(p)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (f"resumed {p} from round 10 of the adaptive loop: "
                                   f"complete, 31 records")
