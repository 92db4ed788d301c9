"""Checkpoints of adaptive runs [model §6d, "Checkpoints"]: the loop state (per path: time,
step, controller memory, counters, event state, next record) saved every
``output.checkpoint_every`` rounds continues the run bit-identically, from the solver's own
snapshots and from a result file killed in the middle of a checkpoint write."""

import copy

import numpy as np
import pytest
from test_io import assert_same_records, crash_in_checkpoint, record_datasets, status

from wflow.engine import driver
from wflow.model.attention import AttentionModel
from wflow.stepping.adaptive import LOOP_STATE, Adaptive
from wflow.stepping.integrators import TABLEAUX
from wflow.storage import io

BASE = {"model": {"d": 3, "n": 8, "beta": 1.0, "heads": 1, "normalization": "head",
                  "sign": "ascent", "values": "identity"},
        "init": {"seed": 5, "tokens": "uniform", "per_path_tokens": True},
        "weights": {"process": "oscillating"},
        "solver": {"method": "dopri5", "adaptive": True, "rtol": 1e-6, "atol": 1e-8,
                   "dt": 0.01, "T": 20.0, "paths": 3, "backend": "numpy",
                   "record_times": "geometric", "records": 30, "event": "merged_fraction",
                   "event_threshold": 0.5, "event_stop": True, "event_tol": 1e-6},
        "diagnostics": {"clustering": True, "ledger": False},
        "output": {"store_tokens": True, "store_weights": True, "checkpoint_every": 5}}


def _cfg(**over):
    cfg = copy.deepcopy(BASE)
    for key, val in over.items():
        sec, k = key.split(".")
        cfg[sec][k] = val
    if not cfg["solver"]["event"]:
        for k in ("event", "event_threshold", "event_stop", "event_tol"):
            del cfg["solver"][k]
    return cfg


CASES = {
    # weights integrated with the tokens (G1 in the state), events that stop paths
    "oscillating-events": _cfg(),
    # frozen weights, no event, records on step ends
    "frozen": _cfg(**{"weights.process": "frozen", "solver.event": "", "solver.T": 2.0,
                      "solver.stop_at_records": True, "solver.method": "bs32"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_killed_adaptive_run_resumes_bit_identically(tmp_path, monkeypatch, case):
    cfg = CASES[case]
    ref = driver.run_to_file(cfg, tmp_path / "ref.h5")
    p = tmp_path / "r.h5"
    crash_in_checkpoint(monkeypatch, cfg, p, 4)  # checkpoints at rounds 0, 5, 10, † 15
    assert status(p) == "running"
    assert io.inspect(p)["checkpoint_step"] == 10  # the previous complete slot
    assert io.inspect(p)["n_records"] == 0  # an adaptive run writes its records at the end
    r = driver.resume(p)
    assert (r.action, r.from_step) == ("resumed", 10)
    assert status(p) == "complete"
    assert_same_records(p, ref)
    got, want = record_datasets(p), record_datasets(ref)
    assert all(got[k].tobytes() == want[k].tobytes() for k in want)
    if case == "oscillating-events":  # the run did stop paths at their events
        assert np.isfinite(want["series/event_time"][-1]).any()


def test_solver_continues_from_each_snapshot_bit_identically():
    """Adaptive.solve from every snapshot it handed out ends with the same bits as the
    uninterrupted call, and the snapshots hold every array of LOOP_STATE."""
    rng = np.random.default_rng(3)
    X0 = rng.standard_normal((4, 6, 3))
    X0 /= np.linalg.norm(X0, axis=-1, keepdims=True)
    D0 = np.broadcast_to(np.eye(3), (4, 1, 3, 3)).copy()
    M = AttentionModel(beta=2.0, backend="numpy")
    times = np.linspace(0.0, 6.0, 13)

    def drift(D, t):  # a deterministic weight ODE, integrated with the tokens
        return -0.3 * (D - np.eye(3)) + 0.1 * np.sin(t)[:, None, None, None]

    def solve(**kw):
        sol = Adaptive(TABLEAUX["dopri5"], 1e-7, 1e-9, 0.01, 100_000)
        return sol.solve(lambda Y, D, t: M.velocity(Y, D), X0, D0, 6.0, times, drift=drift,
                         **kw)

    snaps = []
    ref = solve(checkpoint=lambda s: snaps.append({k: np.copy(v) for k, v in s.items()}),
                checkpoint_every=7)
    plain = solve()
    assert len(snaps) >= 3
    assert set(LOOP_STATE) <= set(snaps[0])
    for a, b in zip(ref[:2], plain[:2]):
        assert a.tobytes() == b.tobytes()  # checkpointing does not touch the numbers
    for snap in snaps:
        got = solve(state=snap)
        assert got[0].tobytes() == ref[0].tobytes() and got[1].tobytes() == ref[1].tobytes()
        for name in ref[2]:
            assert got[2][name].tobytes() == ref[2][name].tobytes(), name


def test_disk_estimate_counts_geometric_records_and_the_adaptive_slots():
    """The estimate of a geometric-record adaptive run follows solver.records (not T/dt: a
    long run with few records is not refused for lack of disk) and counts the two checkpoint
    slots' records, 2 · 8 (R + 1) P (nd + Hd²) bytes and more, over the fixed-step estimate."""
    from wflow import config as C
    from wflow.engine.memory import n_records, output_bytes

    cfg = C.validate(CASES["oscillating-events"])
    assert n_records(cfg) == cfg["solver"]["records"] + 1
    long = C.validate(_cfg(**{"solver.T": 1e6}))
    assert output_bytes(long) == output_bytes(cfg)  # T/dt = 1e8 steps change nothing
    fixed = C.validate(_cfg(**{"solver.adaptive": False, "solver.method": "rk4",
                               "solver.event": ""}))
    P, n, d, R = 3, 8, 3, cfg["solver"]["records"] + 1
    assert output_bytes(cfg) - output_bytes(fixed) >= 2 * 8 * (R + 1) * P * (n * d + d * d)
