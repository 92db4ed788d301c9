"""Run benchmark suites and save the result: ``python -m benchmarks.run [--suite NAME ...]``.

The result (:mod:`benchmarks.results`) is written to ``benchmarks/results/<date>-<commit>.json``
with the machine, its CPU flags and the load averages at the start and the end of the run; the
table is printed.
``python -m benchmarks.render`` puts the newest result into ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import sys
import time

from benchmarks import results
from benchmarks.suites import DEFAULT_SUITES, SUITES

DESCRIPTION = "Run benchmark suites, save the result as JSON and print its table."


def build_parser():
    """The command line of :func:`main`."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=DESCRIPTION)
    p.add_argument("--suite", action="append", choices=list(SUITES), metavar="NAME",
                   help=f"a suite to run (repeatable; default: {', '.join(DEFAULT_SUITES)}; "
                        f"also: {', '.join(s for s in SUITES if s not in DEFAULT_SUITES)})")
    p.add_argument("--quick", action="store_true",
                   help="small cases (seconds; checks that everything runs, says little)")
    p.add_argument("--note", default="", help="a note saved with the result (e.g. the machine's state)")
    p.add_argument("--out", default=str(results.RESULTS_DIR),
                   help="directory of the result file (default: benchmarks/results)")
    p.add_argument("--no-save", action="store_true", help="print the table only")
    return p


def run(suites=DEFAULT_SUITES, quick=False, note="", progress=None):
    """Run benchmark suites in order.

    Parameters
    ----------
    suites : sequence of str
        Names of :data:`benchmarks.suites.SUITES`.
    quick : bool
        Small cases.
    note : str
        Saved with the result.
    progress : callable, optional
        Receives a line after each suite.

    Returns
    -------
    dict
        The result (:data:`benchmarks.results.SCHEMA`), not yet saved.
    """
    res = results.new_result(suites, note)
    t0 = time.perf_counter()
    for name in suites:
        t1 = time.perf_counter()
        rows = SUITES[name](quick=quick)
        res["rows"] += rows
        if progress is not None:
            progress(f"{name}: {len(rows)} rows in {time.perf_counter() - t1:.1f} s")
    res["seconds"] = time.perf_counter() - t0
    res["load"]["after"] = results.loadavg()
    return res


def main(argv=None):
    """Command-line entry point."""
    args = build_parser().parse_args(argv)
    suites = tuple(args.suite or DEFAULT_SUITES)
    res = run(suites, args.quick, args.note, progress=lambda m: print(m, file=sys.stderr))
    print(results.render_table(res))
    if not args.no_save:
        print(f"\nsaved {results.save(res, args.out)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
