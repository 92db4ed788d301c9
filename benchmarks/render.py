"""Write a saved result into ``docs/performance.md``: ``python -m benchmarks.render [FILE]``.

Without FILE, the newest result of ``benchmarks/results/`` (by its date) of each section of the
page: the default suites and the ``scale`` suite alone (:data:`benchmarks.results.MARKERS`).
A table goes between the markers of its section.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks import results

DESCRIPTION = "Write a saved benchmark result into docs/performance.md."


def main(argv=None):
    """Command-line entry point."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.render", description=DESCRIPTION)
    p.add_argument("file", nargs="?",
                   help="a result file (default: the newest saved one of each section)")
    p.add_argument("--doc", default=str(results.DOC), help="the page (default: docs/performance.md)")
    p.add_argument("--print", action="store_true", help="print the table, write nothing")
    args = p.parse_args(argv)
    paths = ([Path(args.file)] if args.file else
             [q for q in (results.latest(of=s) for s in results.MARKERS) if q is not None])
    if not paths:
        print(f"no saved result in {results.RESULTS_DIR}", file=sys.stderr)
        return 2
    for path in paths:
        res = results.load(path)
        label = f"`{path.name}`"
        if args.print:
            print(results.render_table(res, label))
        else:
            print(f"wrote {results.write_doc(res, args.doc, label)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
