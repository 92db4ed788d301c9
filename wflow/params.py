r"""The vocabulary of configuration keys: :class:`Param` (one key: default, constraint, doc,
when it applies, cross-key rule), the constraints, the conditions and the one-line messages.

.. math::

    \text{check}: (\text{key}, \text{value}, \text{cfg}) \mapsto \text{normalised value}
    \quad\text{or one ConfigError line} ``key = value: what is allowed``.

It imports nothing of wflow but the errors, so every layer may declare keys with it: a weight
process declares its ``[weights]`` keys on its class (:mod:`wflow.model.processes`), the
configuration layer collects them into its one table (:mod:`wflow.config.schema`, which
re-exports these names).
"""

from __future__ import annotations

import copy
import difflib
import math
import numbers
import re
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from wflow.errors import ConfigError

__all__ = [
    "Param", "When", "Interval", "Integer", "Choice", "Boolean", "String", "Path", "Custom",
    "unknown_key", "bad", "error", "show", "typename", "is_int", "choices_text", "key_text",
    "declare", "declared", "section_doc", "withdraw",
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

    def hint(self, cfg: Mapping) -> str:
        """Text appended to a "cannot apply" error (e.g. the keys that do apply)."""
        return ""

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
    present : callable, optional
        ``present(cfg) -> bool``: whether the key is part of the normalised configuration
        (None: always; a plug-in weight process's key: only with its process, so a run that
        does not use the plug-in stores nothing of it).
    """

    key: str
    default: object
    check: Callable
    doc: str
    applies: tuple = ()
    rule: Callable | None = None
    default_from: Callable | None = None
    present: Callable | None = None

    def __post_init__(self):
        if isinstance(self.applies, When):
            object.__setattr__(self, "applies", (self.applies,))

    @property
    def section(self) -> str:
        return self.key.split(".")[0]

    @property
    def name(self) -> str:
        return self.key.split(".")[-1]

    def default_in(self, cfg) -> object:
        return self.default_from(cfg) if self.default_from else copy.deepcopy(self.default)


def unknown_key(where: str, key, known: Sequence[str]) -> ConfigError:
    """``unknown key 'where.key': did you mean ...?`` for a sub-table (e.g. a layer)."""
    name = key_text(key)
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    hint = (f"did you mean {where + '.' + close[0]!r}?" if close
            else f"allowed keys are {choices_text(known)}")
    return error(f"unknown key {where + '.' + name!r}: {hint}")


# --------------------------------------------------------------------------------------
# Keys declared by the features that own them
# --------------------------------------------------------------------------------------

#: (Param, the key it follows in the table or None for the end of its section), in order
_DECLARED: list[tuple[Param, str | None]] = []
#: section -> one-line doc of a section a feature declares
_SECTION_DOCS: dict[str, str] = {}


def declare(*rows: Param, after: str | None = None) -> tuple[Param, ...]:
    """Declare the configuration keys of a feature, in the module that implements it.

    Each row is a :class:`Param` (default, constraint, doc, when it applies, cross-key rule).
    The configuration layer reads every declared row into its one table
    (:mod:`wflow.config.schema`): the keys follow ``after`` (a key of the table) in the
    generated files and in validation, or end their section; a feature's rule sees the whole
    normalised configuration. A key declared twice is refused.
    """
    known = {p.key for p, _ in _DECLARED}
    for p in rows:
        if not isinstance(p, Param):
            raise TypeError(f"declare: expected Param rows (got {typename(p)})")
        if p.key in known:
            raise ValueError(f"Param {p.key!r} is already declared")
        known.add(p.key)
    prev = after
    for p in rows:
        _DECLARED.append((p, prev))
        prev = p.key if prev is not None else None
    return rows


def section_doc(section: str, doc: str) -> None:
    """The one-line doc of a ``[section]`` whose keys a feature declares."""
    _SECTION_DOCS[section] = doc


def declared() -> tuple[list[tuple[Param, str | None]], dict[str, str]]:
    """The declared rows with their places, and the declared section docs."""
    return list(_DECLARED), dict(_SECTION_DOCS)


def withdraw(*keys: str) -> None:
    """Forget keys declared with :func:`declare` (a plug-in unloaded, a test's feature)."""
    _DECLARED[:] = [(p, a) for p, a in _DECLARED if p.key not in keys]
