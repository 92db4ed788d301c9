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

The built-in table is declared in :mod:`wflow.config`. Another module adds its own keys with
:func:`register_param` or :func:`register_section_params` (e.g. a weight process declaring
``rate`` and ``noise_var`` under ``[weights]``, applying only when ``weights.process`` names
it). An explicit setting that cannot apply (its ``applies`` conditions fail) is an error
when its value differs from the default; defaults that do not apply stay quiet.

This module imports nothing of the model: constraints, conditions and rules are plain
callables, and the config layer fills the table.
"""

from __future__ import annotations

import copy
import difflib
import math
import numbers
import re
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from wflow.errors import ConfigError

__all__ = [
    "Param", "When", "Interval", "Integer", "Choice", "Boolean", "String", "Path", "Custom",
    "register_param", "register_section_params", "register_section", "params", "param",
    "sections", "defaults", "validate", "unknown_key", "bad", "error", "show", "typename",
    "is_int", "choices_text",
]

# --------------------------------------------------------------------------------------
# One-line messages
# --------------------------------------------------------------------------------------

_repr = reprlib.Repr()
_repr.maxstring, _repr.maxother, _repr.maxlist, _repr.maxtuple = 80, 80, 8, 8
_repr.maxdict, _repr.maxlevel, _repr.maxlong = 6, 3, 40
_LINE_BREAKS = str.maketrans({c: repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def typename(value) -> str:
    try:
        return type(value).__name__
    except Exception:  # noqa: BLE001
        return "object"


def show(value) -> str:
    """A short, one-line repr of any value (never raises)."""
    try:
        text = _repr.repr(value)
    except Exception:  # noqa: BLE001 - hostile __repr__, huge ints, deep nesting
        text = f"<{typename(value)}>"
    return text.translate(_LINE_BREAKS)


def key_text(key) -> str:
    return key if isinstance(key, str) else show(key)


def error(msg: str) -> ConfigError:
    return ConfigError(msg.translate(_LINE_BREAKS))


def bad(key: str, value, allowed: str) -> ConfigError:
    """``key = value: allowed`` as a ConfigError."""
    return error(f"{key} = {show(value)}: {allowed}")


def choices_text(choices) -> str:
    return ", ".join(repr(c) for c in choices)


def is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _num_text(x) -> str:
    return repr(x) if isinstance(x, float) else str(x)


# --------------------------------------------------------------------------------------
# Constraints: ``check(key, value, cfg) -> normalised value`` (cfg: the keys checked so far)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Integer:
    """An integer (not a bool, not a float) in ``lo..hi`` (either bound optional)."""

    lo: int | None = None
    hi: int | None = None

    def describe(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"an integer in {self.lo}..{self.hi}"
        return "an integer" + ("" if self.lo is None else f" >= {self.lo}")

    def __call__(self, key, v, cfg=None):
        allowed = f"must be {self.describe()}"
        if not is_int(v):
            raise bad(key, v, f"{allowed} (got {typename(v)})")
        v = int(v)
        if (self.lo is not None and v < self.lo) or (self.hi is not None and v > self.hi):
            raise bad(key, v, allowed)
        return v


@dataclass(frozen=True)
class Interval:
    """A finite real number (ints accepted and converted to float) in an interval.

    ``closed`` is "both", "left", "right" or "neither" (which ends belong to it);
    ``lo_text``/``hi_text`` name a bound in messages (e.g. "pi").
    """

    lo: float | None = None
    hi: float | None = None
    closed: str = "both"
    lo_text: str | None = None
    hi_text: str | None = None

    def describe(self) -> str:
        lo_open = self.closed in ("right", "neither")
        hi_open = self.closed in ("left", "neither")
        lo_t = self.lo_text or (None if self.lo is None else _num_text(self.lo))
        hi_t = self.hi_text or (None if self.hi is None else _num_text(self.hi))
        if self.lo is not None and self.hi is not None:
            return f"a number in {'(' if lo_open else '['}{lo_t}, {hi_t}{')' if hi_open else ']'}"
        if self.lo is not None:
            return f"a number {'>' if lo_open else '>='} {lo_t}"
        if self.hi is not None:
            return f"a number {'<' if hi_open else '<='} {hi_t}"
        return "a finite number"

    def __call__(self, key, v, cfg=None):
        allowed = f"must be {self.describe()}"
        if not _is_real(v):
            raise bad(key, v, f"{allowed} (got {typename(v)})")
        try:
            f = float(v)
        except (OverflowError, ValueError, TypeError):
            raise bad(key, v, f"{allowed} (too large for a float)") from None
        if not math.isfinite(f):
            raise bad(key, v, allowed.replace("a number", "a finite number", 1))
        lo_open = self.closed in ("right", "neither")
        hi_open = self.closed in ("left", "neither")
        if self.lo is not None and (f <= self.lo if lo_open else f < self.lo):
            raise bad(key, v, allowed)
        if self.hi is not None and (f >= self.hi if hi_open else f > self.hi):
            raise bad(key, v, allowed)
        return f


@dataclass(frozen=True)
class Choice:
    """One of a tuple of strings."""

    values: tuple

    def describe(self) -> str:
        return "one of " + choices_text(self.values)

    def __call__(self, key, v, cfg=None):
        if not isinstance(v, str) or v not in self.values:
            raise bad(key, v, f"allowed values are {choices_text(self.values)}")
        return str(v)


@dataclass(frozen=True)
class Boolean:
    """``true`` or ``false`` (numpy booleans accepted; numbers are not)."""

    def describe(self) -> str:
        return "true or false"

    def __call__(self, key, v, cfg=None):
        t = type(v)  # numpy.bool_ (no numpy import here)
        if not (isinstance(v, bool) or (getattr(t, "__module__", "") == "numpy"
                                        and t.__name__ in ("bool", "bool_"))):
            raise bad(key, v, f"must be true or false (got {typename(v)})")
        return bool(v)


@dataclass(frozen=True)
class String:
    """A string without NUL characters (non-blank if ``required``)."""

    required: bool = False
    what: str = "a string"

    def describe(self) -> str:
        return self.what if not self.required else f"a non-empty {self.what.removeprefix('a ')}"

    def __call__(self, key, v, cfg=None):
        if not isinstance(v, str):
            raise bad(key, v, f"must be {self.what} (got {typename(v)})")
        if "\x00" in v:
            raise bad(key, v, f"must be {self.what} without NUL characters")
        if self.required and not v.strip():
            raise bad(key, v, f"must be a non-empty {self.what.removeprefix('a ')}")
        return str(v)


def Path(required: bool = False) -> String:  # noqa: N802 - a constraint, named like the others
    """A file path (a string; ``""`` means unset unless ``required``)."""
    return String(required=required, what="a string (a file path)")


@dataclass(frozen=True)
class Custom:
    """Any check ``fn(key, value, cfg) -> normalised value``; ``text`` documents it."""

    fn: Callable
    text: str

    def describe(self) -> str:
        return self.text

    def __call__(self, key, v, cfg=None):
        return self.fn(key, v, cfg)


# --------------------------------------------------------------------------------------
# Conditions and parameters
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class When:
    """The condition ``key`` (a dotted key) has one of ``values``."""

    key: str
    values: tuple

    def __post_init__(self):
        if not isinstance(self.values, tuple):
            object.__setattr__(self, "values", (self.values,))

    def holds(self, cfg: Mapping) -> bool:
        section, name = self.key.split(".")
        return cfg[section][name] in self.values

    @property
    def text(self) -> str:
        if len(self.values) == 1:
            return f"{self.key} = {_value_text(self.values[0])}"
        return f"{self.key} in ({', '.join(map(_value_text, self.values))})"


def _value_text(v) -> str:
    """A value as in TOML for booleans (``true``), as in the messages otherwise (``'ou'``)."""
    return ("true" if v else "false") if isinstance(v, bool) else show(v)


_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Param:
    """One configuration key.

    Parameters
    ----------
    key : str
        ``"section.name"`` (the TOML table and key).
    default : object
        The value of a key left out (must pass ``check``).
    check : callable
        A constraint, ``check(key, value, cfg) -> normalised value``.
    doc : str
        One line, for the default TOML and the user guide.
    applies : tuple of When
        Conditions (:class:`When`) under which the key has an effect; an explicit value other
        than the default where one fails is an error.
    rule : callable, optional
        A cross-key check ``rule(cfg)`` on the normalised configuration (raises ConfigError).
    default_from : callable, optional
        ``default_from(cfg) -> default`` when the default depends on keys checked earlier
        (``default`` is still the vocabulary default of :func:`defaults`).
    """

    key: str
    default: object
    check: Callable
    doc: str
    applies: tuple = ()
    rule: Callable | None = None
    default_from: Callable | None = None

    def __post_init__(self):
        if isinstance(self.applies, When):
            object.__setattr__(self, "applies", (self.applies,))

    @property
    def section(self) -> str:
        return self.key.split(".")[0]

    @property
    def name(self) -> str:
        return self.key.split(".")[1]

    def default_in(self, cfg) -> object:
        return self.default_from(cfg) if self.default_from else copy.deepcopy(self.default)


_PARAMS: dict[str, Param] = {}
_SECTIONS: dict[str, str] = {}  # section -> one-line doc


def register_section(section: str, doc: str = "") -> None:
    """Declare a ``[section]`` (keys are added with :func:`register_param`)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", section):
        raise ValueError(f"section {section!r}: must be a name made of letters, digits and '_'")
    if doc or section not in _SECTIONS:
        _SECTIONS[section] = doc


def register_param(p: Param, *, replace_existing: bool = False) -> Param:
    """Add one key to the table (its section is created if new); returns it.

    The default must pass the check; a key already declared is refused unless
    ``replace_existing`` (then it keeps its place in the order).
    """
    if not isinstance(p, Param):
        raise TypeError(f"register_param: expected a Param (got {typename(p)})")
    if not _KEY.match(p.key):
        raise ValueError(f"Param key {p.key!r}: must be 'section.name'")
    if p.key in _PARAMS and not replace_existing:
        raise ValueError(f"Param {p.key!r} is already declared")
    if p.default_from is None:
        try:
            p.check(p.key, copy.deepcopy(p.default), defaults())
        except ConfigError as exc:
            raise ValueError(f"Param {p.key!r}: its default fails its own check ({exc})") from None
    register_section(p.section)
    _PARAMS[p.key] = p
    return p


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
    return list(_PARAMS.values())


def param(key: str) -> Param:
    return _PARAMS[key]


def sections() -> dict[str, str]:
    """``{section: doc}`` in table order."""
    return dict(_SECTIONS)


def defaults() -> dict:
    """The nested dict of every default (a fresh copy)."""
    out: dict = {s: {} for s in _SECTIONS}
    for p in _PARAMS.values():
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


def unknown_key(where: str, key, known: Sequence[str]) -> ConfigError:
    """``unknown key 'where.key': did you mean ...?`` for a sub-table (e.g. a layer)."""
    name = key_text(key)
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    hint = (f"did you mean {where + '.' + close[0]!r}?" if close
            else f"allowed keys are {choices_text(known)}")
    return error(f"unknown key {where + '.' + name!r}: {hint}")


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
    raw = _sections_of(cfg)
    if explicit is None:
        explicit = {f"{s}.{k}" for s, sec in raw.items() for k in sec}
    out: dict = {s: {} for s in _SECTIONS}
    for p in _PARAMS.values():
        sec = raw[p.section]
        value = sec[p.name] if p.name in sec else p.default_in(out)
        out[p.section][p.name] = p.check(p.key, value, out)
    for p in _PARAMS.values():
        if p.rule is not None:
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
                            f": cannot apply (only with {cond.text})")
    return out
