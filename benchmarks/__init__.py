"""wflow's benchmark suite (not installed with the package; run from the repository root).

Every number it reports is a ratio between implementations timed in the same run,
interleaved: wflow's fused pass against its dense NumPy twin and PyTorch SDPA, the kernel's
routes against each other, a step against the NumPy backend, a run beside busy processes
against the same run alone. A shared machine's drift then reaches both sides of a ratio.

A plain script rather than asv (which numpy and scipy use): asv times each benchmark on its
own, minutes apart, and stores absolute times per commit, where wflow's numbers are ratios of
implementations called in alternation within one run; its per-commit environments add
nothing for a package tested from its checkout. The result is one JSON file per run with the
machine described, and one table.

Run (a few minutes; ``--quick`` for seconds)::

    python -m benchmarks.run                    # the default suites, saved to benchmarks/results/
    python -m benchmarks.run --suite contention # minutes: a run beside busy processes
    python -m benchmarks.render                 # the newest result into docs/performance.md

:mod:`benchmarks.suites` holds the suites, :mod:`benchmarks.contention` the shared-machine
one, :mod:`benchmarks.results` the machine description, the JSON file and the table, and
:mod:`benchmarks.internals` every access to wflow's private names.
"""
