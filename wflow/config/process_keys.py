r"""The ``[weights]`` keys of the weight processes, read from the registered classes.

.. math::

    \text{keys}(\text{weights}) = \{\text{process}, \text{shared\_path}\} \cup
    \bigcup_{c \,\in\, \text{PROCESSES}} c.\text{params} .

Every process declares its keys once, on its class (``params``: :class:`~wflow.params.Param`
rows with bare names). :func:`sync` turns them into rows of the configuration table — built-in
and plug-in processes alike — each applying only with the processes that declare it:

* a key of another process set explicitly to a value other than its default is refused with
  one line naming the key, the chosen process and its keys (exit code 2 through
  :class:`~wflow.errors.ConfigError`); a process may accept and ignore a key of another
  (``ignores``);
* a key declared by several processes (``scheme``) is checked and defaulted by the chosen
  process's own row;
* a built-in process's keys are in every validated configuration (so a stored configuration
  and its hash do not depend on the process); a plug-in's only with its process;
* :func:`process_keys` gives the keys of one process, for the overrides that change
  ``weights.process`` (inherited keys of the old process are dropped).

The table reads the registry lazily (:func:`wflow.config.schema.register_source`), so a
process registered later — by a decorator, an entry point or ``module:Class`` — is in the
validation and in the generated key reference (``python -m wflow.config write``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from wflow.config import schema
from wflow.config.schema import Boolean, Integer, Interval, Param, String, When, show
from wflow.errors import ConfigError
from wflow.model.processes import PROCESSES, get_process

__all__ = ["sync", "process_keys", "declared", "drop_inherited", "ProcessWhen"]

_synced: tuple = ()  # the registry as last read: ((name, class), ...)


@dataclass(frozen=True)
class ProcessWhen(When):
    """``weights.process`` names a process declaring the key (``values``) or ignoring it
    (``ignored_by``, which makes it hold without being named in the docs)."""

    ignored_by: tuple = ()

    def holds(self, cfg: Mapping) -> bool:
        return cfg["weights"]["process"] in self.values + self.ignored_by

    def hint(self, cfg: Mapping) -> str:
        name = cfg["weights"]["process"]
        keys = [p.name for p in declared(name)]
        return (f"; the keys of process {name!r} are {', '.join(keys)}" if keys
                else f"; process {name!r} has no keys of its own")


def declared(name) -> list[Param]:
    """The keys of ``weights.process = name`` as declared on its class (bare names)."""
    cls = PROCESSES.get(name)
    return [] if cls is None else _rows(cls)


def process_keys(name) -> set[str]:
    """Bare names of the keys of process ``name``: its own and those it ignores."""
    cls = PROCESSES.get(name)
    return {p.name for p in declared(name)} | set(getattr(cls, "ignores", ()))


def _rows(cls) -> list[Param]:
    """``cls.params`` as Param rows; a plain dict name -> default is read by the type of the
    default (bool, int, float, str; anything else accepted as given)."""
    params = getattr(cls, "params", ())
    if isinstance(params, Mapping):
        return [Param(name, default, _by_type(default),
                      f"{cls.name}: {name} (default {show(default)})")
                for name, default in params.items()]
    return list(params)


def _by_type(default):
    if isinstance(default, bool):
        return Boolean()
    if isinstance(default, int):
        return Integer()
    if isinstance(default, float):
        return Interval()
    if isinstance(default, str):
        return String()
    return lambda key, v, cfg=None: v


def _builtin(cls) -> bool:
    return cls.__module__.startswith("wflow.")


def _merged(name: str, decl: list) -> Param:
    """One table row of ``weights.<name>`` from its declarations ``[(process, cls, row)]``."""
    procs = tuple(dict.fromkeys(p for p, _, _ in decl))
    ignored = tuple(p for p, c in PROCESSES.items() if name in getattr(c, "ignores", ())
                    and p not in procs)
    by_proc = {p: row for p, _, row in decl}
    first = decl[0][2]
    key = f"weights.{name}"
    present = None
    if not any(_builtin(c) for _, c, _ in decl):
        present = lambda cfg, ps=procs + ignored: cfg["weights"]["process"] in ps  # noqa: E731
    applies = (ProcessWhen("weights.process", procs, ignored),) + tuple(first.applies)
    rows = list({id(r): r for r in by_proc.values()}.values())
    if len(rows) == 1:  # one declaration (perhaps under several names): the row as it is
        return replace(first, key=key, applies=applies, present=present)
    # several: the chosen process's row checks and defaults; another process's value is
    # checked by the first declaration (it is then refused unless it is the default)

    def row_of(cfg):
        return by_proc.get(cfg["weights"]["process"], first) if cfg.get("weights") else first

    def check(k, v, cfg=None):
        cfg = cfg or {}
        row = row_of(cfg)
        try:
            return row.check(k, v, cfg)
        except ConfigError as exc:
            msg, head = str(exc), f"{k} = {show(v)}"
            proc = cfg.get("weights", {}).get("process")
            if proc not in by_proc or not msg.startswith(head):
                raise
            raise schema.error(f"{head} with weights.process = {proc!r}{msg[len(head):]}") from None

    check.describe = lambda: "; ".join(f"{p}: {r.check.describe()}" for p, r in by_proc.items())
    doc = "; ".join(dict.fromkeys(r.doc for r in rows))
    rules = [r.rule for r in rows if r.rule is not None]
    return Param(key, first.default, _Described(check), doc, applies=applies,
                 rule=(lambda cfg: [r(cfg) for r in rules]) if rules else None,
                 default_from=lambda cfg: row_of(cfg).default_in(cfg), present=present)


@dataclass(frozen=True)
class _Described:
    """A check with a ``describe()`` (the key reference's "allowed" column)."""

    fn: object

    def describe(self) -> str:
        return self.fn.describe()

    def __call__(self, key, v, cfg=None):
        return self.fn(key, v, cfg)


def sync() -> None:
    """Bring the table's process keys up to date with the registry (cheap when unchanged)."""
    global _synced
    state = tuple(PROCESSES.items())
    if state == _synced:
        return
    _synced = state  # first: registering a row reads the table (and so calls this again)
    decl: dict[str, list] = {}
    for proc, cls in PROCESSES.items():
        for row in _rows(cls):
            name = row.key.split(".")[-1]
            decl.setdefault(name, []).append((proc, cls, row))
    table = {p.key: p for p in schema._PARAMS.values()}
    for name, d in decl.items():
        row = table.get(f"weights.{name}")
        if row is not None and not any(isinstance(c, ProcessWhen) for c in row.applies):
            _synced = ()
            raise schema.error(f"weights.process = {d[0][0]!r} declares the key 'weights.{name}', "
                               "a key of the configuration itself: a process's keys need names "
                               "of their own")
        schema.register_param(_merged(name, d), replace_existing=True)


def drop_inherited(cfg: dict, keys: set) -> None:
    """After an override of ``weights.process`` (``keys``: the dotted keys overridden), drop
    from ``cfg`` (in place) every inherited process key the new process does not read, or
    whose value its own row refuses (``weights.scheme = "euler_maruyama"`` for oscillating),
    unless it is overridden too: the new process's defaults apply."""
    w = cfg.get("weights")
    if not isinstance(w, dict) or not isinstance(w.get("process"), str):
        return
    try:
        get_process(w["process"])
    except ValueError:
        return  # validation names the bad value
    rows = {p.name: p for p in schema.params() if p.section == "weights"}
    own = {p.name: p for p in declared(w["process"])}
    kept = process_keys(w["process"])
    for name in [k for k in w if f"weights.{k}" not in keys]:
        row = rows.get(name)
        if row is None or not any(isinstance(c, ProcessWhen) for c in row.applies):
            continue  # not a process key (process, shared_path) or unknown: validation says
        if name not in kept:
            del w[name]
        elif name in own:
            try:
                own[name].check(f"weights.{name}", w[name], cfg)
            except ConfigError:
                del w[name]
