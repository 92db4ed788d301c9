"""The ``wflow`` command line.

Exit codes: 0 success, 2 bad input (one line, no traceback; also an output location that
cannot be used), 1 a failed run, a write the machine could not complete (no space left, an
I/O error) or an internal error, 130 interrupted (Ctrl-C; one line saying what was kept and
how to continue).
"""

from __future__ import annotations

import sys

try:  # Ctrl-C while the command starts (its imports): one line, no traceback
    import argparse
    import errno
    import logging
    import os
    import traceback
    import warnings

    from wflow.cli.commands import (  # noqa: F401  (the commands, and helpers tests use)
        DESCRIPTION,
        EPILOG,
        PLOT_KINDS,
        _experiment_description,
        _experiment_files,
        _file_summary,
        _load_plotting,
        _output_dir,
        _run_config,
        _run_line,
        _summary_table,
        _toml,
        cmd_bench,
        cmd_experiments_list,
        cmd_experiments_run,
        cmd_resume,
        cmd_run,
        cmd_validate,
    )
    from wflow.cli.grids import _grid_arg, cmd_study, cmd_sweep  # noqa: F401
    from wflow.cli.importing import cmd_import_weights  # noqa: F401
    from wflow.cli.inspect import cmd_animate, cmd_info, cmd_plot  # noqa: F401
    from wflow.errors import ConfigError, RunFailedError, WflowError, WriteError
except KeyboardInterrupt:
    print("wflow: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

log = logging.getLogger("wflow")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2)."""

    def error(self, message):
        print(f"{self.prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    from wflow._version import __version__

    p = _Parser(prog="wflow", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"wflow {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level, tracebacks")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="log at INFO level, tracebacks")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)

    def add_run_options(r, output_help):
        r.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                       help="override a key (repeatable)")
        r.add_argument("-o", "--output", metavar="OUT.h5", help=output_help)
        r.add_argument("--overwrite", action="store_true", help="replace a complete result")
        r.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    r = sub.add_parser("run", parents=[common],
                       help="run a configuration (default: the embedded one) into an HDF5 file")
    r.add_argument("config", nargs="?", default=None, help="TOML file (docs/model.md §10 vocabulary)")
    add_run_options(r, "result file (default: output.path)")
    r.set_defaults(func=cmd_run)

    r = sub.add_parser("resume", parents=[common], help="continue a partial result file")
    r.add_argument("file", help="result file (HDF5)")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=cmd_resume)

    r = sub.add_parser("info", parents=[common], help="status, configuration and summary")
    r.add_argument("file", help="result file (HDF5)")
    r.add_argument("--all", action="store_true",
                   help="every configuration key, also those that cannot apply to this run")
    r.set_defaults(func=cmd_info)

    kinds = "\n".join(f"  {k:<14}{v}" for k, v in PLOT_KINDS.items())
    r = sub.add_parser("plot", parents=[common],
                       help="figures of result files (several files: one head_scaling across them)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=f"figure kinds (--kind; default: all of them):\n{kinds}")
    r.add_argument("file", nargs="+", help="result file(s) (HDF5)")
    r.add_argument("--kind", action="append", metavar="KIND",
                   help="figure kind, repeatable: " + ", ".join(PLOT_KINDS))
    r.add_argument("-o", "--output", metavar="DIR", help="output directory")
    r.add_argument("--format", action="append", choices=("png", "pdf", "svg"),
                   help="figure format (repeatable; default png and pdf)")
    r.set_defaults(func=cmd_plot)

    r = sub.add_parser("animate", parents=[common], help="animation of the token snapshots")
    r.add_argument("file", help="result file (HDF5)")
    r.add_argument("-o", "--output", metavar="OUT.gif", help="animation file")
    r.add_argument("--fps", type=int, default=10, help="frames per second (default 10)")
    r.set_defaults(func=cmd_animate)

    r = sub.add_parser("validate", parents=[common], help="check a configuration")
    r.add_argument("config", nargs="?", default=None, help="TOML file (default: the embedded)")
    r.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a key")
    r.add_argument("--calibrate", action="store_true",
                   help="first time a few short runs on this machine (seconds) for the time "
                        "estimate; kept in the cache for later estimates")
    r.set_defaults(func=cmd_validate)

    e = sub.add_parser("experiments", parents=[common],
                       help="the shipped experiment configurations (or those of --dir)")
    esub = e.add_subparsers(dest="experiments_cmd", required=True, parser_class=_Parser)
    r = esub.add_parser("list", parents=[common], help="list the experiment configurations")
    r.add_argument("--dir", metavar="PATH",
                   help="configuration directory (default: the package's wflow/data/experiments)")
    r.set_defaults(func=cmd_experiments_list)
    r = esub.add_parser("run", parents=[common], help="run one experiment")
    r.add_argument("name", help="experiment name (file stem) or file name")
    r.add_argument("--dir", metavar="PATH",
                   help="configuration directory (default: the package's wflow/data/experiments)")
    add_run_options(r, "result file (default: the experiment's output.path)")
    r.set_defaults(func=cmd_experiments_run)

    def add_exec_options(r):
        r.add_argument("--executor", choices=("serial", "dask"), default="serial",
                       help="serial (numba threads on every core) or dask.distributed")
        r.add_argument("--address", help="Dask scheduler address (default: a LocalCluster)")
        r.add_argument("--workers", type=int, help="LocalCluster worker processes")
        r.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    r = sub.add_parser("study", parents=[common],
                       help="run a standard study ('wflow study list' lists them)")
    r.add_argument("name", help="a study name (see 'wflow study list'), or list")
    r.add_argument("-o", "--output", metavar="DIR", help="result directory (default: study_NAME)")
    r.add_argument("--quick", action="store_true",
                   help="the study's quick scale: a reduced grid, short T and few paths that "
                        "still checks its claim in seconds ('wflow study list' says what each "
                        "study's quick scale is); PNG figures only")
    r.add_argument("--paths-per-task", type=int, metavar="K",
                   help="Monte Carlo paths per task (default: all the paths of a run)")
    r.add_argument("--ledger", action="store_true",
                   help="record the exact ledger in every run (diagnostics.ledger = true)")
    r.add_argument("--format", action="append", choices=("png", "pdf", "svg"),
                   help="figure format (repeatable; default png, and pdf without --quick)")
    r.add_argument("--no-plots", action="store_true", help="skip the figures")
    r.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override a key of the study's base configuration (repeatable)")
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
    r.add_argument("--paths-per-task", type=int, metavar="K",
                   help="Monte Carlo paths per task (default: all the paths of a grid point)")
    r.add_argument("--streams", choices=("common", "independent"), default="common",
                   help="common: every grid point uses init.seed (common random numbers); "
                        "independent: a seed per grid point from init.seed and its values")
    add_exec_options(r)
    r.set_defaults(func=cmd_sweep)

    r = sub.add_parser("import-weights", parents=[common],
                       help="map a safetensors checkpoint's attention (GPT-2, BERT, RoBERTa, "
                            "DistilBERT, ALBERT, BART's encoder, OPT) "
                            "onto D_h, V_h, key weights and drift (docs/model.md §5c)")
    r.add_argument("checkpoint", help=".safetensors file, or a folder with model.safetensors "
                                      "and config.json")
    r.add_argument("--arch", help="gpt2, bert, roberta, distilbert, albert, bart or opt (default: "
                                  "config.json's model_type, else the tensor names)")
    r.add_argument("--heads", type=int, help="head count (default: config.json)")
    r.add_argument("--layers", type=int, help="layer count (default: config.json or the "
                                              "layers present)")
    r.add_argument("-o", "--output", metavar="OUT.npz", required=True,
                   help="array file; OUT.toml beside it is the configuration that runs it")
    r.add_argument("--token-ids", metavar="IDS",
                   help="starting tokens of OUT.toml: the model's input embeddings of these "
                        "token ids (comma-separated; default: random ids, or uniform tokens "
                        "when the checkpoint holds no embeddings)")
    r.add_argument("--tokens", type=int, default=16, metavar="N",
                   help="the token count of OUT.toml without --token-ids (default 16, at "
                        "most the model's positions)")
    r.set_defaults(func=cmd_import_weights)

    r = sub.add_parser("bench", parents=[common],
                       help="a quick table: wflow's field evaluation against NumPy (and PyTorch)",
                       description="Time wflow's field evaluation against its dense NumPy twin "
                                   "and PyTorch SDPA (if installed), interleaved, on a few small "
                                   "cases (seconds). The full benchmark suite is benchmarks/ in "
                                   "the repository (docs/performance.md).")
    r.add_argument("--no-torch", action="store_true", help="leave out the PyTorch baseline")
    r.set_defaults(func=cmd_bench)
    return p


#: OS errors of a write: a location the user gave that cannot be used (exit 2), or the machine
#: failing mid-write (no space left, an I/O error; exit 1)
_WRITE_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT,
                 errno.ENOTDIR, errno.EISDIR, errno.EIO, errno.EFBIG}


def _one_line(msg) -> str:
    return " ".join(str(msg).split())


def main(argv=None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt as exc:  # Ctrl-C outside a command's own handling (parsing, ...)
        print(f"wflow: {exc}" if str(exc) else "wflow: interrupted", file=sys.stderr)
        return 130


def _main(argv) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # -h, or a usage error already reported in one line
        return exc.code if isinstance(exc.code, int) else 2
    if args.cmd is None:  # a bare `wflow`: the help
        parser.print_help()
        return 0
    verbose = bool(getattr(args, "verbose", False))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not verbose:  # wflow checks finiteness itself and says where a run failed, in one line
        warnings.filterwarnings("ignore", category=RuntimeWarning,
                                message=r"(overflow|divide by zero|invalid value) encountered")
    hint = "" if verbose else " (run with -v for the traceback)"
    hooks = sys.unraisablehook, sys.excepthook
    if not verbose:
        sys.unraisablehook, sys.excepthook = _quiet_hdf5_cleanup(*hooks)
    rc = 1
    try:
        rc = _dispatch(args, verbose, hint)
        return rc
    finally:
        if not verbose:
            import gc

            gc.collect()  # what h5py has left to release, released while the hooks are quiet
            sys.unraisablehook, sys.excepthook = hooks
        if argv is None and rc and _FAILED_WRITE:
            # a write failed: HDF5 may hold a file it could not close, and at exit it would
            # try again and crash (a segmentation fault in its clean-up). The error line is
            # out; the process (the `wflow` command's own) ends here.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)


#: set when a command ended with a write the machine could not complete
_FAILED_WRITE = []


def _dispatch(args, verbose, hint) -> int:
    try:
        return args.func(args)
    except (ConfigError, FileExistsError, FileNotFoundError, IsADirectoryError) as e:
        print(f"wflow: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # a run's Interrupted says what was kept and what to do
        print(f"wflow: {exc}" if str(exc) else "wflow: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `wflow run | head`: the reader left; not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except WriteError as e:  # the machine failed mid-write: one line naming the file
        print(f"wflow: error: {_one_line(e)}", file=sys.stderr)
        _FAILED_WRITE.append(str(e))
        return 1
    except OSError as e:
        if e.errno not in _WRITE_ERRNOS:
            return _internal(e, verbose, hint)
        from wflow.storage.files import write_error

        err = write_error(e.filename, e)
        print(f"wflow: error: {_one_line(err)}", file=sys.stderr)
        return 2 if isinstance(err, ConfigError) else 1
    except RunFailedError as e:  # a stored failure: nothing to trace
        print(f"wflow: error: {_one_line(e)}", file=sys.stderr)
        return 1
    except WflowError as e:  # NumericalError and other run failures
        if verbose:
            traceback.print_exc()
        print(f"wflow: error: {_one_line(e)}{hint}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - the last line of defence
        return _internal(e, verbose, hint)


def _quiet_hdf5_cleanup(unraisablehook, excepthook):
    """``sys.unraisablehook`` and ``sys.excepthook`` without h5py's reports of the objects it
    fails to release after a failed write (dozens of tracebacks, printed through both hooks;
    the write error itself is reported once, in one line)."""
    if getattr(unraisablehook, "_wflow_quiet", False):
        return unraisablehook, excepthook

    def from_h5py(tb) -> bool:
        return any("h5py" in frame.filename for frame in traceback.extract_tb(tb))

    def unraisable(u):
        if "h5py" in f"{u.object!r} {u.err_msg or ''}" or from_h5py(u.exc_traceback):
            return
        unraisablehook(u)

    def uncaught(kind, value, tb):
        if not from_h5py(tb):
            excepthook(kind, value, tb)

    unraisable._wflow_quiet = True
    return unraisable, uncaught


def _internal(e, verbose, hint) -> int:
    if verbose:
        traceback.print_exc()
    print(f"wflow: internal error: {type(e).__name__}: {_one_line(e)}{hint}", file=sys.stderr)
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
