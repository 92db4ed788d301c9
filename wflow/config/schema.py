"""The configuration schema: one declarative table of parameters, and what is generated from it.

Every configuration key is one :class:`Param` — its dotted key, default, constraint, a
one-line doc, and optionally when it applies and a cross-key rule — registered in one
ordered table (like scikit-learn's ``_parameter_constraints``). From the table come:

* :func:`defaults` — the nested dict of every default (``wflow.config.DEFAULTS``);
* :func:`validate` — filling, checking and normalising a configuration, with one-line
  :class:`~wflow.errors.ConfigError` messages (``model.n = 1: must be an integer >= 2``,
  ``unknown key 'solver.dtt': did you mean 'solver.dt'?``);
* the annotated TOML (the embedded ``wflow/data/default.toml``) and the user guide's key
  reference (:mod:`wflow.config.files`: ``toml_document``, ``markdown_table``).

The built-in table is declared in :mod:`wflow.config`; the weight processes' keys come from
their classes (:mod:`wflow.config.process_keys`, a source of the table: :func:`register_source`).
Another module adds its own keys with :func:`register_param` or
:func:`register_section_params`. An explicit setting that cannot apply (its ``applies``
conditions fail) is an error when its value differs from the default; defaults that do not
apply stay quiet.

The vocabulary (:class:`Param`, the constraints, :class:`When`, the messages) is
:mod:`wflow.params`, re-exported here. This module imports nothing of the model: constraints,
conditions and rules are plain callables, and the config layer fills the table.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from wflow.errors import ConfigError
from wflow.params import (  # noqa: F401 - the vocabulary, re-exported
    Boolean,
    Choice,
    Custom,
    Integer,
    Interval,
    Param,
    Path,
    String,
    When,
    _value_text,
    bad,
    choices_text,
    declared,
    error,
    is_int,
    key_text,
    show,
    typename,
    unknown_key,
)

__all__ = [
    "Param", "When", "Interval", "Integer", "Choice", "Boolean", "String", "Path", "Custom",
    "register_param", "register_section_params", "register_section", "register_source",
    "params", "param", "sections", "defaults", "validate", "unknown_key", "bad", "error", "show",
    "typename", "is_int", "choices_text",
]

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")
_SOURCES: list[Callable] = []  # callables that bring the table up to date before it is read
_syncing = False


def register_source(fn: Callable) -> None:
    """``fn()`` is called before the table is read (:func:`params`, :func:`defaults`,
    :func:`validate`): it may register keys declared elsewhere (the weight processes'
    keys, :mod:`wflow.config.process_keys`)."""
    if fn not in _SOURCES:
        _SOURCES.append(fn)


def _sync() -> None:
    global _syncing
    if _syncing:
        return
    _syncing = True
    try:
        for fn in _SOURCES:
            fn()
    finally:
        _syncing = False


_PARAMS: dict[str, Param] = {}
_SECTIONS: dict[str, str] = {}  # section -> one-line doc


def register_section(section: str, doc: str = "") -> None:
    """Declare a ``[section]`` (keys are added with :func:`register_param`)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", section):
        raise ValueError(f"section {section!r}: must be a name made of letters, digits and '_'")
    if doc or section not in _SECTIONS:
        _SECTIONS[section] = doc


def register_param(p: Param, *, replace_existing: bool = False, after: str | None = None) -> Param:
    """Add one key to the table (its section is created if new); returns it.

    The default must pass the check; a key already declared is refused unless
    ``replace_existing`` (then it keeps its place in the order). ``after``: the key it
    follows in the table (default: the end).
    """
    if not isinstance(p, Param):
        raise TypeError(f"register_param: expected a Param (got {typename(p)})")
    if not _KEY.match(p.key):
        raise ValueError(f"Param key {p.key!r}: must be 'section.name'")
    if p.key in _PARAMS and not replace_existing:
        raise ValueError(f"Param {p.key!r} is already declared")
    if p.default_from is None:
        try:
            p.check(p.key, copy.deepcopy(p.default), _defaults())
        except ConfigError as exc:
            raise ValueError(f"Param {p.key!r}: its default fails its own check ({exc})") from None
    register_section(p.section)
    if after is not None and after in _PARAMS and p.key not in _PARAMS:
        items = list(_PARAMS.items())
        i = [k for k, _ in items].index(after) + 1
        _PARAMS.clear()
        _PARAMS.update(items[:i] + [(p.key, p)] + items[i:])
    else:
        _PARAMS[p.key] = p
    return p


_FROM_DECLARED: set[str] = set()  # the keys read from the features' declarations


def _declared_source() -> None:
    """Read the keys the features declare (:func:`wflow.params.declare`) into the table."""
    rows, docs = declared()
    keys = {p.key for p, _ in rows}
    for key in [k for k in _FROM_DECLARED if k not in keys]:  # withdrawn
        _FROM_DECLARED.discard(key)
        _PARAMS.pop(key, None)
    for section, doc in docs.items():
        if section not in _SECTIONS or not _SECTIONS[section]:
            register_section(section, doc)
    waiting = [(p, after) for p, after in rows if p.key not in _PARAMS]
    while waiting:  # a row whose place is a key declared later waits for it
        left = [(p, a) for p, a in waiting if a is not None and a not in _PARAMS]
        placed = False
        for p, after in waiting:
            if (p, after) not in left:
                register_param(p, after=after)
                _FROM_DECLARED.add(p.key)
                placed = True
        if not placed:
            raise ValueError(f"Param {left[0][0].key!r}: declared after {left[0][1]!r}, "
                             "which is not a key of the table")
        waiting = left


def register_section_params(section: str, new: Sequence[Param], when: When | None = None,
                            **kw) -> list[Param]:
    """Register several keys of one section (``Param.key`` may be the bare name); ``when``
    is added to each key's ``applies`` (e.g. ``When("weights.process", "ou")``)."""
    out = []
    for p in new:
        key = p.key if "." in p.key else f"{section}.{p.key}"
        if key.split(".")[0] != section:
            raise ValueError(f"Param {key!r} is not in section [{section}]")
        applies = p.applies + ((when,) if when is not None else ())
        out.append(register_param(replace(p, key=key, applies=applies), **kw))
    return out


def params() -> list[Param]:
    """Every declared key, in table order."""
    _sync()
    return list(_PARAMS.values())


def param(key: str) -> Param:
    _sync()
    return _PARAMS[key]


def sections() -> dict[str, str]:
    """``{section: doc}`` in table order."""
    return dict(_SECTIONS)


def defaults() -> dict:
    """The nested dict of every default (a fresh copy)."""
    _sync()
    return _defaults()


def _defaults() -> dict:
    out: dict = {s: {} for s in _SECTIONS}
    for p in list(_PARAMS.values()):
        if p.present is None or p.present(out):
            out[p.section][p.name] = copy.deepcopy(p.default)
    return out


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------


def _keys_of(section: str) -> list[str]:
    return [p.name for p in _PARAMS.values() if p.section == section]


def _suggest_key(section: str, key: str) -> str | None:
    known = _keys_of(section)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"{section}.{close[0]}"
    for p in _PARAMS.values():  # right key, wrong section
        if p.name == key:
            return p.key
    folded = {k.lower(): k for k in known}
    if key.lower() in folded:
        return f"{section}.{folded[key.lower()]}"
    return None


def _unknown_key(section: str, key) -> ConfigError:
    name = key_text(key)
    dotted = repr(f"{section}.{name}")
    hint = _suggest_key(section, name)
    if hint is not None:
        return error(f"unknown key {dotted}: did you mean {hint!r}?")
    return error(f"unknown key {dotted}: allowed keys in [{section}] are "
                 f"{choices_text(_keys_of(section))}")


def _unknown_section(key) -> ConfigError:
    name = key_text(key)
    close = difflib.get_close_matches(name, list(_SECTIONS), n=1, cutoff=0.6)
    if close:
        return error(f"unknown section {name!r}: did you mean {close[0]!r}?")
    for p in _PARAMS.values():  # a key written outside its section
        if p.name == name:
            return error(f"unknown section {name!r}: did you mean {p.key!r} "
                         f"(put it under [{p.section}])?")
    return error(f"unknown section {name!r}: allowed sections are {choices_text(_SECTIONS)}")


def _sections_of(cfg) -> dict:
    """Check the top level and the key names; {section: raw mapping} (missing: empty)."""
    if not isinstance(cfg, Mapping):
        raise error(f"config = {show(cfg)}: must be a table of sections (got {typename(cfg)})")
    for key in cfg:
        if not isinstance(key, str) or key not in _SECTIONS:
            raise _unknown_section(key)
    raw = {}
    for section in _SECTIONS:
        sec = cfg.get(section, {})
        if not isinstance(sec, Mapping):
            raise bad(section, sec, f"must be a table [{section}] (got {typename(sec)})")
        known = set(_keys_of(section))
        for key in sec:
            if not isinstance(key, str) or key not in known:
                raise _unknown_key(section, key)
        raw[section] = sec
    return raw


def validate(cfg, explicit=None) -> dict:
    """Fill defaults, check every key and rule; return a new normalised dict.

    ``explicit``: the dotted keys the user set (None: every key present in ``cfg``). An
    explicit key whose ``applies`` conditions fail is an error unless its value is the
    default. Raises :class:`ConfigError` (and nothing else) with a one-line message.
    """
    try:
        return _validate(cfg, explicit)
    except ConfigError:
        raise
    except RecursionError:
        raise error("config: nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - last line of defence: hostile mappings etc.
        raise error(f"config: cannot be read ({typename(exc)}: {show(str(exc))})") from None


def _validate(cfg, explicit) -> dict:
    _sync()
    raw = _sections_of(cfg)
    if explicit is None:
        explicit = {f"{s}.{k}" for s, sec in raw.items() for k in sec}
    out: dict = {s: {} for s in _SECTIONS}
    absent = []  # keys present only under a condition that fails (a plug-in process's keys)
    for p in _PARAMS.values():
        sec = raw[p.section]
        value = sec[p.name] if p.name in sec else p.default_in(out)
        out[p.section][p.name] = p.check(p.key, value, out)
        if p.present is not None and not p.present(out):
            absent.append(p)
    for p in _PARAMS.values():
        if p.rule is not None and p not in absent:
            p.rule(out)
    for p in _PARAMS.values():
        if p.key not in explicit or not p.applies:
            continue
        value = out[p.section][p.name]
        if value == p.check(p.key, p.default_in(out), out):
            continue  # the default: quiet, whether it applies or not
        for cond in p.applies:
            if not cond.holds(out):
                section, name = cond.key.split(".")
                raise error(f"{p.key} = {show(value)} with {cond.key} = "
                            f"{_value_text(out[section][name])}"
                            f": cannot apply (only with {cond.text}){cond.hint(out)}")
    for p in absent:
        del out[p.section][p.name]
    return out


register_source(_declared_source)
