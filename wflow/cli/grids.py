"""``wflow study`` and ``wflow sweep``: grids of runs into a folder."""

from __future__ import annotations

import sys
from pathlib import Path

from wflow.cli.commands import (
    _AGAIN,
    Interrupted,
    _batched_twice,
    _check_disk,
    _did_you_mean,
    _load_plotting,
    _output_dir,
)
from wflow.errors import ConfigError


def cmd_study(args) -> int:
    from wflow.config import resolve
    from wflow.studies import StudyOptions, available_studies, get_study, run_study

    if args.name == "list":
        studies = available_studies()
        width = max(len(k) for k in studies) + 2
        for k, study in studies.items():
            print(f"{k:<{width}}{study.question}")
            if study.quick:
                print(f"{'':<{width}}  --quick: {study.quick}")
        return 0
    formats = () if args.no_plots else (tuple(args.format) if args.format else None)
    options = StudyOptions(scale="quick" if args.quick else "full", ledger=args.ledger,
                           overrides=tuple(args.set or ()), executor=args.executor,
                           address=args.address, workers=args.workers, progress=not args.quiet,
                           formats=formats, paths_per_task=args.paths_per_task)
    studies = available_studies()
    if args.name not in studies:
        raise ConfigError(f"study {args.name!r}: {_did_you_mean(args.name, studies)}allowed values "
                          f"are {', '.join(studies)} (and list)")
    out = Path(args.output or f"study_{args.name}")
    tasks = get_study(args.name).tasks(options)
    if args.ledger:  # as run_study will set it
        tasks = [(k, {**c, "diagnostics": {**c.get("diagnostics", {}), "ledger": True}})
                 for k, c in tasks]
    _check_disk(_batched_twice([resolve(c) for k, c in tasks if not (out / f"{k}.h5").exists()],
                               args.paths_per_task), out, f"the {len(tasks)} result files", out)
    out = _output_dir(out)
    if formats != ():
        _load_plotting()  # fail before the runs if the figures cannot be drawn
    try:
        result = run_study(args.name, out, options, tasks=tasks)  # the tasks checked above
    except KeyboardInterrupt:
        raise Interrupted(_AGAIN) from None
    print(result.report())
    print(f"results in {out}/ (summary.txt, summary.csv)")
    if options.figure_formats:
        print(f"figures in {out / 'figures'}/")
    return 0


def _grid_arg(text):
    from wflow.config import parse_override

    keys, value = parse_override(text if "=" in text else text + "=")
    if not isinstance(value, list):
        value = [value]
    if not value:
        raise ConfigError(f"--grid {text!r}: the list of values is empty (give at least one "
                          f"value, e.g. {'.'.join(keys)}=[1, 2])")
    return ".".join(keys), value


def cmd_sweep(args) -> int:
    from wflow.config import resolve
    from wflow.sweeps.sweep import check_executor, expand_grid, partial_bytes, run_sweep

    check_executor(args.executor, args.address, args.workers)  # before anything is read
    base = resolve(args.config, args.set or [])
    grid = {}
    for key, values in (_grid_arg(g) for g in (args.grid or [])):
        if key in grid:
            raise ConfigError(f"--grid {key}: given twice; give all its values in one list "
                              f"(--grid '{key}=[v1, v2, ...]')")
        grid[key] = values
    tasks = expand_grid(base, grid, name=args.name, streams=args.streams)
    out = Path(args.output or "sweep")
    todo = [(name, c) for name, c in tasks if args.overwrite or not (out / f"{name}.h5").exists()]
    # the partial files of an interrupted sweep are continued in place: their space counts
    held = partial_bytes(out, [name for name, _ in todo])
    _check_disk(_batched_twice([c for _, c in todo], args.paths_per_task), out,
                f"the {len(tasks)} result files", out, held=held)
    try:
        rep = run_sweep(tasks, _output_dir(out), executor=args.executor,
                        address=args.address,
                        n_workers=args.workers, overwrite=args.overwrite, progress=not args.quiet,
                        paths_per_task=args.paths_per_task, keys=list(grid))
    except KeyboardInterrupt:
        raise Interrupted(_AGAIN) from None
    for r in rep.rows:
        print(f"{r['name']:<40}{r['action']:<20}{r['elapsed']:>9.1f} s  {r['worker']}")
    print(f"{rep.describe()}; summary: {rep.summary_csv}")
    if rep.failed:
        for name, err in rep.failed.items():
            print(f"wflow: error: sweep point {name} failed: {err}", file=sys.stderr)
        return 1
    return 0
