"""The commands of the ``wflow`` command line (``cmd_*``: parsed arguments in, exit code out).

Exit codes: 0 success, 2 bad input (one line, no traceback), 1 a failed run or an internal error.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np

from wflow.errors import ConfigError, WflowError, WriteError

log = logging.getLogger("wflow")


def _summary_table(res, last: str = "t = T") -> str:
    """A small table of the first and the last record (column ``last``): mean over paths of
    the main series. Rows that are NaN throughout are marked ``*`` and a note says why."""
    names = ["energy", "dissipation", "G2", "G2_hm", "b_hat_mean", "int_G2", "int_dissipation",
             "ledger_residual", "token_martingale", "token_ito_realised", "paper_residual",
             "order_parameter", "n_clusters"]
    lines = [f"{'series':<18}{'t = 0':>14}{last:>14}   (mean over {res.energy.shape[1]} paths)"]
    missing = []
    for k in names:
        if k not in res.keys():
            continue
        a = np.asarray(res[k], dtype=float)
        blank = a.size > 0 and bool(np.isnan(a).all())
        if blank:
            missing.append(k)
        lines.append(f"{k:<18}{np.mean(a[0]):>14.6g}{np.mean(a[-1]):>14.6g}"
                     + ("  *" if blank else ""))
    if "ledger_residual" in res.keys() and "ledger_residual" not in missing:
        lines.append(_LEDGER_NOTE_NOISE if "token_martingale" in res.keys() else _LEDGER_NOTE)
    if missing:
        lines.append(f"* nan: {_why_nan(getattr(res, 'config', None) or {})}")
    return "\n".join(lines)


def _why_nan(cfg) -> str:
    """Why a run's ledger rows (the exact ledger, the left-point integrals) are NaN."""
    s, m, dg = cfg.get("solver", {}), cfg.get("model", {}), cfg.get("diagnostics", {})
    if s.get("adaptive"):
        return ("an adaptive run computes no ledger and no left-point integrals: the split "
                "into a token part at frozen weights and a weight part assumes the "
                "frozen-weight step, which adaptive steps are not [model §6d]")
    if m.get("interaction", "symmetric") != "symmetric" or m.get("mask", "none") == "causal":
        return ("no energy, hence no ledger: model.interaction = 'general' or a causal mask "
                "[model §1b]")
    if not dg.get("ledger", True):
        return "the exact ledger is off (diagnostics.ledger = false) [model §6]"
    return "not computed by this run"


def _adaptive_counts(cfg, last: dict) -> str:
    """What an adaptive run did, from the stepper series of its last record (``last``:
    name -> (P,) values): accepted and rejected steps and field evaluations (sums over the
    paths), and the event times of ``solver.event``."""
    s = cfg["solver"]
    P = int(s["paths"])
    acc, rej, ev = (np.asarray(last.get(k, np.full(P, np.nan)), dtype=float)
                    for k in ("steps_accepted", "steps_rejected", "field_evals"))

    def total(a):
        return "?" if np.isnan(a).all() else f"{int(np.nansum(a))}"

    text = (f"steps accepted={total(acc)} rejected={total(rej)} field_evals={total(ev)}"
            + (f" (sums over {P} paths)" if P > 1 else ""))
    if s.get("event"):
        t = np.asarray(last.get("event_time", np.full(P, np.nan)), dtype=float)
        hit = t[np.isfinite(t)]
        what = (f"{s['event']} {'>=' if s.get('event_direction', 'up') == 'up' else '<='} "
                f"{s['event_threshold']:g}")
        if P <= 4:
            times = ", ".join("none" if not np.isfinite(x) else f"{x:.6g}" for x in t)
            text += f"; event {what} at t = {times}"
        elif hit.size:
            text += (f"; event {what} on {hit.size} of {P} paths, t in "
                     f"[{hit.min():.6g}, {hit.max():.6g}]")
        else:
            text += f"; event {what} on no path"
    return text


#: what the summary's ledger_residual is [model §6, §6b]
_LEDGER_NOTE = ("ledger_residual: R = token part of the energy change - sigma * int D dt "
                "(trapezoidal), the integrator's error: -> 0 with dt [model §6]")
_LEDGER_NOTE_NOISE = ("ledger_residual: R = token part of the energy change - sigma * int D dt; "
                      "with token noise R = token_martingale + token_ito_realised, noise rather "
                      "than the integrator's error [model §6b]")


def _run_line(sim, total: float | None = None) -> str:
    """The summary line of a run: its size, and its times: ``total`` the wall time of the
    command's run (setup, compiling the kernels on a first run, stepping, writing), ``stepping``
    the time loop alone (``sim.elapsed``)."""
    c = sim.config
    stepping = getattr(sim, "elapsed", 0.0)
    times = (f"in {stepping:.2f} s" if total is None
             else f"in {total:.2f} s ({stepping:.2f} s stepping; the rest setup, compiling, writing)")
    if c["solver"].get("adaptive"):  # the steps each path took, not the first step's grid
        st = getattr(sim, "final_state", None)
        steps = "adaptive " + _adaptive_counts(c, getattr(st, "stepper_info", None) or {})
        grid = f"dt0={sim.dt:g}"
    else:
        steps, grid = f"steps={sim.nsteps}", f"dt={sim.dt:g}"
    return (
        f"wflow run: n={sim.n} d={sim.d} H={sim.H} paths={sim.P} "
        f"{c['model']['normalization']}/{c['model']['sign']} process={c['weights']['process']} "
        f"method={c['solver']['method']} {grid} T={c['solver']['T']:g} "
        f"{steps} {times}"
    )


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a command; the message says what was kept and how to continue."""


#: Ctrl-C during a sweep or a study: its complete results are kept, a partial one resumes
_AGAIN = ("interrupted; the same command again keeps the complete results and resumes the "
          "interrupted ones")


def _interrupted(path) -> Interrupted:
    """Ctrl-C during the run into ``path``: the step of the checkpoint the file keeps, and the
    command that continues from it."""
    from wflow.storage.io import inspect

    try:
        info = inspect(path)
    except (OSError, WflowError):
        return Interrupted("interrupted")
    if info["status"] != "running":
        return Interrupted("interrupted")
    ck = info["checkpoint_step"]
    if ck is None:
        return Interrupted(f"interrupted before the first checkpoint of {path} "
                           f"(`wflow resume {path}` runs it again from step 0)")
    where = (f"after round {ck} of the adaptive loop"
             if info["config"].get("solver", {}).get("adaptive")
             else f"at step {ck} of {info['nsteps']}")
    return Interrupted(f"interrupted; {path} keeps the checkpoint {where} "
                       f"(`wflow resume {path}` continues from there)")


def _output_dir(d) -> Path:
    """The one rule for output locations, in every command: a missing directory (and its
    parents) is created; one that cannot be created or written is bad input (exit 2)."""
    import tempfile

    d = Path(d)
    try:
        d.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=d):
            pass
    except OSError as exc:
        raise ConfigError(f"{d}: cannot write to the output directory "
                          f"({exc.strerror or type(exc).__name__})") from None
    return d


def _batched_twice(configs, paths_per_task):
    """The configurations whose disk use to count: a grid point split into batches of
    ``paths_per_task`` paths counts twice (its batch files and the joined file coexist until
    the batches are removed)."""
    out = []
    for c in configs:
        out.append(c)
        if paths_per_task and int(paths_per_task) < int(c["solver"]["paths"]):
            out.append(c)
    return out


def _check_disk(configs, location, what="the result file", folder=None,
                held=0) -> tuple[int, int]:
    """Refuse (exit 2) when the result files of ``configs`` (validated configurations) need
    more than the free disk at ``location``, less ``held`` bytes that partial files of the
    same results already hold; returns (bytes needed, bytes free). When the disk looks full,
    the output ``folder`` (default: ``location``'s parent) is checked first: one that cannot
    be created or written (``/proc/x``, a read-only mount, which report no free space) is the
    error, not the disk."""
    from wflow.engine import memory
    from wflow.storage.files import check_folder

    need = sum(memory.output_bytes(c) for c in configs)
    try:
        return need, memory.check_disk(max(0, need - held), location, what)
    except ConfigError:
        check_folder(Path(location).parent if folder is None else folder)
        raise


def _file_summary(path, complete: bool = True) -> str | None:
    """The summary table of a result file; the last column of an incomplete run is labelled
    with its last record's time (``t = 5.8``), not ``t = T``."""
    from wflow.engine.run import Result
    from wflow.storage.io import read

    cfg, arrays, _ = read(path, tokens=False)
    if "energy" not in arrays or len(arrays["energy"]) == 0:
        return None
    last = "t = T"
    if not complete and len(arrays.get("t", ())):
        last = f"t = {float(arrays['t'][-1]):.4g}"
    return _summary_table(Result(cfg, arrays), last)


def _kept(path, exc: WriteError) -> WriteError:
    """``exc`` (a write of the result file ``path`` failed), saying how to continue when the
    file keeps a checkpoint to resume from."""
    from wflow.storage.io import _damage, file_status

    if file_status(path) != "running" or not str(exc).startswith(str(path)):
        return exc
    if _damage(path) is not None:  # HDF5 failed halfway through a write
        return WriteError(f"{exc}; the file was damaged: nothing to resume, run it again with "
                          f"`wflow run --overwrite` once the disk can be written again")
    return WriteError(f"{exc}; the file keeps its last checkpoint: `wflow resume {path}` "
                      f"continues the run once the disk can be written again")


def _run_config(config, sets, output, overwrite, quiet) -> int:
    import time

    from wflow.engine.driver import run_to_file
    from wflow.engine.run import Simulation

    t0 = time.perf_counter()
    sim = Simulation(config, sets or [])
    ready = getattr(sim.model, "kernels_ready", None)  # a compiling run says nothing of speed
    warm = ready is None or ready(sim.X0, sim.D0)
    out = Path(output) if output else Path(sim.config["output"]["path"])
    _check_disk([sim.config], out)  # before anything is written, even a directory
    _output_dir(out.parent)
    try:
        run_to_file(path=out, overwrite=overwrite, progress=not quiet, simulation=sim)
    except WriteError as exc:
        raise _kept(out, exc) from None
    except KeyboardInterrupt:
        raise _interrupted(out) from None
    total = time.perf_counter() - t0
    from wflow.engine import timing

    if warm:  # a timing of the cost model `wflow validate` estimates from
        timing.record(sim.config, sim.elapsed)
    print(_run_line(sim, total))
    print(f"wrote {out}")
    table = _file_summary(out)
    if table:
        print(table)
    return 0


def cmd_run(args) -> int:
    return _run_config(args.config, args.set, args.output, args.overwrite, args.quiet)


def cmd_resume(args) -> int:
    from wflow.engine import memory
    from wflow.engine.driver import resume
    from wflow.storage.io import inspect

    info = inspect(args.file)
    if info["status"] == "running":  # what is left to write must fit
        have = Path(args.file).stat().st_size
        memory.check_disk(max(0, memory.output_bytes(info["config"]) - have), args.file,
                          "the rest of the result file")
    try:
        r = resume(args.file, progress=not args.quiet)
    except WriteError as exc:
        raise _kept(args.file, exc) from None
    except KeyboardInterrupt:
        raise _interrupted(args.file) from None
    if r.action == "noop":
        print(f"{r.path}: already complete ({r.n_records} records); nothing to do")
        return 0
    if r.action == "restarted":
        print(f"{r.path}: no usable checkpoint, ran again from step 0: "
              f"complete, {r.n_records} records")
    elif info["config"].get("solver", {}).get("adaptive"):  # k counts rounds [model §6d]
        print(f"resumed {r.path} from round {r.from_step} of the adaptive loop: "
              f"complete, {r.n_records} records")
    else:
        print(f"resumed {r.path} from step {r.from_step} of {r.nsteps}: "
              f"complete, {r.n_records} records")
    table = _file_summary(r.path)
    if table:
        print(table)
    return 0


def _load_plotting():
    import importlib

    try:
        return importlib.import_module("wflow.figures.plotting")
    except ImportError as exc:
        raise WflowError(f"plotting is not available ({exc})") from None


def _toml(cfg: dict) -> str:
    import tomlkit

    return tomlkit.dumps(cfg).rstrip()


# ---------------------------------------------------------------------- validate
def _time_case(sets):
    """The stepping seconds and the configuration of a run of the embedded default with the
    overrides ``sets``, records in memory (a calibration run of the time estimate)."""
    from wflow.engine.run import Simulation

    sim = Simulation(None, list(sets))
    sim.run()
    return float(sim.elapsed), sim.config


def cmd_validate(args) -> int:
    from wflow.config import resolve
    from wflow.engine import driver, memory, timing
    from wflow.engine.run import Simulation

    cfg = resolve(args.config, args.set or [])
    Simulation(cfg, explicit=())  # the run built, not run: every refusal of `wflow run`
    est = memory.check(cfg)  # refused (exit 2) when it cannot fit in memory
    need, free = _check_disk([cfg], cfg["output"]["path"])  # or on the disk
    avail, source = memory.available()
    m, s = cfg["model"], cfg["solver"]
    nsteps = int(round(s["T"] / s["dt"]))
    print(f"ok: n={m['n']} d={m['d']} H={m['heads']} paths={s['paths']} method={s['method']} "
          f"backend={s['backend']} steps={nsteps} records={est.records}")
    there = "" if avail is None else f" of {memory.human(avail)} available ({source})"
    print(f"memory: about {est}{there}")
    print(f"disk: about {memory.human(need)} for {cfg['output']['path']} "
          f"({memory.human(free)} free)")
    if getattr(args, "calibrate", False):
        print("calibrating the time estimate: a few short runs of each kernel route (kernels "
              "not yet compiled on this machine compile first)", file=sys.stderr)
        timing.calibrate(_time_case, progress=lambda line: print(f"  {line}", file=sys.stderr))
    est_t = timing.estimate(cfg)
    print(f"time: {'roughly ' if est_t.rough else 'about '}{timing.human_seconds(est_t.seconds)} "
          f"stepping ({est_t.how})")
    print(f"config_hash: {driver.result_hash(cfg)}")
    return 0


# ---------------------------------------------------------------------- experiments
def _experiment_files(arg) -> dict:
    """``{stem: file}`` of the ``*.toml`` in ``--dir`` or, by default, the package data
    ``wflow/data/experiments`` (an :mod:`importlib.resources` traversable: works from a wheel)."""
    if arg:
        d = Path(arg)
        if not d.is_dir():
            raise ConfigError(f"experiments directory {str(d)!r} not found")
    else:
        import importlib.resources

        d = importlib.resources.files("wflow").joinpath("data", "experiments")
    files = [f for f in d.iterdir() if f.is_file() and f.name.endswith(".toml")]
    return {f.name[: -len(".toml")]: f for f in sorted(files, key=lambda f: f.name)}


def _experiment_description(path) -> str:
    """The leading comment block of a configuration, joined into one line."""
    words = []
    try:
        for line in path.read_text("utf-8").splitlines():
            s = line.strip()
            if not s.startswith("#"):
                if s or words:
                    break
                continue
            words.append(s.lstrip("#").strip())
    except (OSError, UnicodeDecodeError):
        pass
    return " ".join(w for w in words if w)


def cmd_experiments_list(args) -> int:
    files = _experiment_files(args.dir)
    if not files:
        print(f"no experiment configurations in {args.dir or 'the package'}")
        return 0
    width = max(len(k) for k in files) + 2
    for name, f in files.items():
        print(f"{name:<{width}}{_experiment_description(f)}")
    return 0


def cmd_experiments_run(args) -> int:
    import importlib.resources

    files = _experiment_files(args.dir)
    name = args.name[: -len(".toml")] if args.name.endswith(".toml") else args.name
    if name not in files:
        raise ConfigError(f"unknown experiment {args.name!r}: {_did_you_mean(name, files)}"
                          f"available are {', '.join(files) or 'none'}")
    with importlib.resources.as_file(files[name]) as path:
        return _run_config(path, args.set, args.output, args.overwrite, args.quiet)


# ---------------------------------------------------------------------- bench
def cmd_bench(args) -> int:
    """``wflow bench``: one quick table, wflow against the NumPy twin (and PyTorch SDPA when
    installed), interleaved (:mod:`wflow.cli.bench`)."""
    from wflow.cli.bench import format_quick_table, quick_bench

    print(format_quick_table(quick_bench(torch=not args.no_torch)))
    return 0


def _did_you_mean(name, choices) -> str:
    """``"did you mean 'section6'? "`` for a near miss of ``choices`` (difflib), else ``""``."""
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


DESCRIPTION = (
    "wflow simulates the mean-field transformer PDE: n tokens on the sphere moved by multi-head "
    "softmax attention whose weights change in time, seen as a Wasserstein gradient flow. It runs "
    "a configuration into an HDF5 result file (energy, dissipation, G², the energy ledger, ...), "
    "resumes killed runs, and plots, animates and sweeps them. Start with 'wflow run' (the "
    "paper's reference configuration), then 'wflow plot wflow_run.h5'."
)
EPILOG = ("exit codes: 0 success; 2 bad input (one line, no traceback; also an output location "
          "that cannot be used); 1 a failed run, a write the machine could not complete (no space "
          "left, an I/O error) or an internal error; 130 interrupted (Ctrl-C: the checkpoint kept "
          "and the `wflow resume FILE` that continues). The model: docs/model.md.")

#: the figure kinds of ``wflow plot`` (wflow.figures.plotting.KINDS; listed here so that --help
#: does not import matplotlib)
PLOT_KINDS = {
    "snapshots": "the tokens on the sphere at six times",
    "G2": "G², G²_hm and the dissipation over time",
    "ledger": "the exact energy ledger and its residual",
    "balance": "the paper's energy-dissipation balance",
    "head_scaling": "fit a·H^b across runs with different numbers of heads",
    "clustering": "order parameter, number of clusters, smallest cosine",
    "density": "a density run: rho(theta, t) and rho on the circle",
}
