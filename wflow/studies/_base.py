"""The study base class, its registry, :func:`run_study` and shared helpers (see the package)."""

from __future__ import annotations

import copy
import csv
import dataclasses
import logging
from pathlib import Path

import numpy as np

from wflow import config as _config
from wflow.analysis.results import load_source
from wflow.errors import ConfigError, WflowError
from wflow.registry import register
from wflow.storage.files import replacing
from wflow.sweeps.sweep import EXECUTORS, expand_grid, run_sweep

log = logging.getLogger(__name__)

__all__ = ["Study", "StudyData", "StudyOptions", "StudyResult", "STUDIES", "register_study",
           "get_study", "available_studies", "run_study", "summary_table", "write_csv", "SCALES",
           "ENTRY_POINT_GROUP", "final_state"]

#: ``quick``: a short T and few paths (a smoke test of the whole pipeline); ``full``: as published
SCALES = ("quick", "full")
#: the entry-point group scanned for studies of other packages
ENTRY_POINT_GROUP = "wflow.studies"


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
    executor, address, workers, progress, paths_per_task
        How the runs are executed, see :func:`wflow.sweeps.sweep.run_sweep`.
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
    paths_per_task: int | None = None

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


# ---------------------------------------------------------------------------------- data
@dataclasses.dataclass
class StudyData:
    """What a study's summary and figures read.

    Attributes
    ----------
    paths : list of str
        One result file per task, in task order.
    tasks : list of (str, dict)
        The task names and configurations.
    summary : dict of str to numpy.ndarray
        The sweep summary (:mod:`wflow.sweeps.summary`): one row per task and path, with
        the columns ``point`` (task name), ``path``, the swept keys, the standard and the
        study's own ``summary_columns``.
    """

    paths: list
    tasks: list
    summary: dict

    def __iter__(self):  # ``for p in data`` walks the result files
        return iter(self.paths)

    def __len__(self):
        return len(self.paths)

    def config(self, point) -> dict:
        """The configuration of the task named ``point``."""
        return dict(self.tasks)[point]

    def rows(self, point) -> np.ndarray:
        """Row indices of the summary that belong to task ``point``."""
        return np.flatnonzero(np.asarray(self.summary["point"]) == point)

    def column(self, name, point=None) -> np.ndarray:
        """Column ``name`` of the summary (float array), optionally the rows of one task."""
        a = np.asarray(self.summary[name])
        return a if point is None else a[self.rows(point)]


# ---------------------------------------------------------------------------------- the class
class Study:
    """Base class of the studies; subclass it and decorate with :func:`register_study`.

    Attributes
    ----------
    name : str
        The registry key (``wflow study NAME``) and the default output folder ``study_NAME``.
    question : str
        One line: what the study answers (``wflow study list``).
    quick : str
        One line: what the quick scale reduces, and what it still checks.

    summary_columns : tuple
        Extra per-path columns of the sweep summary the study reads.

    A subclass gives :meth:`base` and :meth:`variants` (or overrides :meth:`tasks` as a
    whole, then honouring the options itself), :meth:`summarize`, and optionally
    :meth:`figures`. Both receive a :class:`StudyData`: the sweep summary (one row per task
    and Monte Carlo path, computed once when the sweep ends) and the result files.
    """

    name: str = ""
    question: str = ""
    #: one line: what the quick scale reduces (``wflow study list``)
    quick: str = ""
    #: extra columns of the sweep summary, ``(column, series, how)`` with ``how`` one of
    #: ``"late"``, ``"final"`` or a function ``(t, a, T) -> (P,)`` (see
    #: :data:`wflow.sweeps.summary.SUMMARY_COLUMNS`)
    summary_columns: tuple = ()
    #: False when the study's runs cannot record the energy ledger (non-symmetric D_h,
    #: [model §1b]): ``--ledger`` is then a configuration error
    ledger: bool = True

    def base(self, scale: str) -> dict:
        """The base configuration at ``scale`` ("quick" or "full"), before the options."""
        raise NotImplementedError

    def variants(self, base: dict, scale: str) -> list:
        """The tasks ``[(name, config)]`` made from the configured base (default: ``base`` alone)."""
        return expand_grid(base, {}, name=self.name)

    def tasks(self, options: StudyOptions | None = None) -> list:
        """``variants(options.configure(base(scale)), scale)``: the list of (name, config)."""
        options = options or StudyOptions()
        if options.ledger and not self.ledger:
            raise ConfigError(f"--ledger (diagnostics.ledger = true) with study {self.name}: its "
                              "D_h are not symmetric, so no energy ledger exists (docs/model.md "
                              "§1b)")
        tasks = self.variants(options.configure(self.base(options.scale)), options.scale)
        for text in options.overrides:  # a key the study sweeps: its grid wins, say so
            keys, value = _config.parse_override(text)
            sec, key = keys[0], ".".join(keys[1:])
            if any(cfg.get(sec, {}).get(key) != value for _, cfg in tasks):
                log.warning("study %s sets %s.%s itself in some runs: --set %s does not hold "
                            "there", self.name, sec, key, text)
        return tasks

    def chains(self, base: dict, scale: str) -> list:
        """Continuation sweeps ``[(name, config), ...]`` per chain, as a list of chains
        (default: none).

        :func:`run_study` runs each chain in order after the tasks, every link from the final
        state of the link before it (:meth:`continued`; the first from its own
        ``[init]``), into ``<name>.h5``; the links join the tasks of :class:`StudyData`.
        A complete link is reused while every link before it was reused; once one runs, all
        later ones run again. A complete link of another configuration is refused
        (:class:`~wflow.errors.ConfigError`, as the sweep refuses a stale file).
        """
        return []

    def continue_from(self, previous, config) -> np.ndarray:
        """The start of a link continued from ``previous`` (:meth:`continued`): its final
        tokens or density (:func:`final_state`); a study may perturb it here."""
        return final_state(previous)

    def continued(self, config, previous, path=None):
        r"""Run ``config`` from the final state of ``previous``: :math:`X_0` (or
        :math:`\rho_0`) = the last record of its tokens (or density), as
        :meth:`continue_from` gives it.

        Parameters
        ----------
        config : dict
            The run; its mesh, ``model.n``, ``model.d`` and ``solver.paths`` must fit the
            previous state (else :class:`~wflow.errors.ConfigError`). Time restarts at 0
            and the weights at the configuration's D(0), the random streams at its seed: a
            continuation of a run with frozen weights and no noise equals the longer run
            (a density to the bit, its steps depend on the cell averages and Δt alone;
            particles to round-off, given tokens are renormalised to unit rows); with noise
            it equals it in law.
        previous : path or :class:`~wflow.engine.run.Result`
            A result with its tokens stored (``output.store_tokens``).
        path : path-like, optional
            Write the run there (through ``.<file>.part``, renamed when complete), with the
            root attribute ``continued_from`` (the previous file's name); default: in memory.

        Returns
        -------
        The :class:`~wflow.engine.run.Result`, or ``path``.
        """
        from wflow.engine.run import Simulation

        sim = Simulation(config, tokens=self.continue_from(previous, config))
        if path is None:
            return sim.run()
        import os

        from wflow.engine import driver
        from wflow.storage import io

        path = Path(path)
        part = path.with_name(f".{path.name}.part")
        driver.run_to_file(path=part, overwrite=True, simulation=sim)
        with io._open_write(part) as f:
            f.attrs["continued_from"] = (Path(previous).name if isinstance(previous, (str, Path))
                                         else "")
        os.replace(part, path)
        return path

    def summarize(self, data: StudyData) -> tuple[str, dict]:
        """``(text, table)`` from the sweep summary (``data.summary``) or the result files
        (``data.paths``); ``table`` maps column → list (equal lengths)."""
        return summary_table(data.paths)

    def figures(self, data: StudyData, outdir, formats) -> list:
        """Draw the study's figures into ``outdir``; returns the files written (default: none)."""
        return []


STUDIES: dict[str, Study] = {}


def register_study(cls=None, *, replace=False):
    """Class decorator: register an instance of the :class:`Study` subclass under ``cls.name``.

    ``@register_study`` or ``@register_study(replace=True)`` (replace a study of that name; a
    name registered twice is refused otherwise, ``ValueError``, as every registry of wflow
    does, :func:`wflow.registry.register`). Returns the class unchanged.
    """

    def deco(c):
        if not (isinstance(c, type) and issubclass(c, Study)):
            raise TypeError(f"register_study: {c!r} is not a subclass of Study")
        if not c.name or not c.question:
            raise ValueError(f"register_study: {c.__name__} needs a name and a one-line question")
        if c.name == "list":
            raise ValueError("register_study: 'list' is reserved (wflow study list)")
        register(STUDIES, c.name, c(), what="study", by="register_study", replace=replace)
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
    data: StudyData | None = None

    @property
    def paths(self) -> list:
        return list(self.data.paths) if self.data is not None else [r["path"] for r in self.rows]

    def report(self) -> str:
        """The per-run timing followed by the summary text."""
        timing = "\n".join(f"{r['name']:<34}{r['action']:<20}{r['elapsed']:>9.1f} s"
                           for r in self.rows)
        return f"{timing}\n\n{self.text}"


def run_study(name, outdir, options: StudyOptions | None = None, tasks=None,
              **fields) -> StudyResult:
    """Run the study ``name`` into ``outdir`` and write its summary and figures there.

    Parameters
    ----------
    name : str or Study
        A registered study (see :func:`available_studies`).
    outdir : path-like
        One ``<task>.h5`` per task, ``summary.txt``, ``summary.csv`` and ``figures/``.
    options : StudyOptions, optional
    tasks : list of (str, dict), optional
        The tasks, if already made with ``study.tasks(options)`` (the CLI makes them first to
        check the disk); default: made here.
    **fields
        Replace fields of ``options`` (``run_study("energy", out, scale="quick")``).

    Returns
    -------
    StudyResult
    """
    study = get_study(name)
    options = dataclasses.replace(options or StudyOptions(), **fields)
    tasks = study.tasks(options) if tasks is None else list(tasks)
    if options.ledger:  # whatever the study's tasks do, the switch holds for every run
        for _, cfg in tasks:
            cfg.setdefault("diagnostics", {})["ledger"] = True
    outdir = Path(outdir)
    sweep = run_sweep(tasks, outdir, executor=options.executor, address=options.address,
                      n_workers=options.workers, progress=options.progress,
                      paths_per_task=options.paths_per_task, columns=study.summary_columns)
    if sweep.failed:
        raise WflowError(f"study {study.name}: failed runs: "
                         + "; ".join(f"{k} ({v})" for k, v in sweep.failed.items()))
    rows = sweep.rows
    paths = [str(outdir / f"{name}.h5") for name, _ in tasks]
    tasks = list(tasks)
    for chain in study.chains(options.configure(study.base(options.scale)), options.scale):
        rows += _run_chain(study, chain, outdir, options)
        tasks += [(n, c) for n, c in chain]
        paths += [str(outdir / f"{n}.h5") for n, _ in chain]
    data = StudyData(paths, tasks, {k: np.asarray(v) for k, v in sweep.table.items()})
    text, table = study.summarize(data)
    files = [outdir / "summary.txt", outdir / "summary.csv"]
    with replacing(files[0]) as tmp:
        tmp.write_text(text + "\n", encoding="utf-8")
    write_csv(table, files[1])
    if options.figure_formats:
        files += _draw_figures(study, data, outdir / "figures", options)
    return StudyResult(study.name, outdir, rows, text, table, files, data)


def _run_chain(study, chain, outdir, options) -> list:
    """Run the links of one continuation chain in order (see :meth:`Study.chains`); the rows
    of :class:`StudyResult` (name, path, action, status, error, elapsed)."""
    import os
    import time

    from wflow.engine import driver
    from wflow.storage import io

    rows, fresh, prev = [], False, None
    for name, cfg in chain:
        if options.ledger:
            cfg.setdefault("diagnostics", {})["ledger"] = True
        path = Path(outdir) / f"{name}.h5"
        t0 = time.perf_counter()
        if not fresh and io.file_status(path) == "complete":
            driver.check_reuse(path, cfg, "study chain link")
            action = "skipped (complete)"
        else:
            fresh = True  # every later link starts from this one: run them all again
            if prev is None:
                part = path.with_name(f".{path.name}.part")
                driver.run_to_file(cfg, part, overwrite=True)
                os.replace(part, path)
            else:
                study.continued(cfg, prev, path)
            action = "ran"
        rows.append({"name": name, "path": str(path), "action": action, "status": "complete",
                     "error": "", "elapsed": time.perf_counter() - t0, "worker": ""})
        prev = path
    return rows


def final_state(source) -> np.ndarray:
    """The last record of a result's tokens ``X`` (P, n, d) or density ``rho`` (P, N)
    (a path or a :class:`~wflow.engine.run.Result`); ConfigError if it stored neither."""
    _, arr = load_source(source)
    for key in ("rho", "X"):
        if key in arr:
            return np.asarray(arr[key][-1], dtype=float)
    raise ConfigError("continued: the previous result stored no tokens or density "
                      "(output.store_tokens = true)")


#: the mark on every figure of a quick study
QUICK_MARK = "quick: pipeline check (short T, few paths), not the published setting"


def _draw_figures(study, data, figdir, options) -> list:
    """The study's figures, marked when quick, with a progress bar over the files written."""
    from wflow.figures import _figbase

    bar = None
    if options.progress:
        from tqdm.auto import tqdm

        bar = tqdm(unit="file", desc=f"{study.name} figures")
    mark = QUICK_MARK if options.scale == "quick" else None
    try:
        with _figbase.figure_context(mark=mark,
                                     on_save=None if bar is None else lambda p: bar.update()):
            return list(study.figures(data, figdir, options.figure_formats) or [])
    finally:
        if bar is not None:
            bar.close()


def write_csv(table: dict, path):
    """Write a column table (column → list of equal length) as CSV (under a temporary name,
    renamed when complete)."""
    cols = list(table)
    n = len(table[cols[0]]) if cols else 0
    if any(len(table[c]) != n for c in cols):
        raise ValueError("write_csv: the columns of the table differ in length")
    with replacing(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as fh:
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
    from wflow.figures import plotting

    out = []
    for p in paths:
        for kind in kinds:
            out += plotting.plot(p, kind, Path(outdir) / Path(p).stem, formats=formats) or []
    return out


