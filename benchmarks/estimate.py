r"""The ``estimate`` suite: ``wflow validate``'s time estimate against the measured stepping time.

The cost model (:mod:`wflow.engine.timing`) is calibrated on this machine
(:func:`wflow.engine.timing.calibrate`, the runs of ``wflow validate --calibrate``), then each
case of the grid n ∈ :data:`NS` × d ∈ :data:`DS` (H = 10, P = 2, the embedded default
otherwise) and the embedded default itself is run in this process, warm (a one-step run of
the same configuration first) in a fresh process, as ``wflow run`` runs, for a number of
steps chosen to take about :data:`TARGET_S` seconds. A row's ratio is the factor between the
estimate e and the measured time m, max(e/m, m/e); the goal is ≤ 2.

``python -m benchmarks.estimate --csv FILE`` writes the calibration and the grid's timings
as a table of :class:`wflow.engine.timing.Sizes` and seconds (the form of
``tests/data/timings.csv``).
"""

from __future__ import annotations

import argparse
import csv
import sys

from benchmarks.results import row

#: The grid of the suite (tokens, dimensions).
NS = (16, 200, 2000)
DS = (2, 3, 8, 64)
QUICK_NS = (16, 64)
QUICK_DS = (3, 8)
#: Seconds of stepping aimed at per case.
TARGET_S = 2.0
DT = 0.005


def _overrides(n, d, steps):
    return [f"model.n={n}", f"model.d={d}", f"solver.T={steps * DT:.6g}", f"solver.dt={DT}",
            "output.store_tokens=false"]


#: A fresh process times one case: a one-step run first (its kernels loaded or compiled),
#: then the run; prints the stepping seconds.
_CHILD = (
    "import json, sys\n"
    "from wflow.engine.run import Simulation\n"
    "sets = json.loads(sys.argv[1])\n"
    "Simulation(None, sets + ['solver.T=%g']).run()\n"
    "sim = Simulation(None, sets)\n"
    "sim.run()\n"
    "print(sim.elapsed)\n" % DT
)


def _time_case(sets):
    """A calibration run in this process (as ``wflow validate --calibrate``)."""
    from wflow.engine.run import Simulation

    sim = Simulation(None, list(sets))
    sim.run()
    return float(sim.elapsed), sim.config


def _measure(sets):
    """The stepping seconds of the run of ``sets`` (overrides of the embedded default), warm,
    in a fresh process (as ``wflow run``: no thread pools left by other cases), and its
    validated configuration."""
    import json
    import subprocess

    from wflow.config import resolve

    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(list(sets))],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1]), resolve(None, list(sets))


def _steps_for(n, d, target):
    """Steps of the case (n, d) estimated to take ``target`` seconds (2 to 400)."""
    from wflow.config import resolve
    from wflow.engine import timing

    per = timing.estimate(resolve(None, _overrides(n, d, 100))).seconds / 100
    return int(min(400, max(2, round(target / max(per, 1e-9)))))


def cases(quick=False, target=TARGET_S):
    """``(label, overrides)`` of the suite: the embedded default, then the grid."""
    out = [("default run", ["output.store_tokens=false"])]
    for d in QUICK_DS if quick else DS:
        for n in QUICK_NS if quick else NS:
            out.append((f"n={n} d={d}", _overrides(n, d, _steps_for(n, d, target))))
    return out


def timings(quick=False, calibrate=True, target=TARGET_S, progress=None):
    """Calibrate (unless ``calibrate`` is false), then ``(label, sizes, estimate, measured)``
    of every case."""
    from wflow.engine import timing

    if calibrate:
        timing.calibrate(_time_case, progress=progress)
    out = []
    for label, sets in cases(quick, target):
        sec, cfg = _measure(sets)
        est = timing.estimate(cfg)
        z = timing.sizes(cfg)
        out.append((label, z, est, sec))
        if progress is not None:
            progress(f"{label:<14} {z.route:<13} steps={z.steps}: estimate "
                     f"{est.seconds:.3g} s, measured {sec:.3g} s")
    return out


def estimate_suite(quick=False, calibrate=True, target=TARGET_S):
    """The rows of the suite: the factor between the estimate and the measured stepping
    time, max(e/m, m/e), goal ≤ 2."""
    rows = []
    target = 0.3 if quick else target
    for label, z, est, sec in timings(quick, calibrate, target):
        ratio = est.seconds / sec
        rows.append(row("estimate", f"{label} ({z.route}, {z.steps} steps)",
                        "time: max(estimate ÷ measured, measured ÷ estimate)",
                        max(ratio, 1 / ratio), goal="≤ 2", seconds=sec,
                        data={"estimate_s": est.seconds, "estimate_over_measured": ratio,
                              "rough": est.rough, "how": est.how, **z._asdict()}))
    return rows


def write_csv(path, rows, calibration):
    """The timings as a table: ``source`` (calibration, check), the sizes, ``seconds``."""
    from wflow.engine.timing import Sizes

    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["source", "case", *Sizes._fields, "seconds"])
        for name, z, sec in calibration:
            w.writerow(["calibration", name, *z, f"{sec:.6g}"])
        for label, z, _, sec in rows:
            w.writerow(["check", label, *z, f"{sec:.6g}"])


def main(argv=None):
    """Command-line entry point."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.estimate", description=__doc__
                                .split("\n")[0])
    p.add_argument("--csv", help="write the timings to this file")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    from wflow.engine import timing

    def say(line):
        print(line, file=sys.stderr, flush=True)

    cal = timing.calibrate(_time_case, progress=say)
    rows = timings(args.quick, calibrate=False, progress=say)
    for label, z, est, sec in rows:
        print(f"{label:<14} {z.route:<13} {z.steps:>4} steps  estimate {est.seconds:8.3g} s  "
              f"measured {sec:8.3g} s  ratio {est.seconds / sec:5.2f}")
    if args.csv:
        write_csv(args.csv, rows, cal)
    return 0


if __name__ == "__main__":
    sys.exit(main())
