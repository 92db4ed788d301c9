"""The commands that read result files: ``wflow info``, ``wflow plot``, ``wflow animate``
(parsed arguments in, exit code out)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from wflow.cli.commands import (
    _adaptive_counts,
    _did_you_mean,
    _file_summary,
    _load_plotting,
    _output_dir,
    _toml,
)
from wflow.errors import ConfigError, WflowError


# ---------------------------------------------------------------------- info
def _info_status(info, holder) -> str:
    """The status line of ``wflow info``: complete, failed, live (a writer holds the lock) or
    interrupted, with what to do."""
    a, status, path = info["attrs"], info["status"], info["path"]
    if info["config"].get("solver", {}).get("adaptive"):
        return _info_status_adaptive(info, holder)
    if status == "failed":
        step = a.get("failed_step")
        return "failed" + (f" at step {step} of {info['nsteps']}" if step is not None
                           and step >= 0 else "") + " (nothing to resume)"
    if status == "complete":
        return status
    ck = info["checkpoint_step"]
    if holder is not None:
        who = f"pid {holder}" if holder > 0 else "another process"
        where = "" if ck is None else f", last checkpoint at step {ck} of {info['nsteps']}"
        return f"live (written by {who}{where})"
    if ck is None:
        return (f"interrupted before its first checkpoint (resume with `wflow resume {path}`: "
                f"it runs again from step 0)")
    return f"interrupted at step {ck} of {info['nsteps']} (resume with `wflow resume {path}`)"


def _info_status_adaptive(info, holder) -> str:
    """The status line of an adaptive run: its checkpoints count rounds of the adaptive loop
    [model §6d], not steps of a grid."""
    status, path, ck = info["status"], info["path"], info["checkpoint_step"]
    if status in ("complete", "failed"):
        return status + (" (nothing to resume)" if status == "failed" else "")
    where = "" if ck is None else f"after round {ck} of the adaptive loop"
    if holder is not None:
        who = f"pid {holder}" if holder > 0 else "another process"
        return f"live (written by {who}" + (f", last checkpoint {where})" if where else ")")
    if ck is None:
        return (f"interrupted before its first checkpoint (resume with `wflow resume {path}`: "
                f"it runs again from t = 0)")
    return f"interrupted, checkpoint {where} (resume with `wflow resume {path}`)"


def _info_steps(info) -> str:
    """The ``steps`` row of ``wflow info``: the grid's steps, or what an adaptive run did
    (from its last record; none before its records are written)."""
    cfg = info["config"]
    if not cfg.get("solver", {}).get("adaptive"):
        return str(info["nsteps"])
    from wflow.storage.io import read

    names = ("steps_accepted", "steps_rejected", "field_evals", "event_time")
    try:
        _, arrays, _ = read(info["path"], tokens=False)
    except (OSError, WflowError, KeyError):
        arrays = {}
    last = {k: np.asarray(arrays[k])[-1] for k in names if k in arrays and len(arrays[k])}
    if not last:
        return "adaptive (no records yet)"
    return "adaptive " + _adaptive_counts(cfg, last)


def cmd_info(args) -> int:
    from wflow.storage.io import inspect, lock_holder

    info = inspect(args.file)
    info["path"] = Path(info["path"]).resolve()  # the real location, whatever the argument
    a = info["attrs"]
    status = _info_status(info, lock_holder(args.file))
    stored = info["config"].get("output", {}).get("path")
    moved = stored is not None and Path(stored).resolve() != info["path"]
    if moved:  # the configuration shows where the file is, not where it was first written
        info["config"] = {**info["config"],
                          "output": {**info["config"]["output"], "path": str(info["path"])}}
    rows = [
        ("file", str(info["path"])),
        ("status", status),
        ("format", a.get("format")),
        ("wflow_version", a.get("wflow_version")),
        ("created", a.get("created")),
        ("finished", a.get("finished", "-")),
        ("config_hash", a.get("config_hash")),
        ("seed", a.get("seed")),
        ("steps", _info_steps(info)),
        ("records", f"{info['n_records']} of {a.get('n_records_expected', '?')}"),
        ("resumes", a.get("resumes", 0)),
        ("machine", json.dumps(a.get("machine"))),
        ("versions", json.dumps(a.get("versions"))),
    ]
    if isinstance(a.get("git"), dict):
        g = a["git"]
        rows.append(("git", f"{g.get('commit')}" + (" (dirty)" if g.get("dirty") else "")))
    if "error" in a:
        rows.append(("error", a["error"]))
    for k, v in rows:
        print(f"{k:<15}{v}")
    print("datasets")
    for name, shape in info["datasets"].items():
        print(f"  {name:<28}{shape}")
    print()
    shown, hidden = (info["config"], []) if args.all else _applicable(info["config"])
    print("# configuration" + (" (every key)" if args.all else ""))
    if moved:
        print(f"# output.path: where the file is (its configuration says {stored!r})")
    print(_toml(shown))
    if hidden:
        print(f"# the keys that apply to this run; {len(hidden)} that cannot apply (e.g. "
              f"{', '.join(hidden[:2])}) are left out: `wflow info --all` shows them")
    table = _file_summary(info["path"], complete=info["status"] == "complete")
    if table:
        print()
        print(table)
    return 0


def _applicable(cfg: dict) -> tuple[dict, list[str]]:
    """``cfg`` without the keys that cannot apply to its run (a key's ``applies`` conditions
    of the parameter table [model §10], e.g. ``[density]`` for particles, ``weights.layers``
    under OU), and the dotted names of the keys left out. A section left empty is dropped."""
    from wflow.config import schema

    hidden = []
    for p in schema.params():
        section, name = p.key.split(".")
        if name not in cfg.get(section, {}) or not p.applies:
            continue
        try:
            applies = all(c.holds(cfg) for c in p.applies)
        except (KeyError, TypeError):  # a file of another version: show the key
            applies = True
        if not applies:
            hidden.append(p.key)
    shown = {}
    for section, keys in cfg.items():
        if not isinstance(keys, dict):
            shown[section] = keys
            continue
        kept = {k: v for k, v in keys.items() if f"{section}.{k}" not in hidden}
        if kept:
            shown[section] = kept
    return shown, hidden


# ---------------------------------------------------------------------- plots
def cmd_plot(args) -> int:
    """Draw the kinds asked for (``--kind``), or every kind that applies to the files: a kind
    whose inputs a file lacks (token snapshots, the ledger, a density) is skipped with one
    line saying why; exit 2 only when an asked-for kind cannot be drawn or nothing can."""
    from wflow.storage.io import inspect

    files, infos, tables = [], [], []
    for f in map(Path, args.file):  # a bad file is bad input (exit 2) before any import
        try:
            infos.append(inspect(f))
            files.append(f)
        except ConfigError:
            if not _is_summary_table(f):
                raise
            tables.append(f)  # `wflow plot sweep/*.h5` takes the sweep's summary beside its runs
    if not files:
        raise ConfigError(f"{', '.join(map(str, tables))}: the summary table of a sweep, not a "
                          f"run: nothing to plot (give the runs' .h5 files)")
    for f in tables:
        print(f"wflow plot: skipped {f}: the summary table of a sweep, not a run (the .csv "
              f"beside it holds the same columns)", file=sys.stderr)
    plotting = _load_plotting()
    asked = bool(args.kind)
    kinds = list(args.kind or plotting.KINDS)
    allowed = list(plotting.KINDS)
    for k in kinds:
        if k not in allowed:
            raise ConfigError(f"--kind {k!r}: {_did_you_mean(k, allowed)}allowed values are "
                              + ", ".join(repr(x) for x in allowed))
    for f, info in zip(files, infos):
        if info["n_records"] == 0:
            raise ConfigError(f"{f}: no records to plot")
    if len(files) == 1:
        outdir = Path(args.output) if args.output else files[0].parent / f"{files[0].stem}_plots"
    else:
        outdir = Path(args.output) if args.output else Path("plots")
    existed = outdir.exists()
    _output_dir(outdir)
    written = []
    try:
        written, skipped = _draw(plotting, files, kinds, asked, outdir, args.format)
    finally:
        if not existed and not written and not any(outdir.iterdir()):
            outdir.rmdir()  # made for this command and still empty: leave nothing behind
    for p in written:
        print(p)
    for reason in skipped:
        print(f"wflow plot: skipped {reason}", file=sys.stderr)
    if not written:
        raise ConfigError(f"{', '.join(map(str, files))}: nothing to plot")
    return 0


def _is_summary_table(path) -> bool:
    """Whether ``path`` is a table of columns written by wflow (``sweep_summary.h5``, also in
    a study's folder): not a run, nothing to plot."""
    from wflow.storage.tables import read_columns

    try:
        read_columns(path)
    except Exception:  # noqa: BLE001 - not a table: the result file's own error stands
        return False
    return True


def _draw(plotting, files, kinds, asked, outdir, formats):
    """The figures of ``cmd_plot``: (paths written, reasons for the kinds skipped)."""
    not_drawable = getattr(plotting, "PlotInputError", ValueError)
    written, skipped = [], []
    formats = tuple(formats) if formats else ("png", "pdf")
    if "head_scaling" in kinds:
        if len(files) > 1:  # one figure across the runs
            written += plotting.plot_head_scaling([str(f) for f in files], outdir,
                                                  formats=formats)
        elif not asked:
            skipped.append("head_scaling: needs the runs of several head counts "
                           "(wflow plot RUN1.h5 RUN2.h5 ...)")
        if len(files) > 1 or not asked:
            kinds = [k for k in kinds if k != "head_scaling"]
    for f in files:
        sub = outdir if len(files) == 1 else outdir / f.stem  # created by the first figure
        for k in kinds:
            try:
                written += plotting.plot(f, k, sub, formats=formats) or []
            except not_drawable as exc:
                if asked:
                    raise ConfigError(f"{f}: {exc}") from None
                why = str(exc).removeprefix(f"{k}:").strip()
                skipped.append(f"{k}{'' if len(files) == 1 else f' of {f.name}'}: {why}")
    return written, skipped


def cmd_animate(args) -> int:
    from wflow.storage.io import inspect

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
    _output_dir(out.parent)
    print(plotting.animate(path, out, args.fps))
    return 0
