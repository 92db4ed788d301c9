"""The ``wflow`` command line.

Exit codes: 0 success, 2 bad input (one line, no traceback), 1 internal error.
"""

from __future__ import annotations

import argparse
import logging
import sys

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


def cmd_run(args) -> int:
    from .run import Simulation

    sim = Simulation(args.config, args.set or [])
    res = sim.run(progress=not args.quiet)
    c = sim.config
    print(
        f"wflow run: n={sim.n} d={sim.d} H={sim.H} paths={sim.P} "
        f"{c['model']['normalization']}/{c['model']['sign']} process={c['weights']['process']} "
        f"method={c['solver']['method']} dt={sim.dt:g} T={c['solver']['T']:g} "
        f"steps={sim.nsteps} in {sim.elapsed:.2f} s"
    )
    print(_summary_table(res))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="wflow", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a configuration (default: the embedded one)")
    r.add_argument("config", nargs="?", default=None, help="TOML file (SPEC §10 vocabulary)")
    r.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a key")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=cmd_run)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (ConfigError, FileExistsError) as e:
        print(f"wflow: error: {e}", file=sys.stderr)
        return 2
    except WflowError as e:
        print(f"wflow: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("wflow: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
