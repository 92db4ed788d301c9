"""The study base class, its options and data, and the registry (see the package); running a
study is :mod:`wflow.studies._running`, the result tables :mod:`wflow.studies._tables`."""

from __future__ import annotations

import copy
import dataclasses
import logging
from pathlib import Path

import numpy as np

from wflow import config as _config
from wflow.errors import ConfigError
from wflow.registry import register
from wflow.studies._tables import final_state, summary_table
from wflow.sweeps.sweep import EXECUTORS, expand_grid

log = logging.getLogger(__name__)

__all__ = ["Study", "StudyData", "StudyOptions", "STUDIES", "register_study", "get_study",
           "available_studies", "SCALES", "ENTRY_POINT_GROUP"]

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
    scale : {"full", "quick"}
        The scale the runs were made at (a quick study labels its numbers).
    """

    paths: list
    tasks: list
    summary: dict
    scale: str = "full"

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
        """``variants(options.configure(base(scale)), scale)``: the list of (name, config).

        A ``--set`` on a key the study sweeps is refused (:meth:`overridden`)."""
        options = options or StudyOptions()
        if options.ledger and not self.ledger:
            raise ConfigError(f"--ledger (diagnostics.ledger = true) with study {self.name}: its "
                              "D_h are not symmetric, so no energy ledger exists (docs/model.md "
                              "§1b)")
        tasks = self.variants(options.configure(self.base(options.scale)), options.scale)
        self.overridden(options, tasks)
        return tasks

    def overridden(self, options: StudyOptions, tasks=None) -> list:
        r"""What the study does with each ``--set``: the notes for the summary, or a refusal.

        For an override ``k = v`` let :math:`c_j` be task j's configuration and
        :math:`c^0_j` the same task made without it (by :meth:`variants`, or by
        :meth:`tasks` where a study overrides it). The study sets k itself in task j when
        :math:`c_j[k] = c^0_j[k]` (the override did not reach it) and either
        :math:`c_j[k] \ne v` or the base without the override has another value (the grid
        gives v by coincidence). A value derived from the override (Δt/2 of the given Δt)
        changes with it and counts as applied.

        - Those tasks hold two or more values of k: the study sweeps k, and the override
          cannot hold — :class:`~wflow.errors.ConfigError`, one line naming the study, the
          key and the values it runs (exit 2 on the command line).
        - They are all the tasks: the override holds nowhere — ConfigError as well.
        - They hold one value (a family of the study fixes k, e.g. the one-path oscillating
          family of ``section6`` under ``--set solver.paths=3``): the override applies to
          the other tasks, and the returned note, which heads ``summary.txt``, says where it
          does not.

        Returns
        -------
        list of str
            One note per override the study sets itself in some tasks.
        """
        tasks = self.tasks(options) if tasks is None else tasks
        notes = []
        for i, text in enumerate(options.overrides):
            keys, value = _config.parse_override(text)
            if not any(_lookup(cfg, keys) != value for _, cfg in tasks):
                continue  # every task holds it
            others = dataclasses.replace(options, overrides=options.overrides[:i]
                                         + options.overrides[i + 1:])
            base0 = others.configure(self.base(options.scale))
            if type(self).tasks is Study.tasks:
                without = self.variants(base0, options.scale)
            else:  # a study that makes its tasks itself (phase) makes them without it too
                without = self.tasks(others)
            if len(without) == len(tasks):
                pairs = [(n, c, c0) for (n, c), (_, c0) in zip(tasks, without)]
            else:  # the override changes the task list: compare the tasks of both lists
                w = dict(without)
                pairs = [(n, c, w[n]) for n, c in tasks if n in w]
            b0 = _lookup(base0, keys)
            own = [(n, _lookup(c, keys)) for n, c, c0 in pairs
                   if _lookup(c, keys) == _lookup(c0, keys)
                   and (_lookup(c, keys) != value or b0 != value)]
            if not own:
                continue
            key = ".".join(keys)
            values = list(dict.fromkeys(_show(v) for _, v in own))
            shown = ", ".join(values[:6]) + (", ..." if len(values) > 6 else "")
            if len(values) > 1:
                raise ConfigError(f"--set {text}: study {self.name} sweeps {key} itself "
                                  f"({shown} across its runs), so the override cannot hold; "
                                  f"run that setting alone (wflow run --set {text}) or sweep "
                                  "it (wflow sweep)")
            if len(own) == len(tasks):
                raise ConfigError(f"--set {text}: study {self.name} sets {key} = {shown} "
                                  "itself in every run, so the override cannot hold; run that "
                                  f"setting alone (wflow run --set {text})")
            names = [n for n, _ in own]
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4
                                            else "")
            notes.append(f"--set {text} applies to {len(tasks) - len(names)} of {len(tasks)} "
                         f"runs; study {self.name} sets {key} = {values[0]} itself in {shown}")
        return notes

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


_MISSING = object()


def _lookup(cfg, keys):
    """``cfg[k0][k1]...``, or a marker when the key is absent."""
    node = cfg
    for k in keys:
        if not isinstance(node, dict) or k not in node:
            return _MISSING
        node = node[k]
    return node


def _show(value) -> str:
    return "(not set)" if value is _MISSING else repr(value) if isinstance(value, str) else str(value)


