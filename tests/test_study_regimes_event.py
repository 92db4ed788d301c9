"""``regimes``' time to one cluster as an exact per-path event [model §6d]: the companion
adaptive run of a deterministic cell (same tokens and weights, dopri5 at rtol 1e-8, the event
``n_clusters ≤ 1``) locates τ₁ between records; OU cells keep the record-based τ₁ and say so
(``tau_source``)."""

from __future__ import annotations

import numpy as np

from wflow.studies import StudyOptions, get_study, run_study
from wflow.studies.regimes import EVENT_SOLVER, RECORD_DT, WEIGHTS, is_event


def test_companion_runs_only_for_deterministic_cells():
    tasks = dict(get_study("regimes").tasks(StudyOptions()))
    events = [n for n in tasks if is_event(n)]
    assert events
    for name in events:
        cell = tasks[name[:-len("-event")]]
        cfg = tasks[name]
        assert {k: cfg["solver"][k] for k in EVENT_SOLVER} == EVENT_SOLVER
        assert WEIGHTS[name.split("-")[4]][0]["process"] != "ou"
        for sec in ("model", "init", "weights"):  # the same systems
            assert cfg[sec] == cell[sec], sec
        assert cfg["solver"]["T"] == cell["solver"]["T"]
        assert cfg["solver"]["paths"] == cell["solver"]["paths"]
    ou = [n for n in tasks if "-ou" in n and not n.endswith(("halfdt", "refdt"))]
    assert ou and not any(n + "-event" in tasks for n in ou)


def test_event_time_lies_within_a_record_interval_of_the_record_time(tmp_path):
    """Quick ascent cell (n = 16, β = 1/4, frozen I): every path reaches one cluster; its
    exact event time τ_e and the first record with one cluster τ_r (Euler, Δt = 0.01, records
    every δ = 0.2) satisfy τ_r − δ − ε < τ_e ≤ τ_r + ε, ε = 0.05 the Euler run's time
    error (O(Δt)); the table says the cell's τ₁ came from the event."""
    study = get_study("regimes")
    tasks = [t for t in study.tasks(StudyOptions(scale="quick"))
             if "-ascent-" in t[0] and not t[0].endswith("halfdt")]
    assert len(tasks) == 2 and is_event(tasks[1][0])
    res = run_study(study, tmp_path, scale="quick", tasks=tasks, formats=())
    cell = tasks[0][0]
    tau_e, source = study.tau(res.data, cell)
    tau_r, src_r = study.tau(res.data, cell, records=True)
    assert (source, src_r) == ("event", "records")
    assert np.all(np.isfinite(tau_e)) and np.all(np.isfinite(tau_r))
    eps = 0.05
    assert np.all(tau_e <= tau_r + eps) and np.all(tau_e > tau_r - RECORD_DT - eps), \
        (tau_e, tau_r)
    assert not np.all(np.isin(np.round(tau_e / RECORD_DT, 9) % 1, 0))  # not on the grid
    assert res.table["tau_source"] == ["event"]
