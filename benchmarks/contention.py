r"""The ``contention`` suite: a default-size run alone, beside k CPU-bound neighbour
processes, and three runs started together against three in a row (speed on shared
machines; the benchmark behind wflow's threading defaults and its worker pool,
``wflow.kernels.pool``). Each run is a fresh process that warms up (compilation, cache),
says "ready", and is timed from a "go" on its stdin; neighbours are bounded busy loops that
stop by themselves. Goal: beside k neighbours the run slows by at most 1.2·(1 + k/cores);
three together take no longer than three in a row; no slowdown alone against spinning
threads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks.results import row

# ---------------------------------------------------------------------- contention
#: A child: import, warm up (compilation / cache load), say "ready", wait for "go" on stdin,
#: run, print the seconds of the run (JSON).
_CHILD = (
    "import json, sys, time\n"
    "import wflow\n"
    "ov = json.loads(sys.argv[1])\n"
    "wflow.simulate(None, overrides=[*ov, 'solver.T=0.025'])\n"
    "print('ready', flush=True)\n"
    "if not sys.stdin.readline():\n"
    "    sys.exit(1)  # the parent is gone\n"
    "t0 = time.perf_counter()\n"
    "wflow.simulate(None, overrides=ov)\n"
    "print(json.dumps(time.perf_counter() - t0), flush=True)\n"
)
#: A CPU-bound neighbour: a busy loop that stops by itself after argv[1] seconds.
_BUSY = ("import sys, time\n"
         "end = time.monotonic() + float(sys.argv[1])\n"
         "while time.monotonic() < end:\n"
         "    pass\n")


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _start_runs(count, overrides, env=None):
    import json

    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(list(overrides))],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=env) for _ in range(count)]
    for p in procs:
        line = p.stdout.readline().strip()
        if line != "ready":
            p.kill()
            raise RuntimeError(f"contention bench: a run failed to start ({line!r})")
    return procs


def _go(procs):
    """Start the waiting runs together; returns the wall time until the last one ends."""
    import json

    t0 = time.perf_counter()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        json.loads(p.stdout.readline())
        p.wait()
    return time.perf_counter() - t0


def _neighbours(k, seconds):
    return [subprocess.Popen([sys.executable, "-c", _BUSY, f"{seconds:.1f}"]) for _ in range(k)]


def _stop(procs):
    for p in procs:
        if p.poll() is None:
            p.terminate()
        p.wait()


def contention_bench(T=20.0, ks=(1, 2), overrides=(), neighbour_seconds=None, env=None,
                     progress=None, repeats=3):
    r"""Wall time of a default-size run (the embedded default run, ``solver.T = T``) on a
    shared machine, each run in a fresh process (timed after its warm-up):

    * alone;
    * beside ``k`` CPU-bound neighbour processes (pure-Python busy loops, started just before
      the run, bounded: they stop by themselves after ``neighbour_seconds``, default
      20 × the time alone + 60 s, and are ended when the run is done), for each k in ``ks``;
      goal: slowdown ≤ 1.2·(1 + k/cores) (the fair share of ``cores`` cores among
      ``cores + k`` busy threads, plus 20%);
    * three runs started together, against three in a row (goal: no longer);
    * alone with spinning threads (``OMP_WAIT_POLICY=active``: wflow's own worker threads,
      :mod:`wflow.kernels.pool`, then spin for good between jobs, as OpenMP's would): the
      reference for "no slowdown when alone".

    The runs alone and alone with spinning threads alternate ``repeats`` times and each keeps
    its shortest time: two runs of one configuration differed by 7% on a shared 2-vCPU VM,
    as much as the effect measured.

    ``env``: the environment of the runs (default: :func:`child_env`); ``progress``: called
    with each row as it is measured (e.g. ``print``), or None.

    Returns a list of dicts (case, seconds, ratio, goal, what the ratio is against).
    """
    cores = _cores()
    env = child_env() if env is None else env
    ov = [f"solver.T={float(T)}", *overrides]
    load0 = _loadavg()
    rows = []

    def add(r):
        rows.append(r)
        if progress is not None:
            progress(f"{r['case']}: {r['seconds']:.2f} s")

    spin_env = dict(env, OMP_WAIT_POLICY="active")
    t_alone, t_spin = float("inf"), float("inf")
    for _ in range(max(1, int(repeats))):  # alternated: a drift of the machine hits both
        t_alone = min(t_alone, _go(_start_runs(1, ov, env)))
        t_spin = min(t_spin, _go(_start_runs(1, ov, spin_env)))
    add({"case": "alone", "seconds": t_alone, "ratio": 1.0, "goal": float("nan"),
         "against": ""})
    add({"case": "alone, OMP_WAIT_POLICY=active", "seconds": t_spin,
         "ratio": t_alone / t_spin, "goal": 1.0, "against": "alone / this"})
    secs = neighbour_seconds if neighbour_seconds is not None else 20.0 * t_alone + 60.0
    for k in ks:
        runs = _start_runs(1, ov, env)
        nb = _neighbours(k, secs)
        try:
            time.sleep(0.2)  # let the neighbours start spinning
            t = _go(runs)
        finally:
            _stop(nb)
        add({"case": f"beside {k} busy process{'es' if k > 1 else ''}", "seconds": t,
             "ratio": t / t_alone, "goal": 1.2 * (1.0 + k / cores),
             "against": "alone"})
    t_together = _go(_start_runs(3, ov, env))
    t_row = sum(_go(_start_runs(1, ov, env)) for _ in range(3))
    add({"case": "3 runs in a row", "seconds": t_row, "ratio": t_row / t_alone,
         "goal": float("nan"), "against": "alone"})
    add({"case": "3 runs started together", "seconds": t_together,
         "ratio": t_together / t_row, "goal": 1.0, "against": "3 in a row"})
    for r in rows:
        r["load_before"] = load0
    return rows


def _loadavg():
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - not POSIX
        return float("nan")


def format_contention_table(rows, T=20.0) -> str:
    """Plain-text table of :func:`contention_bench` rows."""
    lines = [f"{'case':<32}{'wall':>10}{'ratio':>9}{'goal':>9}  ratio of",
             "-" * 75]
    for r in rows:
        goal = "-" if r["goal"] != r["goal"] else f"≤{r['goal']:.2f}"
        lines.append(f"{r['case']:<32}{r['seconds']:>8.2f} s{r['ratio']:>8.2f}x{goal:>9}"
                     f"  {r['against']}")
    lines.append(f"default run (n = 200, H = 10, 2 paths, ledger on), T = {T:g}, "
                 f"{_cores()} cores; each run a fresh process, timed after its warm-up;")
    lines.append("alone / spinning: the shortest of runs alternated between the two; "
                 "busy process = a pure-Python busy loop;")
    lines.append("goal beside k of them: 1.2·(1 + k/cores)")
    if rows:
        lines.append(f"1-minute load average before: {rows[0].get('load_before', float('nan')):.2f}"
                     f", after: {_loadavg():.2f} (other work on the machine distorts the ratios)")
    return "\n".join(lines)


def child_env():
    """This process' environment with the repository first on ``PYTHONPATH`` (the children
    import the wflow of this checkout)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def contention_rows(quick=False, T=20.0, progress=None):
    """:func:`contention_bench` as rows of a result (``T = 0.05`` and one neighbour count
    when ``quick``)."""
    if quick:
        T = 0.05
        bench = contention_bench(T=T, ks=(1,), neighbour_seconds=60, progress=progress)
    else:
        bench = contention_bench(T=T, progress=progress)
    def what(r):
        if r["against"] == "alone / this":
            return f"wall time: alone ÷ {r['case']}"
        return f"wall time: {r['case']}" + (f" ÷ {r['against']}" if r["against"] else "")

    return [row("contention", f"default run, T = {T:g}", what(r),
                r["ratio"] if r["against"] else None,
                goal="" if r["goal"] != r["goal"] else f"≤ {r['goal']:.2f}",
                seconds=r["seconds"], data={"load_before": r["load_before"]})
            for r in bench]
