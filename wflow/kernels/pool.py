"""wflow's own worker threads for the field passes, and the compiled side of a job.

The pool: ``numba.config.NUMBA_NUM_THREADS − 1`` daemon threads, each in a loop: wait for the
next job, run its body, wait again. The wait spins (a ``pause`` loop reading the cycle
counter) for ``WFLOW_SPIN_US`` microseconds (default :data:`SPIN_US_DEFAULT`), then sleeps on
a condition variable. A spin that sees the cycle counter jump by more than
:data:`PREEMPTED_US` reads how many threads the machine has runnable (``/proc/loadavg``): more
than its cores means other work wants them, and the workers sleep at once for
:data:`CALM_S`. With ``OMP_WAIT_POLICY=active`` the workers spin for good; with
``OMP_WAIT_POLICY=passive`` set by the user they never spin. Spinning keeps the hand-over
between passes short on an idle machine, sleeping keeps the workers out of the way of other
work (see benchmarks/).

The jobs. A body is a numba function with ``nogil=True``, ``body(role, *args)``, that starts
with ``master = _enter(role)`` and takes work items from an atomic counter in ``args``
(:func:`job_counter`; a dynamic schedule with fixed per-item outputs: the bits do not depend
on which thread ran which item, nor on how many ran), counting each completed item
(:func:`_item_done`, release). The calling thread runs it too; after its last item it waits
until every item is complete (:func:`_wait_done`, acquire), runs the sequential tail, and
before returning to Python lets a worker between its part and its next wait finish
(:func:`_leave`).

The hand-over does not take the GIL on the critical path: the caller publishes the job (a
generation number in ``ctrl[0]``), enters the body (releasing the GIL), and the body's
:func:`_enter` sets ``ctrl[1]``; spinning workers wait for ``ctrl[1]``. A worker that arrives
after its job is over finds the job's counter exhausted and returns (each job has a fresh
counter). One job at a time: a caller on another Python thread while the pool is busy runs
its body alone, with the same bits. A forked child starts a pool of its own. A worker's
exception ends the caller's wait, and :meth:`Pool.run` raises it.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
import time

import numba
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from wflow.errors import ConfigError

#: Default spin of an idle worker before it sleeps (µs); ``WFLOW_SPIN_US`` overrides.
SPIN_US_DEFAULT = 2000.0
#: Spin "for good" (µs): one hour.
_SPIN_FOREVER_US = 3.6e9


def spin_us(environ=os.environ):
    """The workers' spin before they sleep (µs): ``WFLOW_SPIN_US`` (≥ 0), else for good under
    ``OMP_WAIT_POLICY=active``, else none under ``OMP_WAIT_POLICY=passive`` set by the user,
    else :data:`SPIN_US_DEFAULT`. (wflow sets ``OMP_WAIT_POLICY=passive`` for the OpenMP
    runtime when the user did not, and marks it with ``WFLOW_OMP_DEFAULTS=1``.)"""
    v = environ.get("WFLOW_SPIN_US")
    if v is not None:
        try:
            us = float(v)
        except ValueError:
            us = -1.0
        if not 0 <= us < float("inf"):
            raise ConfigError(f"WFLOW_SPIN_US={v!r}: allowed values are microseconds >= 0 "
                              f"(the idle worker threads' spin before they sleep; 0: none)")
        return us
    policy = environ.get("OMP_WAIT_POLICY", "").strip().lower()
    if policy == "active":
        return _SPIN_FOREVER_US
    if policy == "passive" and environ.get("WFLOW_OMP_DEFAULTS") != "1":
        return 0.0
    return SPIN_US_DEFAULT


# ------------------------------------------------------------------------------ job counters
def _libc_address(name):
    try:
        f = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):  # pragma: no cover - not POSIX
        return 0
    return int(ctypes.cast(f, ctypes.c_void_p).value or 0)


#: Address of libc's ``usleep`` in this process (0: none). Compiled code takes it as a
#: runtime argument (a constant would be frozen into numba's cache, and addresses move
#: between processes).
USLEEP_ADDRESS = _libc_address("usleep")



def job_counter(extra, threads):
    """A fresh counter for one job (slots: :data:`_C_NEXT` …), with
    ``extra`` slots of the body's own (fresh: a worker
    that arrives after its job is over must find that job's items exhausted, not the next
    job's)."""
    counter = np.zeros(_C_PATH + extra, dtype=np.int64)
    counter[_C_THREADS] = threads
    counter[_C_SLEEP] = USLEEP_ADDRESS
    counter[_C_PATIENCE] = patience_cycles()
    return counter


# ------------------------------------------------------------------------------ the pool
#: The calling thread's wait for the workers' last items: spin this long (µs), then sleep
#: 20 µs at a time.
PATIENCE_US = 50.0
#: A gap this long (µs) between two reads of the cycle counter in a spin: the thread lost
#: its core for a while. If more threads are runnable on the machine than it has cores,
#: other work wants them, and the workers stop spinning for :data:`CALM_S`; if not, the
#: hypervisor took the whole virtual CPU, or a thread of this process the core for a moment
#: (spinning or sleeping makes no difference to that). The threshold sits above the host's
#: noise and below the stretches lost to another busy process (see benchmarks/).
PREEMPTED_US = 50.0
#: How long (s) the workers sleep at once after a sign of other work; again while more
#: threads than cores are runnable at its end.
CALM_S = 0.2


class Pool:
    """Worker threads that run one job at a time: :meth:`run`."""

    def __init__(self, workers, spin_us):
        self.workers = int(workers)
        self.spin_us = float(spin_us)
        # job posted, job entered (``_enter``), workers engaged (``_leave``), a worker
        # failed (``_wait_done``)
        self._ctrl = np.zeros(4, dtype=np.int64)
        self._error = None
        self._job = None  # (generation, body, args, workers wanted)
        self._lock = threading.Lock()  # one job at a time
        self._cond = threading.Condition()
        self._sleeping = 0
        self._calm_until = 0.0  # no spinning before this time.monotonic()
        self.calm_periods = 0  # periods without spinning so far (diagnostics)
        self._helpers = self.workers  # workers the last job wanted
        cps = self._cps = cycles_per_second()
        # no cycle counter (reads 0): never spin
        self._cycles = int(self.spin_us * 1e-6 * cps) if cps else 0
        self._jump = int(PREEMPTED_US * 1e-6 * cps) if cps else 0
        self._pid = os.getpid()
        try:
            self._cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # pragma: no cover - not Linux
            self._cores = os.cpu_count() or 1
        for k in range(self.workers):
            threading.Thread(target=self._loop, args=(k,), name=f"wflow-worker-{k}",
                             daemon=True).start()

    def _loop(self, k):
        seen = 0
        ctrl = self._ctrl
        out = np.zeros(2, dtype=np.int64)
        engaged = False
        while True:
            g = seen
            # (a worker the last job did not need sleeps: on a large machine a small job would
            # otherwise keep every core spinning)
            spin = self._cycles and k < self._helpers and time.monotonic() >= self._calm_until
            if spin and self._calm_until:  # a calm period is over: is other work still there?
                spin = not self._busy_machine()
            if spin:
                cycles = self._cycles
                end = time.monotonic() + self.spin_us * 1e-6
                while True:
                    _spin_until_changed(ctrl, seen, cycles, self._jump, out, engaged)
                    engaged = False
                    g = int(out[0])
                    # the spin lost its core for a while: to other work (then sleep), or to
                    # the hypervisor (then spin on, for the rest of the time)
                    left = end - time.monotonic()
                    if g != seen or not out[1] or left <= 0 or self._busy_machine():
                        break
                    cycles = int(left * self._cps)
            if engaged:
                _engage(ctrl, -1)
                engaged = False
            if g == seen:
                with self._cond:
                    self._sleeping += 1
                    while ctrl[0] == seen:
                        self._cond.wait()
                    self._sleeping -= 1
                g = int(ctrl[0])
            job = self._job  # the running job, or None when it is over
            if _LATE_S:  # (tests: a worker descheduled here while the job ends)
                time.sleep(_LATE_S)
            if job is None or job[0] == seen:
                seen = g
                job = None
                continue
            seen = job[0]
            if k < job[3]:
                _engage(ctrl, 1)
                engaged = True
                if self._job is not job:  # over meanwhile: its arrays may be gone (run())
                    job = None
                    continue
                try:
                    job[1](_WORKER, *job[2])
                except BaseException as e:  # the caller stops waiting and raises it
                    self._error = (seen, e)
                    _fail(ctrl, seen)
            job = None  # (its arrays must not outlive the job)

    def _busy_machine(self):
        """Whether more threads are runnable on the machine than it has cores (other work
        wants them) in three reads in a row: then no spinning for :data:`CALM_S`. (One read
        saw a third runnable thread on an idle 2-core VM in 0.7% of reads: kernel threads
        that run for microseconds.)"""
        busy = True
        for _ in range(3):
            if _runnable_threads() <= self._cores:
                busy = False
                break
        if busy:
            self._calm_until = time.monotonic() + CALM_S
            self.calm_periods += 1
        else:
            self._calm_until = 0.0
        return busy

    def run(self, body, args, threads):
        """``body(role, *args)`` on this thread while up to ``threads − 1`` workers run
        ``body(_WORKER, *args)``; the body starts with ``master = _enter(role)`` and, if
        master, waits for the items itself."""
        helpers = min(int(threads), self.workers + 1) - 1
        if helpers <= 0 or os.getpid() != self._pid or not self._lock.acquire(blocking=False):
            body(_ALONE, *args)
            return
        try:
            g = int(self._ctrl[0]) + 1
            self._helpers = helpers
            self._job = (g, body, args, helpers)
            self._ctrl[0] = g
            if self._sleeping:
                with self._cond:
                    self._cond.notify_all()
            body(self._ctrl, *args)
            if self._ctrl[3] == g:  # (a late worker's failure in an earlier job is ignored)
                e = self._error[1] if self._error and self._error[0] == g else None
                raise RuntimeError(f"a worker thread failed in {getattr(body, '__name__', body)}: "
                                   f"{e!r}") from e
        finally:
            self._job = None
            # No worker may still be inside the body once this returns: the body's arrays
            # are passed without reference counts (``_unowned``) and the caller frees them.
            # A worker engages before it checks that the job is still posted, so after
            # ``_job = None`` a worker is either counted here or will not enter.
            while self._ctrl[2] > 0:
                time.sleep(0)  # (releases the GIL: the workers need it to disengage)
            self._lock.release()


#: Seconds a worker sleeps between reading the posted job and engaging in it (0; the tests
#: set it to make a worker arrive after its job is over).
_LATE_S = 0.0

#: The ``role`` of a worker's call of a body, and of a caller without workers.
_WORKER = np.zeros(0, dtype=np.int64)
_ALONE = np.zeros(1, dtype=np.int64)
_CPS = None


def _runnable_threads():
    """Threads runnable on the machine right now (the kernel's count in ``/proc/loadavg``,
    this one included; 0 where unknown: then the workers never stop spinning early)."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[3].split(b"/")[0])
    except (OSError, IndexError, ValueError):  # pragma: no cover - not Linux
        return 0


def cycles_per_second():
    """Rate of the cycle counter (measured once per process over 2 ms; 0: no counter)."""
    global _CPS
    if _CPS is None:
        c0, t0 = _read_cycles(), time.perf_counter()
        while time.perf_counter() - t0 < 0.002:
            pass
        c1, t1 = _read_cycles(), time.perf_counter()
        _CPS = (c1 - c0) / (t1 - t0) if c1 > c0 else 0.0
    return _CPS


def patience_cycles():
    """:data:`PATIENCE_US` in cycles of the counter."""
    return int(PATIENCE_US * 1e-6 * cycles_per_second())


_POOL = None
_POOL_LOCK = threading.Lock()


def get_pool():
    """The process' pool (``numba.config.NUMBA_NUM_THREADS − 1`` workers, started at the first
    call; again in a forked child)."""
    global _POOL
    p = _POOL
    if p is not None and p._pid == os.getpid():
        return p
    with _POOL_LOCK:
        if _POOL is None or _POOL._pid != os.getpid():
            _POOL = Pool(max(0, numba.config.NUMBA_NUM_THREADS - 1), spin_us())
        return _POOL


def run(body, args, threads=None):
    """Run a job on the pool with ``threads`` threads (default ``numba.get_num_threads()``,
    this thread's setting)."""
    get_pool().run(body, args, numba.get_num_threads() if threads is None else threads)


def set_num_threads(n):
    """Threads of the field passes on this Python thread (``numba.set_num_threads``), clamped
    to ``1 .. NUMBA_NUM_THREADS`` (the threads numba started)."""
    numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))


def get_num_threads():
    """Threads of the field passes on this Python thread (``numba.get_num_threads``)."""
    return numba.get_num_threads()


# ---------------------------------------------------------------------------------------------
# The compiled side of the pool: the job counter's atomics, the spin, entering and leaving a job
# ---------------------------------------------------------------------------------------------
#: The slots of a job's counter (:func:`job_counter`): the next work item,
#: the threads, the items complete, the address of ``usleep`` and the caller's patience in
#: cycles (:func:`_wait_done`, :func:`_leave`), the workers that took a scratch slot
#: (:func:`_sym3`), then (from _C_PATH) per path the heads done (the chained stage of
#: :func:`_sym3`).
_C_NEXT, _C_THREADS, _C_DONE, _C_SLEEP, _C_PATIENCE, _C_SLOT, _C_PATH = 0, 1, 2, 3, 4, 5, 6
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def _int64_slot(arr, i, v=None):
    """Typing of the atomics: an int64 array, an integer index (and an integer value)."""
    return (isinstance(arr, types.Array) and arr.dtype == types.int64
            and isinstance(i, types.Integer) and (v is None or isinstance(v, types.Integer)))


def _slot_ptr(context, builder, sig, args):
    """Address of ``arr[i]`` (the first two arguments)."""
    a = context.make_array(sig.args[0])(context, builder, args[0])
    idx = context.cast(builder, args[1], sig.args[1], types.intp)
    return builder.gep(a.data, [idx])


def _value(context, builder, sig, args):
    return context.cast(builder, args[2], sig.args[2], types.int64)


@intrinsic
def _atomic_load(typingctx, arr, i):
    """``arr[i]`` read atomically with acquire ordering (int64 array): never hoisted out of a
    loop, and the thread sees every write made before the matching release."""
    if _int64_slot(arr, i):

        def codegen(context, builder, sig, args):
            return builder.load_atomic(_slot_ptr(context, builder, sig, args), "acquire", 8)

        return types.int64(arr, i), codegen
    return None


@intrinsic
def _atomic_store(typingctx, arr, i, v):
    """``arr[i] = v`` atomically with release ordering (int64 array)."""
    if _int64_slot(arr, i, v):

        def codegen(context, builder, sig, args):
            builder.store_atomic(_value(context, builder, sig, args),
                                 _slot_ptr(context, builder, sig, args), "release", 8)
            return context.get_dummy_value()

        return types.none(arr, i, v), codegen
    return None


@intrinsic
def _atomic_add(typingctx, arr, i, v):
    """``old = arr[i]; arr[i] += v`` atomically, acquire-release ordering (int64 array)."""
    if _int64_slot(arr, i, v):

        def codegen(context, builder, sig, args):
            return builder.atomic_rmw("add", _slot_ptr(context, builder, sig, args),
                                      _value(context, builder, sig, args), "acq_rel")

        return types.int64(arr, i, v), codegen
    return None


@intrinsic
def _cycles(typingctx):
    """The processor's cycle counter (``llvm.readcyclecounter``; 0 where there is none)."""

    def codegen(context, builder, sig, args):
        fn = builder.module.declare_intrinsic(
            "llvm.readcyclecounter", fnty=ir.FunctionType(ir.IntType(64), []))
        return builder.call(fn, [])

    return types.int64(), codegen


@intrinsic
def _call_usleep(typingctx, addr, us):
    """``usleep(us)`` through its address ``addr``; nothing when ``addr`` is 0."""
    if isinstance(addr, types.Integer) and isinstance(us, types.Integer):

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32)])
            a = context.cast(builder, args[0], sig.args[0], types.int64)
            u = context.cast(builder, args[1], sig.args[1], types.int32)
            with builder.if_then(builder.icmp_signed("!=", a, ir.Constant(a.type, 0))):
                builder.call(builder.inttoptr(a, fnty.as_pointer()), [u])
            return context.get_dummy_value()

        return types.none(addr, us), codegen
    return None


@intrinsic
def _pause(typingctx):
    """The spin-loop hint (``pause`` on x86: the core slows the loop and saves power)."""

    def codegen(context, builder, sig, args):
        if _X86:
            fn = builder.module.declare_intrinsic(
                "llvm.x86.sse2.pause", fnty=ir.FunctionType(ir.VoidType(), []))
            builder.call(fn, [])
        return context.get_dummy_value()

    return types.none(), codegen


@njit(nogil=True, cache=True)
def _enter(role):
    """First call of a job's body: ``role`` is the pool's control array for the calling
    thread (``role[0]``, the job posted; sets ``role[1]``, the job entered: this thread has
    released the GIL, the spinning workers may take it), empty for the workers. Returns
    whether this thread is the caller's (it waits for the items and runs the tail)."""
    if role.size >= 2:
        _atomic_store(role, 1, role[0])
    return role.size > 0


@njit(nogil=True, cache=True)
def _leave(role, counter):
    """Last call of a job's body on the caller's thread: wait (at most the counter's patience)
    until no worker is between the end of its part and its next wait (``role[2]``, workers
    engaged): such a worker holds the GIL for a moment, and a caller returning to Python then
    would sleep on the GIL and pay a wake-up."""
    if role.size >= 3:
        t0 = _cycles()
        while _atomic_load(role, 2) > 0 and _cycles() - t0 < counter[_C_PATIENCE]:
            _pause()


@njit(nogil=True, cache=True)
def _engage(ctrl, v):
    _atomic_add(ctrl, 2, v)


@njit(nogil=True, cache=True)
def _fail(ctrl, g):
    _atomic_store(ctrl, 3, g)


@njit(nogil=True, cache=True)
def _spin_until_changed(ctrl, seen, cycles, jump, out, engaged):
    """Spin until ``ctrl[1] != seen`` (a job entered) for at most ``cycles`` cycles of the
    cycle counter (first, without the GIL, leave ``ctrl[2]`` if ``engaged``). ``out[0]`` =
    ``ctrl[1]``, ``out[1]`` = 1 if two successive reads of the counter were more than
    ``jump`` cycles apart (the thread was preempted: other work wants this core)."""
    if engaged:
        _atomic_add(ctrl, 2, -1)
    t0 = _cycles()
    last = t0
    out[1] = 0
    while True:
        g = _atomic_load(ctrl, 1)
        if g != seen:
            break
        now = _cycles()
        if now - last > jump:
            out[1] = 1
            break
        if now - t0 >= cycles:
            break
        last = now
        for _ in range(8):
            _pause()
    out[0] = g


@njit(nogil=True, cache=True)
def _item_done(counter):
    """Count one completed item of the job (release: the item's writes go with it)."""
    _atomic_add(counter, _C_DONE, 1)


@njit(nogil=True, cache=True)
def _wait_done(role, counter, items):
    """Wait until ``counter[DONE] >= items``: every item of the job is complete, and
    (acquire) their writes are visible to this thread. Spins the counter's patience in
    cycles, then sleeps 20 µs at a time (the other threads are preempted: let the machine's
    other work run). Returns early if a worker failed in this job (``role[3]``, the failed
    job, equals ``role[0]``, the job posted; the pool then raises)."""
    t0 = _cycles()
    while _atomic_load(counter, _C_DONE) < items:
        if role.size >= 4 and _atomic_load(role, 3) == role[0]:
            return
        if _cycles() - t0 > counter[_C_PATIENCE]:
            _call_usleep(counter[_C_SLEEP], 20)
        else:
            _pause()


@njit(nogil=True, cache=True)
def _read_cycles():
    return _cycles()


# ---------------------------------------------------------------------------------------------
# Combine
# ---------------------------------------------------------------------------------------------
@intrinsic
def _fetch_add(typingctx, counter):
    """``old = counter[0]; counter[0] += 1`` atomically (LLVM ``atomicrmw add``); int64 array.

    The atomic read-modify-write makes every index go to exactly one thread; "monotonic"
    ordering suffices (items share no data; each item's completion is counted with
    acquire-release ordering, :func:`_atomic_add`)."""
    if isinstance(counter, types.Array) and counter.dtype == types.int64:

        def codegen(context, builder, sig, args):
            arr = context.make_array(sig.args[0])(context, builder, args[0])
            one = context.get_constant(types.int64, 1)
            return builder.atomic_rmw("add", arr.data, one, "monotonic")

        return types.int64(counter), codegen
    return None


def _num_threads():
    """``numba.get_num_threads()`` (this thread's setting) without its lock once numba's
    threading layer is up (the public call takes a process lock at every field evaluation)."""
    try:
        from numba.np.ufunc import parallel as par

        if par._is_initialized:
            nt = int(par._get_num_threads())
            if nt > 0:
                return nt
    except Exception:  # pragma: no cover - another numba: the public call
        pass
    return numba.get_num_threads()
