r"""The standard studies: each one a class in the registry, a sweep plus a summary.

A study answers one question with a set of runs. It gives

- its base configuration :math:`c_0 = \mathrm{base}(\text{scale})`, to which the options
  apply (``--ledger``: ``diagnostics.ledger = true``; ``--set``: the overrides), then
- its tasks :math:`\{(\text{name}_k, c_k)\} = \mathrm{variants}(c_0)`, one result file each,
- a summary (text and a column table) and figures, both computed from the result files.

:func:`run_study` runs every registered study the same way: tasks → :func:`wflow.lab.sweep.run_sweep`
→ ``summary.txt``, ``summary.csv`` and figures in the output folder. Registered here:

- ``section6``: the paper's Section 6 [model §9]: S², n = 200, β = 1, Δt = 5·10⁻³, T = 20,
  H ∈ {1, 10, 100}; OU weights with 10 Monte Carlo paths and oscillating weights
  (shared phase) with one path. Summary: late-window G² per H with a 95% CI over
  paths, the fit :math:`G^2 \approx aH^b` per family (expected OU b ≈ −1,
  oscillating b ≈ 0), and clustering at T (clustering vs non-clustering on S²).
- ``energy``: the discrete energy identity: deterministic oscillating weights (shared, H = 10,
  n = 50, T = 2), Euler / Heun / RK4 over Δt ∈ {0.02, 0.01, 0.005, 0.0025}; the exact ledger
  residual and its fitted order (expected min(p, 2)), the telescoping error, ∫G²/∫𝒟.
- ``laplacian``: attention vs Laplacian heads (none, half, all of H = 4), OU weights:
  within-sequence variance, spectral rank, order parameter and clusters at T.

Adding a study is one class, anywhere (a package, a script, a test file)::

    @register_study
    class Mine(Study):
        name = "mine"
        question = "does X change Y?"

        def base(self, scale):
            return {"model": {"heads": 2}, "solver": {"T": 0.1 if scale == "quick" else 1.0}}

        def variants(self, base, scale):
            return expand_grid(base, {"model.beta": [0.5, 1.0]}, name="mine")

        def summarize(self, paths):
            return summary_table(paths, ("energy",))

A package can also make its studies known to ``wflow study`` through the entry-point group
``wflow.lab.studies`` (each entry point names a module or object whose import registers them).
"""

from __future__ import annotations

import copy
import csv
import dataclasses
from pathlib import Path

import numpy as np

from wflow import config as _config
from wflow.errors import ConfigError, WflowError
from wflow.lab.analysis import fit_power_law, head_scaling_data, load_source
from wflow.lab.sweep import EXECUTORS, expand_grid, run_sweep

__all__ = ["Study", "StudyOptions", "StudyResult", "STUDIES", "register_study", "get_study",
           "available_studies", "run_study", "summary_table", "SCALES", "ENTRY_POINT_GROUP"]

#: ``quick``: a short T and few paths (a smoke test of the whole pipeline); ``full``: as published
SCALES = ("quick", "full")
#: the entry-point group scanned for studies of other packages
ENTRY_POINT_GROUP = "wflow.lab.studies"


# ---------------------------------------------------------------------------------- options
@dataclasses.dataclass(frozen=True)
class StudyOptions:
    """The options every study honours (``wflow study NAME`` maps its flags onto them).

    Parameters
    ----------
    scale : {"quick", "full"}
        ``"quick"`` shrinks T and the path count (each study says how in ``base``).
    ledger : bool
        Record the exact energy ledger in every run (``diagnostics.ledger = true``).
    overrides : sequence of str
        ``"section.key=value"``, applied to the study's base configuration.
    executor, address, workers, progress
        How the runs are executed, see :func:`wflow.lab.sweep.run_sweep`.
    formats : sequence of str or None
        Figure formats; ``None``: ``("png",)`` when quick, else ``("png", "pdf")``;
        empty: no figures.
    """

    scale: str = "full"
    ledger: bool = False
    overrides: tuple = ()
    executor: str = "serial"
    address: str | None = None
    workers: int | None = None
    progress: bool = False
    formats: tuple | None = None

    def __post_init__(self):
        if self.scale not in SCALES:
            raise ConfigError(f"scale = {self.scale!r}: allowed values are {', '.join(SCALES)}")
        if self.executor not in EXECUTORS:
            raise ConfigError(f"executor = {self.executor!r}: allowed values are "
                              f"{', '.join(EXECUTORS)}")
        object.__setattr__(self, "overrides", tuple(self.overrides or ()))
        if self.formats is not None:
            f = (self.formats,) if isinstance(self.formats, str) else tuple(self.formats)
            object.__setattr__(self, "formats", f)

    @property
    def figure_formats(self) -> tuple:
        """The formats to draw: ``formats``, or the default of the scale."""
        if self.formats is not None:
            return self.formats
        return ("png",) if self.scale == "quick" else ("png", "pdf")

    def configure(self, base: dict) -> dict:
        """A copy of ``base`` with the ledger switch and the overrides applied."""
        cfg = copy.deepcopy(base)
        if self.ledger:
            cfg.setdefault("diagnostics", {})["ledger"] = True
        return _config.apply_overrides(cfg, list(self.overrides))


# ---------------------------------------------------------------------------------- the class
class Study:
    """Base class of the studies; subclass it and decorate with :func:`register_study`.

    Attributes
    ----------
    name : str
        The registry key (``wflow study NAME``) and the default output folder ``study_NAME``.
    question : str
        One line: what the study answers (``wflow study list``).

    A subclass gives :meth:`base` and :meth:`variants` (or overrides :meth:`tasks` as a
    whole, then honouring the options itself), :meth:`summarize`, and optionally
    :meth:`figures`.
    """

    name: str = ""
    question: str = ""

    def base(self, scale: str) -> dict:
        """The base configuration at ``scale`` ("quick" or "full"), before the options."""
        raise NotImplementedError

    def variants(self, base: dict, scale: str) -> list:
        """The tasks ``[(name, config)]`` made from the configured base (default: ``base`` alone)."""
        return expand_grid(base, {}, name=self.name)

    def tasks(self, options: StudyOptions | None = None) -> list:
        """``variants(options.configure(base(scale)), scale)``: the list of (name, config)."""
        options = options or StudyOptions()
        return self.variants(options.configure(self.base(options.scale)), options.scale)

    def summarize(self, paths) -> tuple[str, dict]:
        """``(text, table)`` from the result files; ``table`` maps column → list (equal lengths)."""
        return summary_table(paths)

    def figures(self, paths, outdir, formats) -> list:
        """Draw the study's figures into ``outdir``; returns the files written (default: none)."""
        return []


STUDIES: dict[str, Study] = {}


def register_study(cls=None, *, replace=False):
    """Class decorator: register an instance of the :class:`Study` subclass under ``cls.name``.

    ``@register_study`` or ``@register_study(replace=True)`` (replace a study of that name).
    Returns the class unchanged.
    """

    def deco(c):
        if not (isinstance(c, type) and issubclass(c, Study)):
            raise TypeError(f"register_study: {c!r} is not a subclass of Study")
        if not c.name or not c.question:
            raise ValueError(f"register_study: {c.__name__} needs a name and a one-line question")
        if c.name == "list":
            raise ValueError("register_study: 'list' is reserved (wflow study list)")
        if c.name in STUDIES and not replace:
            raise ValueError(f"register_study: a study named {c.name!r} is already registered "
                             "(pass replace=True)")
        STUDIES[c.name] = c()
        return c

    return deco if cls is None else deco(cls)


_entry_points_loaded = False


def _load_entry_points():
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()  # importing the module registers its studies


def available_studies() -> dict[str, Study]:
    """The registered studies (this module's, imported ones, and the entry points')."""
    _load_entry_points()
    return dict(STUDIES)


def get_study(name) -> Study:
    """The registered study ``name`` (a :class:`Study` instance is returned as is)."""
    if isinstance(name, Study):
        return name
    studies = available_studies()
    if name not in studies:
        raise ConfigError(f"study = {name!r}: allowed values are {', '.join(studies)}")
    return studies[name]


# ---------------------------------------------------------------------------------- running
@dataclasses.dataclass
class StudyResult:
    """What :func:`run_study` did: the runs (``rows`` of the sweep), the summary and the files."""

    name: str
    outdir: Path
    rows: list
    text: str
    table: dict
    files: list

    @property
    def paths(self) -> list:
        return [r["path"] for r in self.rows]

    def report(self) -> str:
        """The per-run timing followed by the summary text."""
        timing = "\n".join(f"{r['name']:<34}{r['action']:<20}{r['elapsed']:>9.1f} s"
                           for r in self.rows)
        return f"{timing}\n\n{self.text}"


def run_study(name, outdir, options: StudyOptions | None = None, **fields) -> StudyResult:
    """Run the study ``name`` into ``outdir`` and write its summary and figures there.

    Parameters
    ----------
    name : str or Study
        A registered study (see :func:`available_studies`).
    outdir : path-like
        One ``<task>.h5`` per task, ``summary.txt``, ``summary.csv`` and ``figures/``.
    options : StudyOptions, optional
    **fields
        Replace fields of ``options`` (``run_study("energy", out, scale="quick")``).

    Returns
    -------
    StudyResult
    """
    study = get_study(name)
    options = dataclasses.replace(options or StudyOptions(), **fields)
    tasks = study.tasks(options)
    if options.ledger:  # whatever the study's tasks do, the switch holds for every run
        for _, cfg in tasks:
            cfg.setdefault("diagnostics", {})["ledger"] = True
    outdir = Path(outdir)
    sweep = run_sweep(tasks, outdir, executor=options.executor, address=options.address,
                      n_workers=options.workers, progress=options.progress)
    if sweep.failed:
        raise WflowError(f"study {study.name}: failed runs: "
                         + "; ".join(f"{k} ({v})" for k, v in sweep.failed.items()))
    rows = sweep.rows
    paths = [r["path"] for r in rows]
    text, table = study.summarize(paths)
    files = [outdir / "summary.txt", outdir / "summary.csv"]
    files[0].write_text(text + "\n", encoding="utf-8")
    write_csv(table, files[1])
    if options.figure_formats:
        files += list(study.figures(paths, outdir / "figures", options.figure_formats) or [])
    return StudyResult(study.name, outdir, rows, text, table, files)


def write_csv(table: dict, path):
    """Write a column table (column → list of equal length) as CSV."""
    cols = list(table)
    n = len(table[cols[0]]) if cols else 0
    if any(len(table[c]) != n for c in cols):
        raise ValueError("write_csv: the columns of the table differ in length")
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for i in range(n):
            w.writerow([table[c][i] for c in cols])


# ---------------------------------------------------------------------------------- helpers
def _final_mean(arrays, key):
    a = np.asarray(arrays[key], dtype=float)
    return float(np.nanmean(a[-1]))


def summary_table(paths, keys=("variance", "spectral_rank", "order_parameter", "n_clusters",
                               "G2")):
    """``(text, table)``: final-record means over paths of ``keys``, one row per result file."""
    lines = [f"{'run':<34}" + "".join(f"{k:>16}" for k in keys)]
    table = {"run": [], **{k: [] for k in keys}}
    for p in paths:
        _, arr = load_source(p)
        vals = [_final_mean(arr, k) for k in keys]
        lines.append(f"{Path(p).stem:<34}" + "".join(f"{v:>16.4g}" for v in vals))
        table["run"].append(Path(p).stem)
        for k, v in zip(keys, vals):
            table[k].append(v)
    return "\n".join(lines), table


def _run_figures(paths, outdir, formats, kinds):
    from wflow.lab import plotting

    out = []
    for p in paths:
        for kind in kinds:
            out += plotting.plot(p, kind, Path(outdir) / Path(p).stem, formats=formats) or []
    return out


SECTION6_BASE = {
    "model": {"d": 3, "n": 200, "beta": 1.0, "normalization": "head", "sign": "descent"},
    "init": {"tokens": "octahedral", "token_noise": 0.05, "weights": "symmetric_gaussian",
             "seed": 0},
    "weights": {"process": "ou", "rate": 1.0, "mean": 1.0, "noise_var": 2.0,
                "scheme": "euler_maruyama"},
    "solver": {"method": "euler", "dt": 5e-3, "T": 20.0, "record_every": 5, "paths": 10},
    "diagnostics": {"ledger": False, "clustering": True},
    "output": {"store_tokens": True},
}


def _scaled(base, scale):
    cfg = copy.deepcopy(base)
    if scale == "quick":
        cfg["solver"]["T"] = 0.5
        cfg["solver"]["paths"] = min(cfg["solver"]["paths"], 2)
    return cfg


# ---------------------------------------------------------------------------------- section 6
@register_study
class Section6(Study):
    """The paper's Section 6 [model §9]: OU × H (10 paths), oscillating shared × H (1 path).

    Quick: T = 0.5, 2 OU paths. The oscillating family copies the configured OU base
    (overrides included) and replaces its weights section and path count.
    """

    name = "section6"
    question = "how does the late-window G² scale with the head count H (OU vs oscillating weights)?"
    heads = (1, 10, 100)

    def base(self, scale):
        return _scaled(SECTION6_BASE, scale)

    def variants(self, base, scale):
        osc = copy.deepcopy(base)
        osc["weights"] = {"process": "oscillating", "phase": "shared", "noise_var": 0.0,
                          "scheme": "euler"}
        osc["solver"]["paths"] = 1
        return (expand_grid(base, {"model.heads": list(self.heads)}, name="ou")
                + expand_grid(osc, {"model.heads": list(self.heads)}, name="oscillating"))

    @staticmethod
    def families(paths):
        """``{"ou": [...], "oscillating": [...]}`` by file name."""
        fam = {"ou": [], "oscillating": []}
        for p in paths:
            fam["oscillating" if Path(p).name.startswith("oscillating") else "ou"].append(p)
        return fam

    def summarize(self, paths, window=None):
        """Late-window (t ≥ T/2 by default) mean G² per H with its 95% CI, fit aH^b, clustering."""
        lines = []
        table = {k: [] for k in ("family", "H", "G2", "ci", "paths", "order_parameter",
                                 "n_clusters", "fit_a", "fit_b", "fit_se")}
        for name, srcs in self.families(paths).items():
            if not srcs:
                continue
            data = head_scaling_data(srcs, window)
            lines.append(f"{name}: late-window mean G² (95% CI over paths)")
            lines.append(f"{'H':>6}{'G2':>12}{'CI':>12}{'paths':>7}{'order':>8}{'clusters':>10}")
            finals = {}
            for s in srcs:
                cfg, arr = load_source(s)
                finals[cfg["model"]["heads"]] = (_final_mean(arr, "order_parameter"),
                                                 _final_mean(arr, "n_clusters"))
            fit = (np.nan, np.nan, np.nan)
            if len(data["H"]) >= 2:
                fit = fit_power_law(data["H"], data["mean"])
            for H, m, ci, np_ in zip(data["H"], data["mean"], data["ci"], data["paths"]):
                op, nc = finals.get(int(H), (np.nan, np.nan))
                lines.append(f"{int(H):>6}{m:>12.4g}{ci:>12.2g}{np_:>7}{op:>8.3f}{nc:>10.1f}")
                for k, v in zip(table, (name, int(H), float(m), float(ci), int(np_), op, nc, *fit)):
                    table[k].append(v)
            if len(data["H"]) >= 2:
                a, b, se = fit
                lines.append(f"fit G2 = a H^b: a = {a:.4g}, b = {b:.3f} ± {se:.2g}")
        return "\n".join(lines), table

    def figures(self, paths, outdir, formats):
        from wflow.lab import plotting

        fam = self.families(paths)
        groups = {"OU": fam["ou"], "oscillating, shared phase": fam["oscillating"]}
        out = list(plotting.plot_head_scaling({k: v for k, v in groups.items() if v}, outdir,
                                              formats=formats))
        return out + _run_figures(paths, outdir, formats, ("snapshots", "G2", "clustering"))


# ---------------------------------------------------------------------------------- energy
ENERGY_DTS = (0.02, 0.01, 0.005, 0.0025)


@register_study
class Energy(Study):
    """The discrete energy identity: oscillating shared weights, Euler/Heun/RK4 × four Δt.

    Quick: T = 0.4. Each run records once, at T (``record_every`` = T/Δt).
    """

    name = "energy"
    question = "does the exact energy ledger close at the solver's order (Euler, Heun, RK4 over Δt)?"
    methods = ("euler", "heun", "rk4")
    dts = ENERGY_DTS

    def base(self, scale):
        T = 2.0 if scale == "full" else 0.4
        return {"model": {"n": 50, "heads": 10}, "init": {"seed": 3},
                "weights": {"process": "oscillating", "phase": "shared", "noise_var": 0.0},
                "solver": {"T": T, "paths": 1},
                "diagnostics": {"clustering": False, "ledger": True},
                "output": {"store_tokens": False}}

    def variants(self, base, scale):
        T = base["solver"]["T"]
        tasks = []
        for method in self.methods:
            for dt in self.dts:
                cfg = copy.deepcopy(base)
                cfg["solver"].update(method=method, dt=dt, record_every=int(round(T / dt)))
                tasks += expand_grid(cfg, {}, name=f"energy-{method}-dt={dt:g}")
        return tasks

    def summarize(self, paths):
        """|ledger residual| at T per solver and Δt, its fitted order, telescoping error, ∫G²/∫𝒟."""
        rows = {}
        for p in paths:
            cfg, arr = load_source(p)
            rows.setdefault(cfg["solver"]["method"], []).append(
                (cfg["solver"]["dt"], abs(_final_mean(arr, "ledger_residual")),
                 float(np.nanmax(np.abs(arr["ledger_telescoping"]))),
                 _final_mean(arr, "int_G2") / _final_mean(arr, "int_dissipation")))
        lines = [f"{'method':<8}" + "".join(f"{'dt=' + format(dt, 'g'):>12}" for dt in self.dts)
                 + f"{'order':>8}{'max telescoping':>18}{'int G2/int D':>14}"]
        table = {k: [] for k in ("method", "dt", "ledger_residual", "order", "max_telescoping",
                                 "int_G2_over_int_D")}
        for method, r in rows.items():
            r.sort(reverse=True)
            dts = np.array([x[0] for x in r])
            res = np.array([x[1] for x in r])
            order = float(np.polyfit(np.log(dts), np.log(res), 1)[0])
            lines.append(f"{method:<8}" + "".join(f"{e:>12.3e}" for e in res) + f"{order:>8.2f}"
                         f"{max(x[2] for x in r):>18.1e}{r[-1][3]:>14.3f}")
            for dt, e, tele, ratio in r:
                for k, v in zip(table, (method, dt, e, order, tele, ratio)):
                    table[k].append(v)
        return "\n".join(lines), table

    def figures(self, paths, outdir, formats):
        from wflow.lab import plotting

        _, table = self.summarize(paths)
        out = list(plotting.plot_orders(table, outdir, formats=formats))
        return out + _run_figures(paths, outdir, formats, ("ledger",))


# ---------------------------------------------------------------------------------- laplacian
@register_study
class Laplacian(Study):
    """Attention vs Laplacian heads: H = 4, laplacian_heads ∈ {0, 2, 4}, OU weights.

    The Section 6 base with H = 4, T ≤ 10, at most 4 paths (quick: T = 0.5, 2 paths).
    """

    name = "laplacian"
    question = "what do Laplacian heads (0, 2, 4 of H = 4) change in clustering and rank?"

    def base(self, scale):
        base = _scaled(SECTION6_BASE, scale)
        base["model"]["heads"] = 4
        base["solver"]["T"] = min(base["solver"]["T"], 10.0)
        base["solver"]["paths"] = min(base["solver"]["paths"], 4)
        return base

    def variants(self, base, scale):
        return expand_grid(base, {"model.laplacian_heads": [0, 2, 4]}, name="laplacian")

    def figures(self, paths, outdir, formats):
        from wflow.lab import plotting

        _, table = self.summarize(paths)
        out = list(plotting.plot_table_bars(table, outdir, label="run", formats=formats))
        return out + _run_figures(paths, outdir, formats, ("snapshots", "G2", "clustering"))
