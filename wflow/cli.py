"""The ``wflow`` command line.

Exit codes: 0 success, 2 bad input (one line, no traceback), 1 internal error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from pathlib import Path

import numpy as np

from .errors import ConfigError, WflowError

log = logging.getLogger("wflow")


def _summary_table(res) -> str:
    """A small table of the final record: mean over paths of the main series."""
    names = ["energy", "dissipation", "G2", "G2_hm", "b_hat_mean", "int_G2", "int_dissipation",
             "ledger_residual", "paper_residual", "order_parameter", "n_clusters"]
    lines = [f"{'series':<18}{'t = 0':>14}{'t = T':>14}   (mean over {res.energy.shape[1]} paths)"]
    for k in names:
        if k not in res.keys():
            continue
        a = np.asarray(res[k])
        lines.append(f"{k:<18}{np.mean(a[0]):>14.6g}{np.mean(a[-1]):>14.6g}")
    return "\n".join(lines)


def _run_line(sim) -> str:
    c = sim.config
    return (
        f"wflow run: n={sim.n} d={sim.d} H={sim.H} paths={sim.P} "
        f"{c['model']['normalization']}/{c['model']['sign']} process={c['weights']['process']} "
        f"method={c['solver']['method']} dt={sim.dt:g} T={c['solver']['T']:g} "
        f"steps={sim.nsteps} in {getattr(sim, 'elapsed', 0.0):.2f} s"
    )


def _file_summary(path) -> str | None:
    from .io import read
    from .run import Result

    cfg, arrays, _ = read(path, tokens=False)
    if "energy" not in arrays or len(arrays["energy"]) == 0:
        return None
    return _summary_table(Result(cfg, arrays))


def _run_config(config, sets, output, overwrite, quiet) -> int:
    from .io import run_to_file
    from .run import Simulation

    sim = Simulation(config, sets or [])
    out = Path(output) if output else Path(sim.config["output"]["path"])
    run_to_file(path=out, overwrite=overwrite, progress=not quiet, simulation=sim)
    print(_run_line(sim))
    print(f"wrote {out}")
    table = _file_summary(out)
    if table:
        print(table)
    return 0


def cmd_run(args) -> int:
    return _run_config(args.config, args.set, args.output, args.overwrite, args.quiet)


def cmd_resume(args) -> int:
    from .io import resume

    r = resume(args.file, progress=not args.quiet)
    if r.action == "noop":
        print(f"{r.path}: already complete ({r.n_records} records); nothing to do")
        return 0
    if r.action == "restarted":
        print(f"{r.path}: no usable checkpoint, ran again from step 0: "
              f"complete, {r.n_records} records")
    else:
        print(f"resumed {r.path} from step {r.from_step} of {r.nsteps}: "
              f"complete, {r.n_records} records")
    table = _file_summary(r.path)
    if table:
        print(table)
    return 0


# ---------------------------------------------------------------------- info
def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(str(v))


def _toml(cfg: dict) -> str:
    lines = []
    for section, table in cfg.items():
        lines.append(f"[{section}]")
        for k, v in table.items():
            lines.append(f"{k} = {_toml_value(v)}")
        lines.append("")
    return "\n".join(lines).rstrip()


def cmd_info(args) -> int:
    from .io import inspect

    info = inspect(args.file)
    a = info["attrs"]
    status = info["status"]
    if status != "complete":
        ck = info["checkpoint_step"]
        where = ("no usable checkpoint" if ck is None
                 else f"last checkpoint at step {ck} of {info['nsteps']}")
        status = f"{status} (partial: {where}; continue with `wflow resume {info['path']}`)"
    rows = [
        ("file", str(info["path"])),
        ("status", status),
        ("format", a.get("format")),
        ("wflow_version", a.get("wflow_version")),
        ("created", a.get("created")),
        ("finished", a.get("finished", "-")),
        ("config_hash", a.get("config_hash")),
        ("seed", a.get("seed")),
        ("steps", info["nsteps"]),
        ("records", f"{info['n_records']} of {a.get('n_records_expected', '?')}"),
        ("resumes", a.get("resumes", 0)),
        ("machine", json.dumps(a.get("machine"))),
        ("versions", json.dumps(a.get("versions"))),
    ]
    if "error" in a:
        rows.append(("error", a["error"]))
    for k, v in rows:
        print(f"{k:<15}{v}")
    print("datasets")
    for name, shape in info["datasets"].items():
        print(f"  {name:<28}{shape}")
    print()
    print("# configuration")
    print(_toml(info["config"]))
    table = _file_summary(info["path"])
    if table:
        print()
        print(table)
    return 0


# ---------------------------------------------------------------------- plots
def _load_plotting():
    try:
        from . import plotting
    except ImportError as exc:
        raise WflowError(f"plotting is not available ({exc})") from None
    return plotting


def cmd_plot(args) -> int:
    from .io import inspect

    files = [Path(f) for f in args.file]
    infos = [inspect(f) for f in files]  # a bad file is bad input (exit 2) before any import
    plotting = _load_plotting()
    kinds = list(args.kind or plotting.KINDS)
    allowed = list(plotting.KINDS)
    for k in kinds:
        if k not in allowed:
            raise ConfigError(f"--kind {k!r}: allowed values are "
                              + ", ".join(repr(x) for x in allowed))
    for f, info in zip(files, infos):
        if info["n_records"] == 0:
            raise ConfigError(f"{f}: no records to plot")
    if len(files) == 1:
        outdir = Path(args.output) if args.output else files[0].parent / f"{files[0].stem}_plots"
    else:
        outdir = Path(args.output) if args.output else Path("plots")
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    if "head_scaling" in kinds and len(files) > 1:  # one figure across the runs
        written += plotting.plot_head_scaling([str(f) for f in files], outdir)
        kinds = [k for k in kinds if k != "head_scaling"]
    for f in files:
        sub = outdir if len(files) == 1 else outdir / f.stem
        sub.mkdir(parents=True, exist_ok=True)
        for k in kinds:
            written += plotting.plot(f, k, sub) or []
    for p in written:
        print(p)
    return 0


def cmd_animate(args) -> int:
    from .io import inspect

    info = inspect(args.file)
    path = Path(args.file)
    if not (isinstance(args.fps, int) and args.fps > 0):
        raise ConfigError(f"--fps {args.fps!r}: must be a positive integer")
    if "X" not in info["datasets"]:
        raise ConfigError(f"{path}: no token snapshots X (run with output.store_tokens = true)")
    if info["n_records"] == 0:
        raise ConfigError(f"{path}: no records to animate")
    plotting = _load_plotting()
    out = Path(args.output) if args.output else path.with_suffix(".gif")
    print(plotting.animate(path, out, args.fps))
    return 0


# ---------------------------------------------------------------------- validate
def cmd_validate(args) -> int:
    from .config import config_hash, resolve

    cfg = resolve(args.config, args.set or [])
    print(f"ok: {config_hash(cfg)}")
    return 0


# ---------------------------------------------------------------------- experiments
def _experiments_dir(arg) -> Path:
    if arg:
        d = Path(arg)
    else:
        import wflow

        d = Path(wflow.__file__).resolve().parents[1] / "experiments" / "configs"
    if not d.is_dir():
        raise ConfigError(f"experiments directory {str(d)!r} not found (use --dir DIR)")
    return d


def _experiment_description(path: Path) -> str:
    try:
        for line in path.read_text("utf-8").splitlines():
            s = line.strip()
            if s.startswith("#"):
                return s.lstrip("#").strip()
            if s:
                break
    except (OSError, UnicodeDecodeError):
        pass
    return ""


def cmd_experiments_list(args) -> int:
    d = _experiments_dir(args.dir)
    files = sorted(d.glob("*.toml"))
    if not files:
        print(f"no experiment configurations in {d}")
        return 0
    width = max(len(f.stem) for f in files) + 2
    for f in files:
        print(f"{f.stem:<{width}}{_experiment_description(f)}")
    return 0


def cmd_experiments_run(args) -> int:
    d = _experiments_dir(args.dir)
    name = args.name
    candidates = [d / name, d / f"{name}.toml"]
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        available = ", ".join(f.stem for f in sorted(d.glob("*.toml"))) or "none"
        raise ConfigError(f"unknown experiment {name!r}: available are {available}")
    return _run_config(path, args.set, args.output, args.overwrite, args.quiet)


# ---------------------------------------------------------------------- bench
def cmd_bench(args) -> int:
    try:
        from .bench import format_table, run_bench
    except ImportError as exc:
        raise WflowError(f"wflow bench is not available ({exc})") from None
    from . import bench

    if args.contention:
        rows = bench.contention_bench(T=args.T, progress=lambda m: print(m, file=sys.stderr))
        print(bench.format_contention_table(rows, T=args.T))
        return 0
    print(format_table(run_bench(tiny=args.tiny)))
    if args.tiny:
        return 0
    print()
    print(bench.format_step_table(bench.step_bench()))
    t, mb = bench.memory_probe()
    print(f"\n(100000, 4, 3), P=1, fresh process: one step with the ledger and the next "
          f"record's pass (3 field evaluations): {t:.1f} s, peak RSS (VmHWM) {mb:.0f} MB")
    if args.section6:
        for ledger in (False, True):
            total, per = bench.section6_end_to_end(T=args.T, ledger=ledger)
            print(f"\nSection 6 end to end (T = {args.T:g}, ledger = {ledger}): {total:.1f} s")
            for name, sec in per:
                print(f"  {name:<24}{sec:>8.1f} s")
    return 0


# ---------------------------------------------------------------------- parser
class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2)."""

    def error(self, message):
        print(f"{self.prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
        sys.exit(2)


def cmd_study(args) -> int:
    from .studies import STUDIES, run_study

    if args.name == "list":
        for k, v in STUDIES.items():
            print(f"{k:<12}{v}")
        return 0
    out = args.output or f"study_{args.name}"
    text = run_study(args.name, out, scale="quick" if args.quick else "full",
                     executor=args.executor, address=args.address, n_workers=args.workers,
                     overrides=args.set or [], ledger=args.ledger, progress=not args.quiet)
    print(text)
    print(f"results in {out}/")
    if not args.no_plots:
        plotting = _load_plotting()
        files = sorted(Path(out).glob("*.h5"))
        figs = Path(out) / "figures"
        if args.name == "section6":
            fam = {"OU": [str(f) for f in files if f.name.startswith("ou-")],
                   "oscillating, shared phase": [str(f) for f in files
                                                 if f.name.startswith("oscillating-")]}
            plotting.plot_head_scaling(fam, figs, formats=("png", "pdf"))
        kinds = ("ledger",) if args.name == "energy" else ("snapshots", "G2", "clustering")
        for f in files:
            for kind in kinds:
                plotting.plot(f, kind, figs / f.stem)
        print(f"figures in {figs}/")
    return 0


def _grid_arg(text):
    from .config import parse_override

    keys, value = parse_override(text if "=" in text else text + "=")
    if not isinstance(value, list):
        value = [value]
    return ".".join(keys), value


def cmd_sweep(args) -> int:
    from .config import resolve
    from .sweep import expand_grid, run_sweep

    base = resolve(args.config, args.set or [])
    grid = dict(_grid_arg(g) for g in (args.grid or []))
    tasks = expand_grid(base, grid, name=args.name)
    rows = run_sweep(tasks, args.output or "sweep", executor=args.executor, address=args.address,
                     n_workers=args.workers, overwrite=args.overwrite, progress=not args.quiet)
    for r in rows:
        print(f"{r['name']:<40}{r['action']:<20}{r['elapsed']:>9.1f} s  {r['path']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="wflow", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level, tracebacks")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="log at INFO level, tracebacks")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    def add_run_options(r, output_help):
        r.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                       help="override a key (repeatable)")
        r.add_argument("-o", "--output", metavar="OUT.h5", help=output_help)
        r.add_argument("--overwrite", action="store_true", help="replace a complete result")
        r.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    r = sub.add_parser("run", parents=[common],
                       help="run a configuration (default: the embedded one) into an HDF5 file")
    r.add_argument("config", nargs="?", default=None, help="TOML file (SPEC §10 vocabulary)")
    add_run_options(r, "result file (default: output.path)")
    r.set_defaults(func=cmd_run)

    r = sub.add_parser("resume", parents=[common], help="continue a partial result file")
    r.add_argument("file", help="result file (HDF5)")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=cmd_resume)

    r = sub.add_parser("info", parents=[common], help="status, configuration and summary")
    r.add_argument("file", help="result file (HDF5)")
    r.set_defaults(func=cmd_info)

    r = sub.add_parser("plot", parents=[common],
                       help="figures of result files (several files: one head_scaling across them)")
    r.add_argument("file", nargs="+", help="result file(s) (HDF5)")
    r.add_argument("--kind", action="append", metavar="K", help="figure kind (repeatable)")
    r.add_argument("-o", "--output", metavar="DIR", help="output directory")
    r.set_defaults(func=cmd_plot)

    r = sub.add_parser("animate", parents=[common], help="animation of the token snapshots")
    r.add_argument("file", help="result file (HDF5)")
    r.add_argument("-o", "--output", metavar="OUT.gif", help="animation file")
    r.add_argument("--fps", type=int, default=10, help="frames per second (default 10)")
    r.set_defaults(func=cmd_animate)

    r = sub.add_parser("validate", parents=[common], help="check a configuration")
    r.add_argument("config", nargs="?", default=None, help="TOML file (default: the embedded)")
    r.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a key")
    r.set_defaults(func=cmd_validate)

    e = sub.add_parser("experiments", parents=[common], help="the shipped experiments")
    esub = e.add_subparsers(dest="experiments_cmd", required=True, parser_class=_Parser)
    r = esub.add_parser("list", parents=[common], help="list the experiment configurations")
    r.add_argument("--dir", help="configuration directory (default: experiments/configs)")
    r.set_defaults(func=cmd_experiments_list)
    r = esub.add_parser("run", parents=[common], help="run one experiment")
    r.add_argument("name", help="experiment name (file stem) or file name")
    r.add_argument("--dir", help="configuration directory (default: experiments/configs)")
    add_run_options(r, "result file (default: the experiment's output.path)")
    r.set_defaults(func=cmd_experiments_run)

    def add_exec_options(r):
        r.add_argument("--executor", choices=("serial", "dask"), default="serial",
                       help="serial (numba threads on every core) or dask.distributed")
        r.add_argument("--address", help="Dask scheduler address (default: a LocalCluster)")
        r.add_argument("--workers", type=int, help="LocalCluster worker processes")
        r.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    r = sub.add_parser("study", parents=[common], help="run a standard study ('list' to list)")
    r.add_argument("name", help="section6 | energy | laplacian | list")
    r.add_argument("-o", "--output", metavar="DIR", help="result directory")
    r.add_argument("--quick", action="store_true", help="short T and few paths (smoke test)")
    r.add_argument("--ledger", action="store_true", help="record the exact ledger too")
    r.add_argument("--no-plots", action="store_true", help="skip the figures")
    r.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a key")
    add_exec_options(r)
    r.set_defaults(func=cmd_study)

    r = sub.add_parser("sweep", parents=[common], help="run a grid of configurations")
    r.add_argument("config", nargs="?", default=None, help="base TOML (default: the embedded)")
    r.add_argument("--grid", action="append", metavar="SECTION.KEY=[V1, V2]",
                   help="a swept key with a TOML list of values (repeatable)")
    r.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a key")
    r.add_argument("--name", default="run", help="file name prefix")
    r.add_argument("-o", "--output", metavar="DIR", help="result directory (default: sweep)")
    r.add_argument("--overwrite", action="store_true", help="re-run complete results")
    add_exec_options(r)
    r.set_defaults(func=cmd_sweep)

    r = sub.add_parser("bench", parents=[common], help="benchmark the kernels")
    r.add_argument("--tiny", action="store_true", help="a quick, small benchmark")
    r.add_argument("--section6", action="store_true",
                   help="also time the paper's Section 6 end to end (minutes)")
    r.add_argument("--contention", action="store_true",
                   help="only the shared-machine benchmark: a default run alone, beside busy "
                        "processes, and three at once (minutes)")
    r.add_argument("--T", type=float, default=20.0,
                   help="final time for --section6 and --contention")
    r.set_defaults(func=cmd_bench)
    return p


def _one_line(msg) -> str:
    return " ".join(str(msg).split())


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # -h, or a usage error already reported in one line
        return exc.code if isinstance(exc.code, int) else 2
    verbose = bool(getattr(args, "verbose", False))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    hint = "" if verbose else " (run with -v for the traceback)"
    try:
        return args.func(args)
    except (ConfigError, FileExistsError, FileNotFoundError, IsADirectoryError) as e:
        print(f"wflow: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wflow: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `wflow run | head`: the reader left; not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except WflowError as e:  # NumericalError and other run failures
        if verbose:
            traceback.print_exc()
        print(f"wflow: error: {_one_line(e)}{hint}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - the last line of defence
        if verbose:
            traceback.print_exc()
        print(f"wflow: internal error: {type(e).__name__}: {_one_line(e)}{hint}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
