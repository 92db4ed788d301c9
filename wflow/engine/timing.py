r"""How long a run will take, before it runs: a cost model of terms keyed by kernel route.

The stepping time of a run is modelled as a sum of terms, each a size of the run times
seconds per unit,

.. math::

    t \approx \sum_k c_k\, w_k(\text{cfg}),

with the sizes (:class:`Sizes`) N the steps, :math:`E = N (s + \ell)` the field
evaluations per path (:math:`s` the method's stages,
:func:`wflow.stepping.registry.stepper_stages`; :math:`\ell = 1` with the exact ledger's
second evaluation), P paths, H heads, n tokens (the cells of a density run), d the dimension,
R records and m = min(n, ``diagnostics.max_pairwise_n``) the tokens of the pair diagnostics.
The terms of every run (:data:`FIXED_TERMS`): :math:`c_{\text{run}}`,
:math:`c_{\text{step}} N`, :math:`c_{\text{head}} E P H`, :math:`c_{\text{head·d³}} E P H d^3`
(the spectral norms and the weight step), :math:`c_{\text{row}} E P H n d` (the per-row
combine), :math:`c_{\text{record}} R P` and, with the clustering diagnostics,
:math:`c_{\text{record·m²}} R P m^2`. The terms of the route r the run will take
(:data:`ROUTE_TERMS`; r as :func:`wflow.kernels.plan_shapes` chooses it, ``numpy`` for the
NumPy backend): a pass's fixed cost :math:`c_{\text{eval}/r} E`, the pairs
:math:`c_{\text{pairs}/r} E P H n^2` and, for routes whose work per pair grows with d,
:math:`c_{\text{pairs·d}/r} E P H n^2 d`. A new route adds its terms with
:func:`register_route_terms`.

The coefficients :math:`c_k` are fitted (:func:`fit`: non-negative least squares on the
relative error, pulled weakly toward the rough :data:`PRIORS`) from the timings this machine
has seen: every complete ``wflow run`` (:func:`record`) and the short runs of
``wflow validate --calibrate`` (:func:`calibrate`), kept per machine and CPU in
:func:`costs_file`. A term no timing has measured (no run where it made a tenth of the time)
keeps its rough prior; an estimate mostly made of such terms says it is rough. Nothing is
compiled or run to make an estimate.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from wflow.errors import WriteError
from wflow.stepping.registry import stepper_stages
from wflow.storage.files import replacing

__all__ = ["Sizes", "Term", "sizes", "terms", "columns", "fit", "Estimate", "estimate",
           "record", "calibrate", "costs_file", "machine_key", "register_route_terms",
           "ROUTE_TERMS", "FIXED_TERMS", "PRIORS", "human_seconds", "CALIBRATION_CASES"]


class Sizes(NamedTuple):
    """The sizes of a run the cost terms are functions of (module notes)."""

    route: str       #: the kernel route (:class:`wflow.kernels.Route` value, or ``"numpy"``)
    steps: int       #: N, steps (adaptive runs: T/dt, the first step's grid)
    evals: int       #: E = N (s + ℓ), field evaluations per path
    paths: int       #: P
    heads: int       #: H
    n: int           #: tokens (cells of a density run)
    d: int           #: dimension
    records: int     #: R
    pair_n: int      #: m, tokens of the pair diagnostics per record (0: none)


class Term(NamedTuple):
    """One term of the model: ``size(Sizes)`` units, :data:`PRIORS` [name] seconds each
    until fitted."""

    name: str
    size: Callable[[Sizes], float]


def _pairs(z: Sizes) -> float:
    return float(z.evals) * z.paths * z.heads * z.n * z.n


#: The terms of every run (the fixed part but the route's own per-evaluation cost).
FIXED_TERMS = (
    Term("run", lambda z: 1.0),
    Term("step", lambda z: float(z.steps)),
    Term("head", lambda z: float(z.evals) * z.paths * z.heads),
    Term("head·d³", lambda z: float(z.evals) * z.paths * z.heads * z.d ** 3),
    Term("row", lambda z: float(z.evals) * z.paths * z.heads * z.n * z.d),
    Term("record", lambda z: float(z.records) * z.paths),
    Term("record·m²", lambda z: float(z.records) * z.paths * z.pair_n ** 2),
)


def route_terms(family: str, with_d: bool, evals: str | None = None) -> tuple[Term, ...]:
    """The terms of a route: ``eval/<evals>`` (E: a pass's fixed cost, its threads' start
    and join; ``evals`` defaults to ``family``), ``pairs/<family>`` (E P H n²) and, with
    ``with_d``, ``pairs·d/<family>`` (E P H n² d)."""
    out = (Term(f"eval/{evals or family}", lambda z: float(z.evals)),
           Term(f"pairs/{family}", _pairs))
    if with_d:
        out += (Term(f"pairs·d/{family}", lambda z: _pairs(z) * z.d),)
    return out


#: The terms of each route: its pass's fixed cost per evaluation, E P H n² (and E P H n² d
#: where the pass's work per pair grows with d). The three forms of the symmetric pass share
#: their terms but for the pairs of several row bands.
ROUTE_TERMS: dict[str, tuple[Term, ...]] = {
    "sym3": route_terms("sym3", False),
    "sym3-chain": route_terms("sym3", False),
    "sym3-bands": route_terms("sym3-bands", False, evals="sym3"),
    "rows32": route_terms("rows32", False),
    "rows": route_terms("rows", True),
    "blas": route_terms("blas", True),
    "blas-combine": route_terms("blas-combine", True),
    "numpy": route_terms("numpy", True),
    # the spectral summation [model §2s]: its transforms cost per point and head, its
    # quadrature grid per head (O(L⁴) on S²; the degree L of a run's β‖D‖ is folded into the
    # coefficients), nothing per pair
    "spectral": (Term("eval/spectral", lambda z: float(z.evals)),
                 Term("heads/spectral", lambda z: float(z.evals) * z.paths * z.heads),
                 Term("points/spectral", lambda z: float(z.evals) * z.paths * z.heads * z.n)),
}

#: Seconds per unit of each term before any timing on this machine: a loaded 2-core x86-64
#: machine (the order of magnitude only).
PRIORS: dict[str, float] = {
    "run": 0.05, "step": 5e-4, "head": 5e-6, "head·d³": 5e-9, "row": 5e-9,
    "record": 2e-3, "record·m²": 2e-8,
    "eval/sym3": 5e-4, "pairs/sym3": 3e-9, "pairs/sym3-bands": 3e-9,
    "eval/rows32": 5e-4, "pairs/rows32": 3e-9,
    "eval/rows": 1e-3, "pairs/rows": 6e-9, "pairs·d/rows": 1e-9,
    "eval/blas": 1e-3, "pairs/blas": 6e-9, "pairs·d/blas": 4e-10,
    "eval/blas-combine": 1e-3, "pairs/blas-combine": 4e-9, "pairs·d/blas-combine": 4e-10,
    "eval/numpy": 1e-3, "pairs/numpy": 1e-7, "pairs·d/numpy": 1e-8,
    "eval/spectral": 2e-2, "heads/spectral": 2e-2, "points/spectral": 2e-6,
}

#: Short runs of ``wflow validate --calibrate`` (overrides of the embedded default, H = 10,
#: P = 2): each route's fixed cost (small n) and pair terms (a few steps at a larger n).
CALIBRATION_CASES: dict[str, tuple[str, ...]] = {
    "fixed": ("model.n=16", "solver.T=0.5"),
    "fixed-1": ("model.n=16", "model.heads=1", "solver.paths=1", "solver.T=0.5"),
    "heads": ("model.n=16", "model.heads=40", "solver.paths=4", "solver.T=0.25"),
    "records": ("model.n=400", "model.heads=1", "solver.paths=1", "solver.T=0.2",
                "solver.record_every=1"),
    "sym3": ("model.n=600", "model.heads=4", "solver.T=0.1"),
    "sym3-bands": ("model.n=1536", "model.heads=4", "solver.paths=1", "solver.T=0.04"),
    "rows-fixed": ("model.d=2", "model.n=16", "solver.T=0.5"),
    "rows-d2": ("model.d=2", "model.n=400", "model.heads=4", "solver.T=0.05"),
    "rows-d6": ("model.d=6", "model.n=400", "model.heads=4", "solver.T=0.05"),
    "heads-d64": ("model.d=64", "model.n=16", "model.heads=8", "solver.paths=1",
                  "solver.T=0.05"),
    "blas-fixed": ("model.d=8", "model.n=200", "solver.T=0.1"),
    "blas": ("model.d=16", "model.n=1000", "model.heads=2", "solver.paths=1",
             "solver.T=0.02"),
    "blas-combine-fixed": ("model.d=64", "model.n=200", "model.heads=2", "solver.paths=1",
                           "solver.T=0.05"),
    "blas-combine": ("model.d=64", "model.n=1000", "model.heads=2", "solver.paths=1",
                     "solver.T=0.01"),
    # the spectral summation (with its optional extra only): the grid per head, the points
    "spectral-heads": ("model.n=500", "model.heads=10", "solver.paths=1", "solver.T=0.01",
                       "solver.summation='spectral'"),
    "spectral": ("model.n=50000", "model.heads=2", "solver.paths=1", "solver.T=0.01",
                 "solver.summation='spectral'"),
}
#: Each calibration case runs this many times; the median is kept (a loaded machine).
CALIBRATION_REPEATS = 3


def register_route_terms(route: str, pair_terms, prior: dict[str, float],
                         calibration: tuple[str, ...] | None = None) -> None:
    """Add a route to the model: its pair ``Term``\\ s (functions of :class:`Sizes`), their
    rough seconds per unit ``prior`` (every term named) and a calibration run (overrides of
    the embedded default that take the route)."""
    pair_terms = tuple(pair_terms)
    missing = [t.name for t in pair_terms if t.name not in prior and t.name not in PRIORS]
    if missing:
        raise ValueError(f"register_route_terms({route!r}): no prior for {missing}")
    ROUTE_TERMS[route] = pair_terms
    PRIORS.update(prior)
    if calibration is not None:
        CALIBRATION_CASES[route] = tuple(calibration)


def terms(route: str) -> tuple[Term, ...]:
    """The terms of a run on ``route``: :data:`FIXED_TERMS` and the route's own."""
    return FIXED_TERMS + ROUTE_TERMS.get(route, ROUTE_TERMS["rows"])


def _names() -> list[str]:
    """Every term's name, once, in a fixed order."""
    out = [t.name for t in FIXED_TERMS]
    for ts in ROUTE_TERMS.values():
        out += [t.name for t in ts if t.name not in out]
    return out


def columns(z: Sizes, names: list[str] | None = None) -> np.ndarray:
    """The term sizes :math:`w_k` of ``z`` over ``names`` (default: every term), 0 for the
    terms of other routes."""
    names = _names() if names is None else names
    own = {t.name: t.size(z) for t in terms(z.route)}
    return np.array([own.get(k, 0.0) for k in names])


def _route(cfg) -> str:
    m, s = cfg["model"], cfg["solver"]
    if s["backend"] == "numpy":
        return "numpy"
    from wflow.model.spectral import run_summation

    if run_summation(cfg) == "spectral":
        return "spectral"
    from wflow.kernels import get_num_threads, plan_shapes

    n = int(cfg["density"]["cells"]) if s.get("representation") == "density" else int(m["n"])
    plan = plan_shapes(n, int(m["d"]), int(m["heads"]), int(s["paths"]),
                       single=s.get("precision") == "float32", fast_exp=s.get("exp") == "fast",
                       weighted=s.get("representation") == "density",
                       causal=m.get("mask") == "causal",
                       threads=get_num_threads(),
                       symmetric=m.get("interaction", "symmetric") == "symmetric")
    return plan.route.value


def sizes(cfg) -> Sizes:
    """The :class:`Sizes` of the validated configuration ``cfg``."""
    from wflow.engine import features, memory

    m, s, dg = cfg["model"], cfg["solver"], cfg["diagnostics"]
    f = features.of(cfg)
    steps = round(float(s["T"]) / float(s["dt"]))
    n = int(cfg["density"]["cells"]) if f.density else int(m["n"])
    extra = 1 if (f.ledger and f.energy) else 0
    return Sizes(route=_route(cfg), steps=steps,
                 evals=steps * (stepper_stages(s["method"]) + extra),
                 paths=int(s["paths"]), heads=int(m["heads"]), n=n, d=int(m["d"]),
                 records=int(memory.n_records(cfg)),
                 pair_n=min(n, int(dg["max_pairwise_n"])) if f.clustering else 0)


# ---------------------------------------------------------------------- the timings seen
def costs_file() -> Path:
    """Where the timings are kept: ``$WFLOW_CACHE_DIR/costs.json``, else
    ``$XDG_CACHE_HOME/wflow/costs.json`` (default ``~/.cache/wflow/costs.json``)."""
    root = os.environ.get("WFLOW_CACHE_DIR")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wflow"
    return Path(root) / "costs.json"


def machine_key() -> str:
    """This machine and CPU: ``"x86_64/<CPU model>/<logical CPUs>"``."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()}/{cpu or 'cpu'}/{os.cpu_count()}"


def _load() -> dict:
    try:
        data = json.loads(costs_file().read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(data) -> None:
    path = costs_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path, sync=False) as tmp:
            tmp.write_text(json.dumps(data, indent=0, sort_keys=True), "utf-8")
    except (OSError, WriteError):
        pass


#: Runs shorter than this (seconds) are not kept (timer noise).
MIN_RECORDED_S = 0.02
#: The runs kept per machine (the newest); calibration rows are kept apart.
KEEP_RUNS = 64


def _timings() -> list[tuple[Sizes, float]]:
    entry = _load().get(machine_key(), {})
    out = []
    for row in list(entry.get("calibration", [])) + list(entry.get("runs", [])):
        try:
            out.append((Sizes(**row["sizes"]), float(row["seconds"])))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _store(rows: list[tuple[Sizes, float]], kind: str) -> None:
    data = _load()
    entry = data.setdefault(machine_key(), {})
    new = [{"sizes": z._asdict(), "seconds": float(t)} for z, t in rows]
    if kind == "calibration":
        entry["calibration"] = new
    else:
        entry["runs"] = (list(entry.get("runs", [])) + new)[-KEEP_RUNS:]
    _save(data)


def record(cfg, seconds) -> None:
    """Keep the stepping time ``seconds`` of a complete run of ``cfg`` among this machine's
    timings (runs under :data:`MIN_RECORDED_S` are not kept; a cache that cannot be written
    is skipped silently: it is only a guide)."""
    if not seconds or seconds < MIN_RECORDED_S:
        return
    try:
        z = sizes(cfg)
    except (KeyError, TypeError, ValueError):
        return
    _store([(z, float(seconds))], "runs")


# ---------------------------------------------------------------------- the fit
#: Weight of the pull toward :data:`PRIORS` (relative), against 1 per timing.
PRIOR_WEIGHT = 0.03
#: A term is measured when it made at least this share of some timing's fitted time.
MEASURED_SHARE = 0.1


class Fit(NamedTuple):
    """Fitted seconds per unit (``coef``) by term name, the terms some timing measured, and
    the number of timings."""

    coef: dict[str, float]
    measured: frozenset
    count: int


def fit(timings) -> Fit:
    r"""The coefficients of the model from ``timings`` ((:class:`Sizes`, seconds) pairs):
    non-negative least squares of the relative error :math:`\sum_r (\hat t_r/t_r - 1)^2`
    plus :data:`PRIOR_WEIGHT` :math:`\sum_k (c_k/c_k^{\text{prior}} - 1)^2`."""
    from scipy.optimize import nnls

    names = _names()
    prior = np.array([PRIORS[k] for k in names])
    timings = [(z, t) for z, t in timings if t > 0]
    if not timings:
        return Fit(dict(zip(names, prior)), frozenset(), 0)
    A = np.array([columns(z, names) / t for z, t in timings])
    # unknowns u_k = c_k / prior_k (well scaled)
    A = A * prior
    lam = np.sqrt(PRIOR_WEIGHT)
    M = np.vstack([A, lam * np.eye(len(names))])
    b = np.concatenate([np.ones(len(timings)), lam * np.ones(len(names))])
    u, _ = nnls(M, b, maxiter=50 * len(names))
    coef = u * prior
    measured = set()
    for z, _ in timings:
        w = columns(z, names) * coef
        total = max(w.sum(), 1e-300)
        measured.update(k for k, x in zip(names, w) if x >= MEASURED_SHARE * total)
    return Fit(dict(zip(names, coef)), frozenset(measured), len(timings))


def predict(z: Sizes, f: Fit) -> tuple[float, float]:
    """``(seconds, the share of them from measured terms)`` of a run of sizes ``z``."""
    parts = {t.name: f.coef[t.name] * t.size(z) for t in terms(z.route)}
    total = sum(parts.values())
    measured = sum(v for k, v in parts.items() if k in f.measured)
    return total, (measured / total if total > 0 else 0.0)


#: An estimate is labelled fitted when measured terms make at least this share of it.
FITTED_SHARE = 0.8


class Estimate(NamedTuple):
    """A time estimate: ``seconds``, whether it is ``rough``, and where it comes from."""

    seconds: float
    rough: bool
    how: str


def estimate(cfg) -> Estimate:
    """The stepping time of a run of the validated ``cfg`` from this machine's timings."""
    z = sizes(cfg)
    f = fit(_timings())
    sec, share = predict(z, f)
    rough = share < FITTED_SHARE
    parts = sorted(((f.coef[t.name] * t.size(z), t.name) for t in terms(z.route)), reverse=True)
    main = ", ".join(f"{k} {v / sec:.0%}" for v, k in parts[:2] if sec > 0)
    if f.count == 0:
        how = ("rough: no timing on this machine yet; `wflow validate --calibrate` times a "
               "few short runs")
    elif rough:
        unmeasured = [k for v, k in parts if k not in f.measured and v >= 0.1 * sec]
        how = (f"rough: {', '.join(unmeasured) or 'its main terms'} not yet timed on this "
               f"machine ({f.count} timings); `wflow validate --calibrate` measures them")
    else:
        how = f"fitted to {f.count} timings on this machine; mostly {main}"
    if cfg["solver"].get("adaptive"):
        rough = True
        how = f"rough: adaptive steps, counted as T/dt = {z.steps}; " + how
    return Estimate(sec, rough, f"route {z.route}; {how}")


# ---------------------------------------------------------------------- calibration
def calibrate(run_case, progress=None) -> list[tuple[str, Sizes, float]]:
    """Run :data:`CALIBRATION_CASES` (a few seconds on a quiet machine) and keep their stepping times as this
    machine's calibration; returns ``(case, sizes, seconds)``. ``run_case(overrides)`` runs
    the embedded default with the overrides and returns ``(stepping seconds, validated
    configuration)`` (the command line's runs :class:`wflow.engine.run.Simulation`). Each
    case first runs one step (its kernels loaded or compiled), then every case runs in
    :data:`CALIBRATION_REPEATS` rounds, the median kept (a change of the machine's load
    spreads over every case). ``progress`` receives a line per case."""
    cases = {name: [*sets, "output.store_tokens=false"] for name, sets in CALIBRATION_CASES.items()}
    for sets in cases.values():
        run_case([*sets, "solver.T=0.005", "solver.dt=0.005"])
    times: dict[str, list[float]] = {name: [] for name in cases}
    configs = {}
    for _ in range(CALIBRATION_REPEATS):
        for name, sets in cases.items():
            sec, configs[name] = run_case(sets)
            times[name].append(float(sec))
    rows = []
    for name in cases:
        z, sec = sizes(configs[name]), float(np.median(times[name]))
        rows.append((name, z, sec))
        if progress is not None:
            progress(f"{name:<18} {z.route:<13} n={z.n} d={z.d} H={z.heads} P={z.paths} "
                     f"steps={z.steps}: {sec:.3f} s")
    _store([(z, t) for _, z, t in rows], "calibration")
    return rows


def human_seconds(sec) -> str:
    """``"40 s"``, ``"3.2 min"``, ``"5.1 h"``, ``"2.3 days"``."""
    if sec < 90:
        return f"{sec:.2g} s"
    if sec < 5400:
        return f"{sec / 60:.2g} min"
    if sec < 2 * 86400:
        return f"{sec / 3600:.2g} h"
    return f"{sec / 86400:.2g} days"
