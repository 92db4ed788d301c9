"""Run configuration: the TOML vocabulary of [model §10], its defaults and its validation.

A run is one nested dict ``{section: {key: value}}`` (the same shape as the TOML
document). :data:`DEFAULTS` holds every key with its default value; :func:`validate`
fills missing keys from it, checks every value and every cross-field rule, and
returns a new, normalised dict. Every problem raises :class:`~wflow.errors.ConfigError`
with a one-line message naming the dotted key, the offending value and what is allowed;
validation never raises anything else, whatever the input.

Choices (see also the README):

* Unset file paths are the empty string ``""`` and an unset layer list is ``[]``, so
  a validated configuration is always representable in TOML and in JSON.
* Integers are accepted where floats are expected (and converted); floats are *not*
  accepted where integers are expected; booleans are never numbers.
* ``weights.scheme`` left unset with ``weights.process = "oscillating"`` becomes
  ``"euler"``; an override that changes ``weights.process`` drops an inherited
  ``weights.scheme`` that the new process does not allow (unless the scheme is
  overridden too), so the process' default scheme applies.
* ``model.laplacian_heads`` given as an integer ``k`` means the last ``k`` heads; it is
  normalised to the sorted list of indices.
* A configuration file is filled from :data:`DEFAULTS` (the vocabulary defaults), not
  from the embedded default run ``wflow/data/default.toml``.
"""

from __future__ import annotations

import copy
import difflib
import functools
import hashlib
import importlib.resources
import json
import math
import numbers
import os
import re
import reprlib
import tomllib
from collections.abc import Mapping

from wflow.errors import ConfigError

__all__ = [
    "DEFAULTS",
    "default_config",
    "load_toml",
    "parse_override",
    "apply_overrides",
    "validate",
    "resolve",
    "config_hash",
    "n_steps",
]

# --------------------------------------------------------------------------------------
# The vocabulary
# --------------------------------------------------------------------------------------

DEFAULTS: dict = {
    "model": {
        "d": 3,
        "n": 200,
        "beta": 1.0,
        "heads": 10,
        "normalization": "head",
        "sign": "descent",
        "laplacian_heads": [],
        "mask": "none",
        "values": "tied",
    },
    "init": {
        "tokens": "octahedral",
        "token_noise": 0.05,
        "kappa": 10.0,
        "weights": "symmetric_gaussian",
        "seed": 0,
        "tokens_file": "",
        "weights_file": "",
        "per_path_tokens": False,
        "per_path_weights": False,
    },
    "weights": {
        "process": "ou",
        "rate": 1.0,
        "mean": 1.0,
        "noise_var": 2.0,
        "scheme": "euler_maruyama",
        "phase": "shared",
        "layers": [],
        "file": "",
    },
    "solver": {
        "method": "euler",
        "dt": 0.005,
        "T": 20.0,
        "record_every": 5,
        "paths": 1,
        "backend": "numba",
        "precision": "float64",
        "exp": "fast",
        "jko_tol": 1e-10,
        "jko_maxiter": 200,
    },
    "diagnostics": {
        "ledger": True,
        "clustering": True,
        "cluster_angle": 0.1,
        "w2": False,
        "max_pairwise_n": 2000,
    },
    "output": {
        "path": "wflow_run.h5",
        "store_tokens": True,
        "store_weights": False,
        "checkpoint_every": 200,
        "overwrite": False,
    },
}

NORMALIZATIONS = ("head", "joint", "none")
SIGNS = ("descent", "ascent")
MASKS = ("none", "causal")
VALUES = ("tied", "identity", "gaussian")
TOKEN_INITS = ("octahedral", "uniform", "vmf", "file")
WEIGHT_INITS = ("symmetric_gaussian", "identity", "file")
PROCESSES = ("frozen", "ou", "oscillating", "layers", "file")
SCHEMES = ("euler_maruyama", "exact", "euler")
SCHEMES_BY_PROCESS = {"ou": ("euler_maruyama", "exact"), "oscillating": ("euler", "exact")}
DEFAULT_SCHEME = {"ou": "euler_maruyama", "oscillating": "euler"}
PHASES = ("shared", "spread")
METHODS = ("euler", "heun", "rk4", "jko")
ENERGY_METHODS = ("jko",)
BACKENDS = ("numba", "numpy")
PRECISIONS = ("float64", "float32")
EXPS = ("fast", "libm")
LAYER_KEYS = ("duration", "weights", "seed")
LAYER_WEIGHTS = ("identity", "symmetric_gaussian")  # anything else is a file path

#: relative tolerance of the "whole number of steps" rule for solver.T / solver.dt
STEP_RTOL = 1e-9

_OVERRIDE_KEY = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")

# --------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80
_repr.maxlist = 8
_repr.maxtuple = 8
_repr.maxdict = 6
_repr.maxlevel = 3
_repr.maxlong = 40

_LINE_BREAKS = str.maketrans(
    {c: repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}
)


def _one_line(text: str) -> str:
    return text.translate(_LINE_BREAKS)


def _show(value) -> str:
    """A short, one-line repr of any value (never raises)."""
    try:
        text = _repr.repr(value)
    except Exception:  # noqa: BLE001 - hostile __repr__, huge ints, deep nesting
        text = f"<{_typename(value)}>"
    return _one_line(text)


def _typename(value) -> str:
    try:
        return type(value).__name__
    except Exception:  # noqa: BLE001
        return "object"


def _key_text(key) -> str:
    if isinstance(key, str):
        return key
    return _show(key)


def _error(msg: str) -> ConfigError:
    return ConfigError(_one_line(msg))


def _bad(key: str, value, allowed: str) -> ConfigError:
    return _error(f"{key} = {_show(value)}: {allowed}")


def _choices_text(choices) -> str:
    return ", ".join(repr(c) for c in choices)


# --------------------------------------------------------------------------------------
# Scalar checkers (each returns the normalised value or raises ConfigError)
# --------------------------------------------------------------------------------------


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _int(key, v, lo=None, hi=None):
    if lo is not None and hi is not None:
        allowed = f"must be an integer in {lo}..{hi}"
    elif lo is not None:
        allowed = f"must be an integer >= {lo}"
    else:
        allowed = "must be an integer"
    if not _is_int(v):
        raise _bad(key, v, f"{allowed} (got {_typename(v)})")
    v = int(v)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise _bad(key, v, allowed)
    return v


def _float(key, v, lo=None, lo_open=False, hi=None, hi_open=False, lo_text=None, hi_text=None):
    lo_t = lo_text if lo_text is not None else (None if lo is None else _num_text(lo))
    hi_t = hi_text if hi_text is not None else (None if hi is None else _num_text(hi))
    if lo is not None and hi is not None:
        allowed = (
            f"must be a number in {'(' if lo_open else '['}{lo_t}, {hi_t}{')' if hi_open else ']'}"
        )
    elif lo is not None:
        allowed = f"must be a number {'>' if lo_open else '>='} {lo_t}"
    elif hi is not None:
        allowed = f"must be a number {'<' if hi_open else '<='} {hi_t}"
    else:
        allowed = "must be a finite number"
    if not _is_real(v):
        raise _bad(key, v, f"{allowed} (got {_typename(v)})")
    try:
        f = float(v)
    except (OverflowError, ValueError, TypeError):
        raise _bad(key, v, f"{allowed} (too large for a float)") from None
    if not math.isfinite(f):
        raise _bad(key, v, allowed.replace("a number", "a finite number", 1))
    if lo is not None and (f <= lo if lo_open else f < lo):
        raise _bad(key, v, allowed)
    if hi is not None and (f >= hi if hi_open else f > hi):
        raise _bad(key, v, allowed)
    return f


def _num_text(x) -> str:
    return repr(x) if isinstance(x, float) else str(x)


def _is_bool(v) -> bool:
    if isinstance(v, bool):
        return True
    t = type(v)  # numpy.bool_ (no numpy import here)
    return getattr(t, "__module__", "") == "numpy" and t.__name__ in ("bool", "bool_")


def _bool(key, v):
    if not _is_bool(v):
        raise _bad(key, v, f"must be true or false (got {_typename(v)})")
    return bool(v)


def _choice(key, v, choices):
    if not isinstance(v, str) or v not in choices:
        raise _bad(key, v, f"allowed values are {_choices_text(choices)}")
    return str(v)


def _str(key, v, required=False, what="a string"):
    if not isinstance(v, str):
        raise _bad(key, v, f"must be {what} (got {_typename(v)})")
    if "\x00" in v:
        raise _bad(key, v, f"must be {what} without NUL characters")
    if required and not v.strip():
        raise _bad(key, v, f"must be a non-empty {what.removeprefix('a ')}")
    return str(v)


# --------------------------------------------------------------------------------------
# Unknown keys
# --------------------------------------------------------------------------------------


def _suggest_key(section: str, key: str) -> str | None:
    known = list(DEFAULTS[section])
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"{section}.{close[0]}"
    for other, keys in DEFAULTS.items():  # right key, wrong section
        if key in keys:
            return f"{other}.{key}"
    folded = {k.lower(): k for k in known}
    if key.lower() in folded:
        return f"{section}.{folded[key.lower()]}"
    return None


def _unknown_key(section: str, key) -> ConfigError:
    name = _key_text(key)
    dotted = repr(f"{section}.{name}")
    hint = _suggest_key(section, name)
    if hint is not None:
        return _error(f"unknown key {dotted}: did you mean {hint!r}?")
    return _error(
        f"unknown key {dotted}: allowed keys in [{section}] are {_choices_text(DEFAULTS[section])}"
    )


def _unknown_section(key) -> ConfigError:
    name = _key_text(key)
    close = difflib.get_close_matches(name, list(DEFAULTS), n=1, cutoff=0.6)
    if close:
        return _error(f"unknown section {name!r}: did you mean {close[0]!r}?")
    for section, keys in DEFAULTS.items():  # a key written outside its section
        if name in keys:
            return _error(
                f"unknown section {name!r}: did you mean {section + '.' + name!r} "
                f"(put it under [{section}])?"
            )
    return _error(f"unknown section {name!r}: allowed sections are {_choices_text(DEFAULTS)}")


# --------------------------------------------------------------------------------------
# validate
# --------------------------------------------------------------------------------------


def _sections(cfg) -> dict:
    """Check the top level and return {section: raw mapping} (missing sections empty)."""
    if not isinstance(cfg, Mapping):
        raise _error(f"config = {_show(cfg)}: must be a table of sections (got {_typename(cfg)})")
    raw = {}
    for key in cfg:
        if not isinstance(key, str) or key not in DEFAULTS:
            raise _unknown_section(key)
    for section in DEFAULTS:
        sec = cfg.get(section, {})
        if not isinstance(sec, Mapping):
            raise _bad(section, sec, f"must be a table [{section}] (got {_typename(sec)})")
        for key in sec:
            if not isinstance(key, str) or key not in DEFAULTS[section]:
                raise _unknown_key(section, key)
        raw[section] = sec
    return raw


def _laplacian(value, heads: int) -> list[int]:
    key = "model.laplacian_heads"
    if _is_int(value):
        k = int(value)
        if not 0 <= k <= heads:
            raise _bad(
                key,
                value,
                f"an integer k (the last k heads) must satisfy 0 <= k <= model.heads = {heads}",
            )
        return list(range(heads - k, heads))
    if not isinstance(value, (list, tuple)):
        raise _bad(
            key,
            value,
            "must be a list of head indices or an integer k (the last k heads) "
            f"(got {_typename(value)})",
        )
    out = []
    for item in value:
        if not _is_int(item):
            raise _bad(
                key, value, f"indices must be integers (got {_typename(item)} {_show(item)})"
            )
        i = int(item)
        if not 0 <= i < heads:
            raise _bad(key, value, f"indices must be in 0..{heads - 1} (model.heads = {heads})")
        if i in out:
            raise _bad(key, value, f"indices must be distinct (index {i} repeated)")
        out.append(i)
    return sorted(out)


def _layers(value) -> list[dict]:
    key = "weights.layers"
    table = "a list of tables {duration, weights, seed}"
    if not isinstance(value, (list, tuple)):
        raise _bad(key, value, f"must be {table} (got {_typename(value)})")
    out = []
    for i, layer in enumerate(value):
        lkey = f"{key}[{i}]"
        if not isinstance(layer, Mapping):
            raise _bad(lkey, layer, f"must be a table {{duration, weights, seed}} "
                                    f"(got {_typename(layer)})")
        for k in layer:
            if not isinstance(k, str) or k not in LAYER_KEYS:
                name = _key_text(k)
                close = difflib.get_close_matches(name, LAYER_KEYS, n=1, cutoff=0.6)
                hint = (f"did you mean {lkey + '.' + close[0]!r}?" if close
                        else f"allowed keys are {_choices_text(LAYER_KEYS)}")
                raise _error(f"unknown key {lkey + '.' + name!r}: {hint}")
        for k in ("duration", "weights"):
            if k not in layer:
                raise _error(f"{lkey}.{k} is missing: every layer needs 'duration' and 'weights'")
        duration = _float(f"{lkey}.duration", layer["duration"], lo=0, lo_open=True)
        weights = _str(
            f"{lkey}.weights",
            layer["weights"],
            required=True,
            what=f"a string ({_choices_text(LAYER_WEIGHTS)} or a file path)",
        )
        seed = _int(f"{lkey}.seed", layer.get("seed", 0), lo=0)
        out.append({"duration": duration, "weights": weights, "seed": seed})
    return out


def n_steps(cfg: dict) -> int:
    """Number of steps ``round(T/dt)`` of a validated configuration."""
    return int(round(cfg["solver"]["T"] / cfg["solver"]["dt"]))


def validate(cfg: dict) -> dict:
    """Fill defaults, check every value and cross-field rule, return a new normalised dict.

    Raises :class:`ConfigError` (and nothing else) with a one-line message.
    """
    try:
        return _validate(cfg)
    except ConfigError:
        raise
    except RecursionError:
        raise _error("config: nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - last line of defence: hostile mappings etc.
        raise _error(f"config: cannot be read ({_typename(exc)}: {_show(str(exc))})") from None


def _validate(cfg) -> dict:
    raw = _sections(cfg)

    def get(section, key):
        sec = raw[section]
        return sec[key] if key in sec else copy.deepcopy(DEFAULTS[section][key])

    out: dict = {}

    # [model]
    m = {}
    m["d"] = _int("model.d", get("model", "d"), lo=2)
    m["n"] = _int("model.n", get("model", "n"), lo=2)
    m["beta"] = _float("model.beta", get("model", "beta"), lo=0, lo_open=True)
    m["heads"] = _int("model.heads", get("model", "heads"), lo=1)
    m["normalization"] = _choice(
        "model.normalization", get("model", "normalization"), NORMALIZATIONS
    )
    m["sign"] = _choice("model.sign", get("model", "sign"), SIGNS)
    m["laplacian_heads"] = _laplacian(get("model", "laplacian_heads"), m["heads"])
    m["mask"] = _choice("model.mask", get("model", "mask"), MASKS)
    m["values"] = _choice("model.values", get("model", "values"), VALUES)
    out["model"] = m

    # [init]
    i = {}
    i["tokens"] = _choice("init.tokens", get("init", "tokens"), TOKEN_INITS)
    i["token_noise"] = _float("init.token_noise", get("init", "token_noise"), lo=0)
    i["kappa"] = _float("init.kappa", get("init", "kappa"), lo=0, lo_open=True)
    i["weights"] = _choice("init.weights", get("init", "weights"), WEIGHT_INITS)
    i["seed"] = _int("init.seed", get("init", "seed"), lo=0)
    i["tokens_file"] = _str(
        "init.tokens_file", get("init", "tokens_file"), what="a string (a file path)"
    )
    i["weights_file"] = _str(
        "init.weights_file", get("init", "weights_file"), what="a string (a file path)"
    )
    i["per_path_tokens"] = _bool("init.per_path_tokens", get("init", "per_path_tokens"))
    i["per_path_weights"] = _bool("init.per_path_weights", get("init", "per_path_weights"))
    if i["tokens"] == "file" and not i["tokens_file"].strip():
        raise _bad("init.tokens_file", i["tokens_file"],
                   "must name a file (a non-empty path) when init.tokens = 'file'")
    if i["weights"] == "file" and not i["weights_file"].strip():
        raise _bad("init.weights_file", i["weights_file"],
                   "must name a file (a non-empty path) when init.weights = 'file'")
    out["init"] = i

    # [weights]
    w = {}
    w["process"] = _choice("weights.process", get("weights", "process"), PROCESSES)
    w["rate"] = _float("weights.rate", get("weights", "rate"), lo=0, lo_open=True)
    w["mean"] = _float("weights.mean", get("weights", "mean"))
    w["noise_var"] = _float("weights.noise_var", get("weights", "noise_var"), lo=0)
    if "scheme" in raw["weights"]:
        scheme = _choice("weights.scheme", raw["weights"]["scheme"], SCHEMES)
    else:
        scheme = DEFAULT_SCHEME.get(w["process"], DEFAULTS["weights"]["scheme"])
    allowed = SCHEMES_BY_PROCESS.get(w["process"])
    if allowed is not None and scheme not in allowed:
        raise _error(
            f"weights.scheme = {scheme!r} with weights.process = {w['process']!r}: "
            f"allowed values are {_choices_text(allowed)}"
        )
    w["scheme"] = scheme
    w["phase"] = _choice("weights.phase", get("weights", "phase"), PHASES)
    w["layers"] = _layers(get("weights", "layers"))
    w["file"] = _str("weights.file", get("weights", "file"), what="a string (a file path)")
    if w["process"] == "layers" and not w["layers"]:
        raise _bad("weights.layers", w["layers"],
                   "must be a non-empty list of tables {duration, weights, seed} "
                   "when weights.process = 'layers'")
    if w["process"] == "file" and not w["file"].strip():
        raise _bad("weights.file", w["file"],
                   "must name a file (a non-empty path) when weights.process = 'file'")
    out["weights"] = w

    # [solver]
    s = {}
    s["method"] = _choice("solver.method", get("solver", "method"), METHODS)
    s["dt"] = _float("solver.dt", get("solver", "dt"), lo=0, lo_open=True)
    s["T"] = _float("solver.T", get("solver", "T"), lo=0, lo_open=True)
    s["record_every"] = _int("solver.record_every", get("solver", "record_every"), lo=1)
    s["paths"] = _int("solver.paths", get("solver", "paths"), lo=1)
    s["backend"] = _choice("solver.backend", get("solver", "backend"), BACKENDS)
    s["precision"] = _choice("solver.precision", get("solver", "precision"), PRECISIONS)
    s["exp"] = _choice("solver.exp", get("solver", "exp"), EXPS)
    s["jko_tol"] = _float("solver.jko_tol", get("solver", "jko_tol"), lo=0, lo_open=True)
    s["jko_maxiter"] = _int("solver.jko_maxiter", get("solver", "jko_maxiter"), lo=1)
    if s["T"] < s["dt"]:
        raise _bad("solver.T", s["T"], f"must be >= solver.dt = {s['dt']!r}")
    ratio = s["T"] / s["dt"]
    if not math.isfinite(ratio):
        raise _bad("solver.T", s["T"], f"must be a whole number of steps of solver.dt = "
                                       f"{s['dt']!r} (T/dt overflows)")
    steps = int(round(ratio))
    if steps < 1 or abs(steps * s["dt"] - s["T"]) > STEP_RTOL * s["T"]:
        raise _bad("solver.T", s["T"],
                   f"must be a whole number of steps of solver.dt (T/dt = {ratio:.10g})")
    if s["record_every"] > steps:
        raise _bad("solver.record_every", s["record_every"],
                   f"must be <= the number of steps round(solver.T/solver.dt) = {steps}")
    if s["method"] in ENERGY_METHODS and m["mask"] == "causal":
        raise _error(
            f"solver.method = {s['method']!r} with model.mask = 'causal': "
            "energy-based methods are refused under the causal mask"
        )
    out["solver"] = s

    # [diagnostics]
    g = {}
    g["ledger"] = _bool("diagnostics.ledger", get("diagnostics", "ledger"))
    g["clustering"] = _bool("diagnostics.clustering", get("diagnostics", "clustering"))
    g["cluster_angle"] = _float(
        "diagnostics.cluster_angle", get("diagnostics", "cluster_angle"),
        lo=0, lo_open=True, hi=math.pi, hi_open=True, hi_text="pi",
    )
    g["w2"] = _bool("diagnostics.w2", get("diagnostics", "w2"))
    g["max_pairwise_n"] = _int(
        "diagnostics.max_pairwise_n", get("diagnostics", "max_pairwise_n"), lo=2
    )
    out["diagnostics"] = g

    # [output]
    o = {}
    o["path"] = _str("output.path", get("output", "path"), required=True,
                     what="a string (a file path)")
    o["store_tokens"] = _bool("output.store_tokens", get("output", "store_tokens"))
    o["store_weights"] = _bool("output.store_weights", get("output", "store_weights"))
    o["checkpoint_every"] = _int(
        "output.checkpoint_every", get("output", "checkpoint_every"), lo=1
    )
    o["overwrite"] = _bool("output.overwrite", get("output", "overwrite"))
    out["output"] = o
    return out


# --------------------------------------------------------------------------------------
# Loading, overrides, resolution
# --------------------------------------------------------------------------------------


def load_toml(path) -> dict:
    """Read a TOML file with the standard library; every failure is a ConfigError."""
    try:
        name = os.fspath(path)
    except TypeError:
        raise _error(f"config file {_show(path)}: must be a path "
                     f"(got {_typename(path)})") from None
    shown = _show(str(name) if not isinstance(name, bytes) else name)
    try:
        with open(name, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise _error(f"config file {shown}: file not found") from None
    except IsADirectoryError:
        raise _error(f"config file {shown}: is a directory, not a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise _error(f"config file {shown}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise _error(f"config file {shown}: not UTF-8 text ({exc.reason} "
                     f"at byte {exc.start})") from None
    except OSError as exc:
        raise _error(f"config file {shown}: {exc.strerror or _typename(exc)}") from None
    except RecursionError:
        raise _error(f"config file {shown}: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's digit limit
        raise _error(f"config file {shown}: invalid TOML: {exc}") from None


@functools.lru_cache(maxsize=1)
def _embedded_default() -> dict:
    text = importlib.resources.files("wflow").joinpath("data/default.toml").read_text("utf-8")
    return tomllib.loads(text)


def _merge(base: dict, top: Mapping) -> dict:
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def default_config() -> dict:
    """The embedded default run (wflow/data/default.toml) merged over DEFAULTS (a copy)."""
    return _merge(DEFAULTS, _embedded_default())


def parse_override(s: str) -> tuple[list[str], object]:
    """``"solver.dt=0.01"`` -> ``(["solver", "dt"], 0.01)``.

    The value is read as a TOML value (``1`` int, ``0.5`` float, ``true`` bool,
    ``[0, 1]`` list, ``"x"`` string, ``{a = 1}`` table); anything that is not a TOML
    value (a bare word, a path) is taken as a string, and so is a TOML date or time.
    """
    if not isinstance(s, str):
        raise _error(f"override {_show(s)}: must be a string 'section.key=value' "
                     f"(got {_typename(s)})")
    if "=" not in s:
        raise _error(f"override {_show(s)}: missing '=' (expected 'section.key=value')")
    key, _, text = s.partition("=")
    key = key.strip()
    if not key:
        raise _error(f"override {_show(s)}: empty key (expected 'section.key=value')")
    if not _OVERRIDE_KEY.match(key):
        raise _error(f"override {_show(s)}: key {_show(key)} must be dotted names made of "
                     "letters, digits, '_' and '-' (e.g. 'solver.dt')")
    text = text.strip()
    if any(c in text for c in "\n\r"):
        raise _error(f"override {_show(s)}: the value must be on one line")
    return key.split("."), _parse_value(text, s)


def _parse_value(text: str, s: str):
    try:
        doc = tomllib.loads(f"v = {text}")
    except RecursionError:
        raise _error(f"override {_show(s)}: value nested too deeply") from None
    except tomllib.TOMLDecodeError:  # not a TOML value: a bare word, a path, ...
        return text
    except ValueError as exc:  # e.g. an integer literal beyond Python's digit limit
        raise _error(f"override {_show(s)}: invalid value ({exc})") from None
    if set(doc) != {"v"}:  # pragma: no cover - guarded by the one-line rule
        return text
    value = doc["v"]
    if _typename(value) in ("date", "datetime", "time"):
        return text
    return value


def apply_overrides(cfg: dict, overrides) -> dict:
    """Apply ``section.key=value`` strings to a copy of ``cfg`` and return the copy.

    Missing tables on the way are created. If ``weights.process`` is overridden and
    ``weights.scheme`` is not, an inherited scheme that the new process does not
    allow is dropped, so that the process' default scheme applies.
    """
    if isinstance(overrides, str):
        overrides = [overrides]
    if not isinstance(cfg, Mapping):
        raise _error(f"config = {_show(cfg)}: must be a table of sections "
                     f"(got {_typename(cfg)})")
    try:
        overrides = list(overrides)
    except TypeError:
        raise _error(f"overrides = {_show(overrides)}: must be a list of "
                     "'section.key=value' strings") from None
    try:
        out = _copy_tree(cfg)
    except RecursionError:
        raise _error("config: nested too deeply") from None
    parsed = [parse_override(o) for o in overrides]
    for (path, value), text in zip(parsed, overrides):
        node = out
        for depth, part in enumerate(path[:-1]):
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            elif not isinstance(nxt, dict):
                where = ".".join(path[: depth + 1])
                raise _error(f"override {_show(text)}: {where} = {_show(nxt)} is not a table")
            node = nxt
        node[path[-1]] = value
    keys = {tuple(p) for p, _ in parsed}
    if ("weights", "process") in keys and ("weights", "scheme") not in keys:
        w = out.get("weights")
        if isinstance(w, dict) and isinstance(w.get("process"), str):
            allowed = SCHEMES_BY_PROCESS.get(w["process"])
            if allowed is not None and w.get("scheme", allowed[0]) not in allowed:
                del w["scheme"]
    return out


def _copy_tree(obj):
    """Copy nested dicts and lists (leaves are shared); other mappings become dicts."""
    if isinstance(obj, Mapping):
        return {k: _copy_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy_tree(v) for v in obj]
    return obj


def resolve(cfg_or_path=None, overrides=()) -> dict:
    """The validated configuration of a run.

    ``None`` -> the embedded default run; a ``str`` or path -> that TOML file; a dict
    -> itself. Then the overrides, then :func:`validate`.
    """
    if cfg_or_path is None:
        cfg = default_config()
    elif isinstance(cfg_or_path, (str, os.PathLike)):
        cfg = load_toml(cfg_or_path)
    elif isinstance(cfg_or_path, Mapping):
        cfg = cfg_or_path
    else:
        raise _error(f"config = {_show(cfg_or_path)}: expected None, a path or a dict "
                     f"(got {_typename(cfg_or_path)})")
    if overrides:
        cfg = apply_overrides(cfg, overrides)
    return validate(cfg)


def config_hash(cfg) -> str:
    """sha256 (hex) of the canonical JSON (sorted keys) of the validated configuration."""
    text = json.dumps(validate(cfg), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
