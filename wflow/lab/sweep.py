"""Parameter sweeps: many configurations, one HDF5 result each, serial or on Dask.

Every task is self-contained (its configuration fixes every random stream), so the
results do not depend on the executor, the number of workers or the order of the
tasks. A task whose file is complete is skipped; a partial file is resumed. Hence a
sweep killed midway is continued by running it again.

    tasks = expand_grid(base, {"model.heads": [1, 10, 100], "weights.process": ["ou"]})
    run_sweep(tasks, "out/", executor="dask")      # LocalCluster, or address="tcp://..."
"""

from __future__ import annotations

import copy
import itertools
import logging
import os
import time
from pathlib import Path

from wflow import config as _config
from wflow.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["expand_grid", "run_task", "run_sweep", "EXECUTORS"]

EXECUTORS = ("serial", "dask")


def _set(cfg, dotted, value):
    sec, key = dotted.split(".", 1)
    cfg.setdefault(sec, {})[key] = value


def _label(v):
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "-".join(_label(x) for x in v) or "none"
    return str(v)


def expand_grid(base, grid: dict, name="run"):
    """The Cartesian product of ``grid`` (dotted key -> list of values) over ``base``.

    Returns a list of ``(name, config)``; names are ``name-key=value-...`` with short keys.
    Every configuration is validated (a bad value raises ConfigError naming it).
    """
    base = _config.resolve(base) if base is None or not isinstance(base, dict) else base
    keys = list(grid)
    out = []
    for values in itertools.product(*(grid[k] for k in keys)):
        cfg = copy.deepcopy(base)
        for k, v in zip(keys, values):
            _set(cfg, k, v)
        tag = "-".join(f"{k.split('.')[-1]}={_label(v)}" for k, v in zip(keys, values))
        out.append((f"{name}-{tag}" if tag else name, _config.validate(cfg)))
    return out


def run_task(name, cfg, path, overwrite=False):
    """Run one task into ``path``: skip if complete, resume if partial, else run.

    Returns a dict (name, path, action, elapsed seconds).
    """
    from wflow.engine import driver
    from wflow.storage import io

    t0 = time.perf_counter()
    status = io.file_status(path)
    if status == "complete" and not overwrite:
        action = "skipped (complete)"
    elif status == "running":
        driver.resume(path)
        action = "resumed"
    elif status == "foreign":
        raise ConfigError(f"sweep: {str(path)!r} exists and is not a wflow result")
    else:
        driver.run_to_file(cfg, path, overwrite=overwrite)
        action = "ran"
    return {"name": name, "path": str(path), "action": action,
            "elapsed": time.perf_counter() - t0}


def _run_task_threads(threads, name, cfg, path, overwrite=False):
    """:func:`run_task` with numba limited to ``threads`` threads (None: numba's default).

    Set inside the task: ``numba.set_num_threads`` is per calling thread. Results do not
    depend on the thread count."""
    if threads:
        import numba

        numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))
    return run_task(name, cfg, path, overwrite)


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def run_sweep(tasks, outdir, executor="serial", address=None, n_workers=None, overwrite=False,
              progress=False):
    """Run ``tasks`` (list of (name, config)) into ``outdir/<name>.h5``.

    Parameters
    ----------
    executor : "serial" (in this process, numba threads use every core) or "dask"
        (``dask.distributed``: a ``LocalCluster`` of ``n_workers`` single-threaded
        worker processes, each task's numba threads limited to cores // n_workers so the
        workers do not oversubscribe the cores; or the scheduler at ``address``, numba's
        default thread count per task).

    Returns
    -------
    list of dicts (name, path, action, elapsed), in task order.
    """
    if executor not in EXECUTORS:
        raise ConfigError(f"executor = {executor!r}: allowed values are {', '.join(EXECUTORS)}")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    names = [n for n, _ in tasks]
    if len(set(names)) != len(names):
        raise ConfigError("sweep: task names must be unique (they name the result files)")
    jobs = [(n, c, str(outdir / f"{n}.h5")) for n, c in tasks]
    if executor == "serial":
        it = jobs
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(jobs, unit="run", desc="sweep")
        return [run_task(n, c, p, overwrite) for n, c, p in it]
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover - depends on the extra
        raise ConfigError(
            "executor = 'dask' needs dask.distributed: pip install 'wflow[distributed]'"
        ) from None
    cluster = None
    threads = None
    if address is None:
        n_workers = n_workers or 2
        threads = max(1, _cores() // n_workers)
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    else:
        client = Client(address)
    try:
        futures = [client.submit(_run_task_threads, threads, n, c, p, overwrite,
                                 key=f"wflow-{n}", pure=False)
                   for n, c, p in jobs]
        return client.gather(futures)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
