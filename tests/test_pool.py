"""wflow's worker pool (:mod:`wflow.kernels.pool`): every item of a job runs once, on the
calling thread or a worker; a worker that arrives late touches nothing; callers on several
Python threads or in a forked child get the same bits; the spin setting and its errors."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

import numba
import numpy as np
import pytest
from numba import njit
from test_cli import one_line, run_cli
from test_io import tiny

from wflow import kernels as K
from wflow.cli import _toml
from wflow.errors import ConfigError
from wflow.kernels import pool as kpool

TWO_THREADS = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2,
                                 reason="needs two numba threads")


@njit(nogil=True)
def _count_body(role, counter, who, work):
    """Items t: ``who[t] += 1`` (master) or ``+= 1000`` (worker) after ``work`` turns of a
    busy loop (``who[t, 1]`` keeps the loop's value: it cannot be optimised away)."""
    master = kpool._enter(role)
    items = who.shape[0]
    while True:
        t = kpool._fetch_add(counter)
        if t >= items:
            break
        x = 0.0
        for k in range(work):
            x = x * 0.5 + k
        who[t, 1] = x
        who[t, 0] += 1 if master else 1000
        kpool._item_done(counter)
    if master:
        kpool._wait_done(role, counter, items)
        kpool._leave(role, counter)


def _job(pool, items=16, work=20000, threads=2):
    who = np.zeros((items, 2))
    counter = kpool.job_counter(0, threads)
    pool.run(_count_body, (counter, who, work), threads)
    return who, counter


@TWO_THREADS
@pytest.mark.parametrize("spin_us", [0.0, 2000.0], ids=["sleeping", "spinning"])
def test_every_item_runs_once_and_the_worker_takes_part(spin_us):
    """All items done exactly once when the call returns (the caller waits for the worker's
    last item), and over a few jobs the worker does some: with workers that sleep between
    jobs (woken by the job) and with workers that spin."""
    pool = kpool.Pool(1, spin_us)
    by_worker = 0
    deadline = time.monotonic() + 60  # (on a cold cache the worker first compiles its wait)
    while time.monotonic() < deadline:
        who, counter = _job(pool)
        assert np.all((who[:, 0] == 1) | (who[:, 0] == 1000)), who[:, 0]
        assert counter[kpool._C_DONE] == who.shape[0] and counter[kpool._C_NEXT] >= who.shape[0]
        by_worker += int((who[:, 0] == 1000).sum())
        if by_worker:
            break
    assert by_worker > 0
    # one thread: the caller alone
    who, _ = _job(pool, threads=1)
    assert np.all(who[:, 0] == 1)


@njit(nogil=True)
def _failing_body(role, counter, out):
    """The workers raise (as a failed allocation would); the caller does every item it can."""
    master = kpool._enter(role)
    if not master:
        raise ValueError("worker failure")
    x = 0.0
    for k in range(200000):  # time for the worker to arrive
        x = x * 0.5 + k
    out[0] = x
    while True:
        t = kpool._fetch_add(counter)
        if t >= out.size:
            break
        out[t] = 1.0
        kpool._item_done(counter)
    kpool._wait_done(role, counter, out.size)
    kpool._leave(role, counter)


@TWO_THREADS
def test_a_failing_worker_raises_in_the_caller_and_the_pool_goes_on():
    """A worker's exception does not leave the caller waiting for ever: the job raises it
    (whenever the worker took part), and the next job runs normally."""
    pool = kpool.Pool(1, 2000.0)
    raised = 0
    deadline = time.monotonic() + 60  # (on a cold cache the worker first compiles its wait)
    while not raised and time.monotonic() < deadline:
        try:
            pool.run(_failing_body, (kpool.job_counter(0, 2), np.zeros(4)), 2)
        except RuntimeError as e:
            assert "worker failure" in str(e)
            raised += 1
    assert raised > 0
    who, counter = _job(pool)
    assert counter[kpool._C_DONE] == who.shape[0]


def test_a_late_worker_touches_nothing():
    """A worker that reaches a job after it is over (its counter exhausted) does no item."""
    who, counter = _job(kpool.Pool(0, 0.0), threads=1)
    before, done = who.copy(), counter.copy()
    _count_body(kpool._WORKER, counter, who, 10)
    np.testing.assert_array_equal(who, before)
    assert counter[kpool._C_DONE] == done[kpool._C_DONE]


@TWO_THREADS
def test_a_worker_late_for_its_job_does_not_enter_it(monkeypatch):
    """A worker descheduled between reading the posted job and engaging in it arrives after
    the job is over: the call has returned and its arrays (passed without reference counts
    to the kernels) may be freed, so the worker must not enter the body; and a call returns
    only when no worker is inside its body."""
    calls = []

    def body(role, log):
        if role.size:
            time.sleep(0.01)  # the worker reads the posted job meanwhile, then is late
        log.append(("caller" if role.size else "worker", threading.get_ident()))

    pool = kpool.Pool(1, 0.0)  # a sleeping worker: woken by the job, then late
    monkeypatch.setattr(kpool, "_LATE_S", 0.05)
    for _ in range(3):
        pool.run(body, (calls,), 2)
        assert pool._ctrl[2] == 0  # nobody inside the job when the call returns
    time.sleep(0.3)  # the worker wakes late for each job it read, and must not enter
    assert [who for who, _ in calls] == ["caller"] * 3, calls
    monkeypatch.setattr(kpool, "_LATE_S", 0.0)
    who, counter = _job(pool)  # the pool goes on normally
    assert counter[kpool._C_DONE] == who.shape[0]


def _batch(rng, P, n, d, H):
    X = rng.normal(size=(P, n, d))
    X /= np.linalg.norm(X, axis=2, keepdims=True)
    A = rng.normal(size=(P, H, d, d))
    return X, (A + A.transpose(0, 1, 3, 2)) / 2


CASES = [(4, 60, 3, 5), (3, 50, 2, 4)]  # the symmetric d = 3 pass; the tile pass


def _fields(X, D):
    H = D.shape[1]
    return K.fused_pass(X, D, None, 1.0, 0, np.zeros(H, bool), False, True, True, True)


@TWO_THREADS
def test_callers_on_several_threads_get_the_same_bits():
    """Two Python threads calling the pass at once (one of them finds the pool busy and runs
    alone): every result equals the serial one bit for bit."""
    rng = np.random.default_rng(5)
    batches = [_batch(rng, *c) for c in CASES]
    ref = [_fields(X, D) for X, D in batches]
    bad = []

    def worker(k):
        for _ in range(15):
            for (X, D), r in zip(batches, ref):
                out = _fields(X, D)
                for a, b in zip(out, r):
                    if not np.array_equal(a, b, equal_nan=True):
                        bad.append(k)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad


def _child(q):
    rng = np.random.default_rng(5)
    q.put([np.asarray(a).tobytes() for a in _fields(*_batch(rng, *CASES[0]))])


@TWO_THREADS
def test_a_forked_child_starts_its_own_pool():
    """After fork the parent's workers do not exist in the child: it starts a pool of its own
    (and gets the parent's bits)."""
    rng = np.random.default_rng(5)
    ref = [np.asarray(a).tobytes() for a in _fields(*_batch(rng, *CASES[0]))]
    assert kpool.get_pool().workers >= 1
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    got = q.get(timeout=120)
    p.join(timeout=60)
    assert p.exitcode == 0
    assert got == ref


def test_spin_setting_from_the_environment():
    d = kpool.SPIN_US_DEFAULT
    assert kpool.spin_us({}) == d
    assert kpool.spin_us({"OMP_WAIT_POLICY": "passive", "WFLOW_OMP_DEFAULTS": "1"}) == d
    assert kpool.spin_us({"OMP_WAIT_POLICY": "passive"}) == 0.0  # the user's choice
    assert kpool.spin_us({"OMP_WAIT_POLICY": "Active"}) >= 3.6e9  # spin for good
    assert kpool.spin_us({"WFLOW_SPIN_US": "250", "OMP_WAIT_POLICY": "active"}) == 250.0
    assert kpool.spin_us({"WFLOW_SPIN_US": "0"}) == 0.0
    for bad in ("-1", "fast", "inf", "nan", ""):
        with pytest.raises(ConfigError, match="WFLOW_SPIN_US.*microseconds >= 0"):
            kpool.spin_us({"WFLOW_SPIN_US": bad})


def test_bad_spin_setting_exit_2_before_writing(tmp_path, capsys, monkeypatch):
    cfg_file = tmp_path / "cfg.toml"
    cfg_file.write_text(_toml(tiny()))
    monkeypatch.setenv("WFLOW_SPIN_US", "lots")
    out = tmp_path / "o.h5"
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", out, "-q")
    assert rc == 2
    assert "WFLOW_SPIN_US" in one_line(err)
    assert not out.exists()


def test_workers_stop_spinning_while_other_work_is_runnable(monkeypatch):
    """More runnable threads than cores: a calm period (no spinning) starts; at most as many:
    it ends."""
    pool = kpool.Pool(0, 2000.0)
    assert kpool._runnable_threads() >= 1  # this thread runs (Linux)
    monkeypatch.setattr(kpool, "_runnable_threads", lambda: pool._cores + 1)
    assert pool._busy_machine() and pool._calm_until > 0 and pool.calm_periods == 1
    monkeypatch.setattr(kpool, "_runnable_threads", lambda: pool._cores)
    assert not pool._busy_machine() and pool._calm_until == 0.0 and pool.calm_periods == 1


def test_workers_a_job_does_not_need_sleep(monkeypatch):
    """After jobs for two threads the second of two workers sleeps, while the first spins
    between them (here up to a second; the machine is taken as otherwise idle)."""
    monkeypatch.setattr(kpool, "_runnable_threads", lambda: 1)
    pool = kpool.Pool(2, 3e5)
    seen = []
    deadline = time.monotonic() + 60  # (on a cold cache the workers first compile their wait)
    while time.monotonic() < deadline and seen[-5:] != [1] * 5:
        _job(pool, threads=2)
        time.sleep(0.05)
        seen.append(pool._sleeping)
    assert seen[-5:] == [1] * 5, seen


@pytest.mark.parametrize("busy", [False, True], ids=["idle machine", "busy machine"])
def test_a_spin_that_loses_its_core_goes_on_unless_other_work_waits(monkeypatch, busy):
    """Every turn of the spin reads as preempted (``_jump`` of one cycle): on an otherwise idle
    machine (the hypervisor took the vCPU) the worker spins on; with more runnable threads than
    cores it sleeps at once."""
    cores = len(os.sched_getaffinity(0))
    # (patched before the worker starts: a real read under CI load must not start a calm period)
    monkeypatch.setattr(kpool, "_runnable_threads", lambda: cores + 1 if busy else 1)
    pool = kpool.Pool(1, 3e5)
    assert pool._cores == cores
    pool._jump = 1
    seen = []
    deadline = time.monotonic() + 60  # (on a cold cache the worker first compiles its wait)
    while time.monotonic() < deadline and seen[-5:] != [int(busy)] * 5:
        _job(pool, threads=2)
        time.sleep(0.05)
        seen.append(pool._sleeping)
    assert seen[-5:] == [int(busy)] * 5, seen
    assert (pool.calm_periods > 0) == busy
