"""Seeded kill loop: small runs killed (SIGKILL, SIGTERM) at random moments, half of them in
the middle of a record or checkpoint write (between the HDF5 calls of a write, before its
flush), the others at a random time; each is resumed until complete and must equal the
uninterrupted run bit for bit."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
from test_io import assert_same_records, tiny

from wflow.engine import driver
from wflow.storage import _h5, io

#: the write calls a kill may interrupt (before or after the call, i.e. before its flush)
WRITE_CALLS = [(io, "_append_records"), (io, "_create_record_dataset"), (_h5, "_put"),
               (io, "_mark_complete")]


def _configs():
    return [tiny(**{"init.seed": 1, "solver.record_every": 1, "output.checkpoint_every": 2}),
            tiny(**{"init.seed": 2, "solver.record_every": 2, "output.checkpoint_every": 3,
                    "output.store_weights": True}),
            tiny(**{"init.seed": 3, "model.n": 150, "solver.record_every": 1,
                    "output.checkpoint_every": 1}),
            tiny(**{"init.seed": 4, "solver.record_every": 5, "output.checkpoint_every": 4,
                    "diagnostics.ledger": False})]


def _arm(rng, sig):
    """In the child: kill this process at a random call of a random write function."""
    module, name = WRITE_CALLS[rng.integers(len(WRITE_CALLS))]
    real = getattr(module, name)
    at, after = int(rng.integers(1, 40)), bool(rng.integers(2))
    count = [0]

    def call(*a, **k):
        count[0] += 1
        if count[0] == at and not after:
            os.kill(os.getpid(), sig)
        out = real(*a, **k)
        if count[0] == at and after:
            os.kill(os.getpid(), sig)
        return out

    setattr(module, name, call)


def _attempt(path, cfg, rng, budget):
    """One attempt (run, or resume of a partial file) in a forked child, killed; returns
    whether it was killed and the child's exit code."""
    sig = signal.SIGKILL if rng.random() < 0.75 else signal.SIGTERM
    self_kill = rng.random() < 0.5
    delay = rng.uniform(0, budget)
    seed = int(rng.integers(2**32))
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            if self_kill:
                _arm(np.random.default_rng(seed), sig)
            if io.file_status(path) is None:
                driver.run_to_file(cfg, path)
            else:
                driver.resume(path)
        except BaseException as exc:  # noqa: BLE001
            (path.parent / f"error-{os.getpid()}").write_text(f"{type(exc).__name__}: {exc}")
            code = 3
        os._exit(code)
    if not self_kill:
        time.sleep(delay)
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status)
    return killed, (os.WEXITSTATUS(status) if os.WIFEXITED(status) else None)


@pytest.mark.slow
def test_kill_loop_resumes_every_run_bit_identical(tmp_path):
    rng = np.random.default_rng(20261203)
    refs, budgets = [], []
    for i, cfg in enumerate(_configs()):
        t0 = time.perf_counter()
        refs.append(driver.run_to_file(cfg, tmp_path / f"ref{i}.h5"))
        budgets.append(1.2 * (time.perf_counter() - t0))
    kills, runs = 0, 0
    while kills < 200:
        i = runs % len(refs)
        cfg, path = _configs()[i], tmp_path / f"run{runs}.h5"
        runs += 1
        for _ in range(200):
            killed, code = _attempt(path, cfg, rng, budgets[i])
            errors = list(tmp_path.glob("error-*"))
            assert not errors, errors[0].read_text()
            kills += killed
            if not killed:
                assert code == 0
                break
        assert io.file_status(path) == "complete"
        assert_same_records(path, refs[i])
    assert kills >= 200
