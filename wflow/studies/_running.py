"""Running a study: :func:`run_study` (tasks → sweep → summary, CSV and figures), its chains
of continued runs and the summary's header (the quick-scale mark)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np

from wflow.errors import WflowError
from wflow.storage.files import replacing
from wflow.studies._base import StudyData, StudyOptions, get_study
from wflow.studies._tables import write_csv
from wflow.sweeps.sweep import run_sweep

log = logging.getLogger(__name__)

__all__ = ["StudyResult", "run_study", "summary_header", "QUICK_MARK"]


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
    notes = study.overridden(options, tasks)  # refuses a --set on a key the study sweeps
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
    data = StudyData(paths, tasks, {k: np.asarray(v) for k, v in sweep.table.items()},
                     scale=options.scale)
    text, table = study.summarize(data)
    text = "\n".join([*summary_header(study, options, notes), text])
    files = [outdir / "summary.txt", outdir / "summary.csv"]
    with replacing(files[0]) as tmp:
        tmp.write_text(text + "\n", encoding="utf-8")
    n = len(next(iter(table.values()))) if table else 0
    write_csv({"scale": [options.scale] * n, **table}, files[1])
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


QUICK_MARK = "quick: pipeline check (short T, few paths), not the published setting"


def summary_header(study, options, notes=()) -> list:
    """The lines that head ``summary.txt``: at the quick scale, that the run is a pipeline
    check and what it reduces (``study.quick``); then one line per ``--set`` the study sets
    itself in some runs (:meth:`Study.overridden`); an empty line closes a non-empty header."""
    lines = []
    if options.scale == "quick":
        what = f" Quick scale: {study.quick}." if study.quick else ""
        lines.append(f"QUICK: wflow study {study.name} --quick is a pipeline check, not the "
                     f"published setting: no number below is a result.{what}")
    lines += [f"note: {n}" for n in notes]
    return [*lines, ""] if lines else []


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
