"""Parameter sweeps: many configurations, one HDF5 result each, serial or on Dask, and a summary.

A grid point's Monte Carlo paths are split into tasks of ``paths_per_task`` paths (default:
all of them, one task per grid point). Path p of a grid point draws its tokens, initial
weights and noise from (``init.seed``, p) alone (``init.first_path`` gives a batch its
place in the ensemble, :mod:`wflow.engine.run`), so the results are identical, value for
value, whatever the batching, the executor, the number of workers or the order in which
tasks finish.

Random numbers across grid points (``streams``):

* ``"common"`` (default): every grid point uses the base ``init.seed`` — common random
  numbers: the same X0 and D(0) draws (as far as the shapes agree), so differences
  between grid points are less noisy;
* ``"independent"``: grid point seeds are derived from the base seed and the swept
  *values* (SHA-256 of ``key=value`` pairs into a ``SeedSequence``), so the errors of the
  grid points are independent.

Either way a grid point's streams depend on its values, never on its position in the grid:
adding a value to a sweep leaves the other grid points unchanged.

Files: ``outdir/<point>.h5`` per grid point (the batches, in ``outdir/<point>.batches/``,
are joined into it, then removed, once all are complete), ``outdir/sweep_summary.h5`` and ``.csv``
(one row per grid point and path). A task writes ``.<file>.part`` and renames it when
complete (Dask may run a task twice; a killed task leaves only a partial ``.part``, resumed
by the next attempt). Rerunning a sweep skips the complete tasks and redoes the others. A
task failing at run time (a non-finite value, a worker lost beyond Dask's retries) is
reported with status ``failed`` and its error; every other task completes.

    tasks = expand_grid(base, {"model.heads": [1, 10, 100], "weights.process": ["ou"]})
    run_sweep(tasks, "out/", executor="dask", paths_per_task=2)  # LocalCluster, or address=
    wflow.run_sweep(base, grid, "out/", executor="dask")        # expand + run -> summary Dataset
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from wflow import config as _config
from wflow.errors import ConfigError, WriteError
from wflow.storage.files import write_error
from wflow.sweeps.grid import (  # noqa: F401  (the grid and the checks: public here too)  # noqa: F401
    CONNECT_TIMEOUT,
    EXECUTORS,
    STREAMS,
    _connect,
    _part,
    _require_dask,
    check_executor,
    check_name,
    expand_grid,
    partial_bytes,
    point_seed,
)
from wflow.sweeps.summary import (  # noqa: F401  (read_summary, summary_rows: public here too)
    FAILED,
    SUMMARY_COLUMNS,
    _get,
    _to_dataset,
    _write_summary,
    read_summary,
    summary_rows,
)

log = logging.getLogger(__name__)

__all__ = ["expand_grid", "run_task", "run_sweep", "sweep", "read_summary", "point_seed",
           "check_name", "check_executor", "partial_bytes",
           "EXECUTORS", "STREAMS", "SweepReport", "SUMMARY_COLUMNS"]

# ------------------------------------------------------------------------------ one task


def _worker_name():
    try:
        from dask.distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return f"{socket.gethostname()}:{os.getpid()}"


def _exit_hook(spec):
    """Test hook: ``(step, marker)`` — the first time (no ``marker`` file yet) a checkpoint
    at step >= ``step`` is written, create ``marker`` and kill this process (``os._exit``);
    ``marker = None``: kill at every attempt (a task that loses its worker every time)."""
    from wflow.storage import io

    step, marker = spec
    original = io.H5Recorder.checkpoint

    def checkpoint(self, state):
        original(self, state)
        if state.k >= step and (marker is None or not os.path.exists(marker)):
            if marker is not None:
                Path(marker).write_text(str(os.getpid()))
            os._exit(17)

    io.H5Recorder.checkpoint = checkpoint
    return original


def run_task(name, cfg, path, overwrite=False, _exit_at=None):
    """Run one task into ``path`` (through ``.<file>.part``, renamed when complete).

    Skips a complete ``path``, resumes a partial ``.part``, else runs. A failure at run time
    is returned, not raised: ``status = "failed"`` and ``error``. Returns a dict (name, path,
    action, status, error, elapsed seconds, worker).
    """
    from wflow.storage import io

    t0 = time.perf_counter()
    path = Path(path)
    part = _part(path)
    out = {"name": name, "path": str(path), "status": "complete", "error": "",
           "worker": _worker_name()}
    restore = _exit_hook(_exit_at) if _exit_at else None
    try:
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                out["action"] = _attempt(cfg, path, part, overwrite, out["worker"])
                break
            except FileExistsError:  # another attempt of this task (Dask ran it twice) is
                if time.monotonic() > deadline:  # writing it: wait, then skip or resume
                    raise
                time.sleep(1.0)
    except Exception as exc:  # noqa: BLE001 - a failed task is reported, not raised
        if isinstance(exc, ConfigError) and "not a wflow result" in str(exc):
            raise
        if isinstance(exc, WriteError):  # the disk is full (or failing): so for every task
            raise
        msg = (str(exc).splitlines() or [""])[0]
        out.update(action=FAILED, status=FAILED, error=f"{type(exc).__name__}: {msg}")
    finally:
        if restore is not None:
            io.H5Recorder.checkpoint = restore
    out["elapsed"] = time.perf_counter() - t0
    return out


#: seconds a task waits for another attempt of itself holding its file
LOCK_WAIT = 6 * 3600.0


def _attempt(cfg, path, part, overwrite, worker):
    from wflow.engine import driver
    from wflow.storage import io

    status = io.file_status(path)
    if status == "foreign":
        raise ConfigError(f"sweep: {str(path)!r} exists and is not a wflow result")
    if status == "complete" and not overwrite:
        driver.check_reuse(path, cfg, "sweep point")  # written meanwhile by another sweep?
        return "skipped (complete)"
    if status == "running":  # a file of an older sweep, written in place
        driver.resume(path)
        return "resumed"
    pstat = None if overwrite else io.file_status(part)
    if pstat == "running":
        driver.resume(part)
        action = "resumed"
    elif pstat == "complete":
        action = "ran"
    else:
        driver.run_to_file(cfg, part, overwrite=True)
        action = "ran"
    try:
        with io._open_write(part) as f:  # who ran it, for the summary
            f.attrs["sweep_worker"] = worker
        os.replace(part, path)
    except (OSError, RuntimeError) as exc:
        raise write_error(path, exc) from None
    _drop_lock(part)
    return action


def _drop_lock(part: Path):
    try:
        Path(f"{part}.lock").unlink()
    except OSError:
        pass


# ------------------------------------------------------------------------------ the sweep


@dataclass
class _Point:
    name: str
    cfg: dict
    path: Path
    batches: list = field(default_factory=list)  # (first, count, name, cfg, path)


def _plan(tasks, outdir: Path, paths_per_task):
    points = []
    for name, cfg in tasks:
        P = int(cfg["solver"]["paths"])
        K = P if paths_per_task is None else int(paths_per_task)
        if K < 1:
            raise ConfigError(f"paths_per_task = {paths_per_task!r}: must be an integer >= 1")
        if K < P and cfg["solver"].get("event_stop"):
            raise ConfigError(f"paths_per_task = {K} with solver.event_stop = true ({name}, "
                              f"solver.paths = {P}): a run ends when its last path stops, so "
                              f"batches of paths end at different times and cannot be joined; "
                              f"give paths_per_task >= {P}")
        pt = _Point(name, cfg, outdir / f"{name}.h5")
        if K >= P:
            pt.batches.append((0, P, name, cfg, pt.path))
        else:
            first0 = int(cfg["init"].get("first_path", 0))
            for a in range(0, P, K):
                b = min(a + K, P)
                c = copy.deepcopy(cfg)
                c["solver"]["paths"] = b - a
                c["init"]["first_path"] = first0 + a
                bname = f"{name}[paths {a}-{b - 1}]"
                pt.batches.append((a, b - a, bname, _config.validate(c, explicit=()),
                                   outdir / f"{name}.batches" / f"paths-{a:05d}-{b - 1:05d}.h5"))
        points.append(pt)
    return points


@dataclass
class SweepReport:
    """What :func:`run_sweep` did: ``rows`` (one dict per task, in task order), ``counts``
    (skipped / ran / resumed / failed), ``failed`` (grid point -> error), the summary paths
    the summary as columns (``table``: name -> list) and as an ``xarray.Dataset``
    (``summary``)."""

    rows: list
    counts: dict
    failed: dict
    summary_h5: Path
    summary_csv: Path
    table: dict = None
    summary: object = None

    def describe(self) -> str:
        c = self.counts
        return (f"{c['tasks']} tasks: {c['skipped']} skipped (complete), {c['ran']} ran, "
                f"{c['resumed']} resumed (incomplete), {c['failed']} failed")


def _run_task_threads(threads, name, cfg, path, overwrite=False, exit_at=None):
    """:func:`run_task` with the kernels limited to ``threads`` threads (None: their default).

    Set inside the task: the kernels' thread count is per calling thread. Results do not
    depend on the thread count."""
    if threads:
        from wflow.kernels import set_num_threads

        set_num_threads(threads)
    return run_task(name, cfg, path, overwrite, exit_at)  # exit_at: the _exit_at test hook


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def run_sweep(tasks, outdir, executor="serial", address=None, n_workers=None, overwrite=False,
              progress=False, paths_per_task=None, client=None, retries=1, keys=None,
              columns=(), _exit_at=None):
    """Run ``tasks`` (list of (name, config)) into ``outdir/<name>.h5``; write the summary.

    Parameters
    ----------
    executor : "serial" (in this process, numba threads use every core) or "dask"
        (``dask.distributed``: a ``LocalCluster`` of ``n_workers`` single-threaded
        worker processes, each task's numba threads limited to cores // n_workers so the
        workers do not oversubscribe the cores; the scheduler at ``address`` or an existing
        ``client``, numba's default thread count per task).
    paths_per_task : paths per task (default: all the paths of a grid point in one task).
    progress : a progress bar over the tasks; without it (``wflow sweep -q``) the INFO lines
        of ``dask.distributed``'s loggers (scheduler, nannies, client) are silenced as well.
    retries : Dask retries of a task that raised (a lost worker is rescheduled by Dask).
    keys : the swept dotted keys, columns of the summary (default: the keys whose value
        differs between the tasks).
    columns : extra summary columns ``(column, series, how)`` besides
        :data:`~wflow.sweeps.summary.SUMMARY_COLUMNS` (a study's ``summary_columns``).
    _exit_at : test hook ``{task name: (step, marker file)}`` (see :func:`_exit_hook`).

    Returns
    -------
    :class:`SweepReport`.
    """
    check_executor(executor, address if client is None else None, n_workers)
    outdir = Path(outdir)
    names = [n for n, _ in tasks]
    if len(set(names)) != len(names):
        raise ConfigError("sweep: task names must be unique (they name the result files)")
    for n in names:
        check_name(n, "sweep task name")
    points = _plan(tasks, outdir, paths_per_task)  # bad input raises before anything runs
    if executor == "dask":
        _require_dask()  # before anything is created on disk
    outdir.mkdir(parents=True, exist_ok=True)
    from wflow.storage import io

    lock = io.lock_folder(outdir, "sweep")  # one sweep at a time writes into a folder
    try:
        return _run_points(points, outdir, executor, address, n_workers, overwrite, progress,
                           client, retries, keys, columns, _exit_at)
    finally:
        lock.release()


def _run_points(points, outdir, executor, address, n_workers, overwrite, progress, client,
                retries, keys, columns, _exit_at):
    hooks = _exit_at or {}
    jobs = []  # (point index, batch index, name, cfg, path)
    for i, pt in enumerate(points):
        if len(pt.batches) > 1:
            pt.batches[0][4].parent.mkdir(exist_ok=True)
        for j, (_, _, bname, cfg, bpath) in enumerate(pt.batches):
            jobs.append((i, j, bname, cfg, str(bpath)))
    if not overwrite:
        _check_reuse(points)  # before anything runs: a stale file is refused, never reused
    skip = [] if overwrite else [_complete(pt.path) for pt in points]
    results = {}
    todo = []
    for i, j, bname, cfg, bpath in jobs:
        if skip and skip[i]:
            results[(i, j)] = {"name": bname, "path": bpath, "action": "skipped (complete)",
                               "status": "complete", "error": "", "elapsed": 0.0,
                               "worker": ""}
        else:
            todo.append((i, j, bname, cfg, bpath))
    if executor == "serial":
        bar = _bar(progress, len(todo))
        for i, j, bname, cfg, bpath in todo:
            results[(i, j)] = run_task(bname, cfg, bpath, overwrite, hooks.get(bname))
            bar.update(1)
        bar.close()
    else:
        results.update(_run_dask(todo, address, n_workers, overwrite, progress, client,
                                 retries, hooks))
    rows, failed = [], {}
    for i, pt in enumerate(points):
        prow = [results[(i, j)] for j in range(len(pt.batches))]
        rows += prow
        bad = [r for r in prow if r["status"] == FAILED]
        if bad:
            failed[pt.name] = "; ".join(
                (f"{r['name']}: " if len(prow) > 1 else "") + r["error"] for r in bad)
        elif len(pt.batches) > 1 and not _complete(pt.path):
            _join(pt, prow)
    counts = {"tasks": len(rows), "failed": sum(r["status"] == FAILED for r in rows)}
    for key, action in (("skipped", "skipped (complete)"), ("ran", "ran"),
                        ("resumed", "resumed")):
        counts[key] = sum(r["action"] == action for r in rows)
    table = summary_rows(points, rows, failed, keys, columns)
    h5, csvp = _write_summary(outdir, table)
    report = SweepReport(rows, counts, failed, h5, csvp, table=table)
    report.summary = _to_dataset(table)
    log.info("sweep %s: %s", outdir, report.describe())
    return report


def _check_reuse(points):
    """Raise :class:`ConfigError` when a result, partial result or batch file of a grid point
    holds another computation than the point asks for (:func:`wflow.engine.driver.check_reuse`:
    the message names the differing keys and the way out)."""
    from wflow.engine import driver
    from wflow.storage import io

    for pt in points:
        files = [(pt.path, pt.cfg), (_part(pt.path), pt.cfg)]
        if len(pt.batches) > 1:
            files += [(Path(b[4]), b[3]) for b in pt.batches]
            files += [(_part(Path(b[4])), b[3]) for b in pt.batches]
        for path, cfg in files:
            if io.file_status(path) in ("complete", "running"):
                driver.check_reuse(path, cfg, "sweep point")


def _complete(path):
    from wflow.storage import io

    return io.file_status(path) == "complete"


def _bar(progress, total):
    if progress:
        from tqdm.auto import tqdm

        return tqdm(total=total, unit="task", desc="sweep")

    class _Nop:
        def update(self, _):
            pass

        def close(self):
            pass

    return _Nop()


def _run_dask(todo, address, n_workers, overwrite, progress, client, retries, hooks):
    _require_dask()
    from dask.distributed import Client, LocalCluster, as_completed

    cluster = own = None
    threads = None
    quiet = not progress
    dlog = logging.getLogger("distributed")  # the scheduler's, nannies' and clients' loggers
    old_level = dlog.level
    if quiet:
        dlog.setLevel(logging.WARNING)
    results = {}
    try:
        if client is None:
            if address is None:
                n_workers = n_workers or 2
                threads = max(1, _cores() // n_workers)
                # no dashboard, its HTTP server on a free port (no "port 8787 in use"
                # warning); the worker processes log warnings and errors only (silence_logs)
                cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1,
                                       processes=True, dashboard_address=None,
                                       scheduler_kwargs={"dashboard": False,
                                                         "dashboard_address": ":0"},
                                       silence_logs=logging.WARNING)
                own = client = Client(cluster)
            else:
                own = client = _connect(Client, address)
        futures = {}
        for i, j, bname, cfg, bpath in todo:
            fut = client.submit(_run_task_threads, threads, bname, cfg, bpath, overwrite,
                                hooks.get(bname),
                                key=f"wflow-{bname}-{time.time_ns()}", pure=False,
                                retries=retries)
            futures[fut] = (i, j, bname, bpath)
        bar = _bar(progress, len(todo))
        for fut in as_completed(list(futures)):
            i, j, bname, bpath = futures[fut]
            if fut.status == "finished":
                results[(i, j)] = fut.result()
            else:  # the task raised, or its worker was lost beyond Dask's allowed failures
                exc = fut.exception()
                if isinstance(exc, WriteError):  # a full disk: so for the other tasks too
                    raise exc
                results[(i, j)] = {"name": bname, "path": bpath, "action": FAILED,
                                   "status": FAILED, "error": f"{type(exc).__name__}: {exc}",
                                   "elapsed": float("nan"), "worker": ""}
            bar.update(1)
        bar.close()
    finally:
        if own is not None:
            own.close()
        if cluster is not None:
            cluster.close()
        dlog.setLevel(old_level)
    return results


#: seconds to wait for the Dask scheduler at ``address`` to answer
def _join(pt, prow):
    from wflow.engine import driver
    from wflow.engine.run import Simulation
    from wflow.storage import io

    batches = [{"first": a, "count": k, "elapsed": r["elapsed"], "worker": r["worker"]}
               for (a, k, *_), r in zip(pt.batches, prow)]
    inputs = [io.read_header(b[4])["inputs"] for b in pt.batches]  # what the batches read
    digests = [driver.stored_digests({"inputs": i}) for i in inputs]
    if any(d != digests[0] for d in digests):
        raise ConfigError(f"sweep: the batches of {pt.name} read different input files "
                          f"(one changed during the sweep); rerun with --overwrite")
    header = driver.header(Simulation(pt.cfg, explicit=()), inputs=inputs[0])
    io.merge_paths([b[4] for b in pt.batches], pt.path, pt.cfg, header=header,
                   attrs={"sweep_batches": json.dumps(batches)})
    shutil.rmtree(pt.batches[0][4].parent, ignore_errors=True)  # the joined file holds all


# ------------------------------------------------------------------------------ summary


def sweep(base, grid, outdir="sweep", executor="serial", paths_per_task=None, name="run",
          streams="common", **kw):
    """Expand ``grid`` over ``base`` and run it (:func:`run_sweep`); returns the summary
    ``xarray.Dataset`` (attrs: counts, failed grid points)."""
    report = run_sweep(expand_grid(base, grid, name=name, streams=streams), outdir,
                       executor=executor, paths_per_task=paths_per_task, keys=list(grid), **kw)
    ds = report.summary
    ds.attrs.update({k: int(v) for k, v in report.counts.items()})
    ds.attrs["failed"] = json.dumps(report.failed)
    return ds

