"""The cross-key rules of the core configuration keys (the table of :mod:`wflow.config`).

Each rule is ``rule(cfg)`` on the normalised configuration and raises one
:class:`~wflow.errors.ConfigError` line naming the key, its value and what is allowed; a
custom check is ``check(key, value, cfg) -> normalised value``. The rules of a feature live in
the feature's module (:func:`wflow.params.declare`).
"""

from __future__ import annotations

import math

from wflow.model.processes import PROCESSES, get_process
from wflow.params import bad, choices_text, error, is_int, show, typename

__all__ = ["first_record", "n_steps", "STEP_RTOL"]

#: relative tolerance of the "whole number of steps" rule for solver.T / solver.dt
STEP_RTOL = 1e-9


def first_record(cfg: dict) -> float:
    """The first positive geometric record time: ``solver.first_record``, or (0) ``record_every``
    steps of ``dt`` [model §6d]."""
    s = cfg["solver"]
    return float(s["first_record"]) or float(s["dt"]) * int(s["record_every"])


def n_steps(cfg: dict) -> int:
    """Number of steps ``round(T/dt)`` of a validated configuration."""
    return int(round(cfg["solver"]["T"] / cfg["solver"]["dt"]))





def _laplacian(key, value, cfg) -> list[int]:
    heads = cfg["model"]["heads"]
    if is_int(value):
        k = int(value)
        if not 0 <= k <= heads:
            raise bad(key, value, "an integer k (the last k heads) must satisfy "
                                  f"0 <= k <= model.heads = {heads}")
        return list(range(heads - k, heads))
    if not isinstance(value, (list, tuple)):
        raise bad(key, value, "must be a list of head indices or an integer k (the last k heads) "
                              f"(got {typename(value)})")
    out = []
    for item in value:
        if not is_int(item):
            raise bad(key, value, f"indices must be integers (got {typename(item)} {show(item)})")
        i = int(item)
        if not 0 <= i < heads:
            raise bad(key, value, f"indices must be in 0..{heads - 1} (model.heads = {heads})")
        if i in out:
            raise bad(key, value, f"indices must be distinct (index {i} repeated)")
        out.append(i)
    return sorted(out)


def _process(key, v, cfg=None):
    """``weights.process``: a registered name, an entry point or ``module:Class``."""
    if not isinstance(v, str):
        raise bad(key, v, f"allowed values are {choices_text(tuple(PROCESSES))} or 'module:Class'")
    try:
        get_process(v)
    except ValueError as exc:
        if ":" in v:  # a module:Class path: the registry says why (not found, not a process)
            raise bad(key, v, str(exc).split(": ", 1)[1]) from None
        raise bad(key, v, f"allowed values are {choices_text(tuple(PROCESSES))} or "
                          "'module:Class'") from None
    return v


def _needs_file(key, when_key, when_value):
    def rule(cfg):
        s, k = key.split(".")
        ws, wk = when_key.split(".")
        if cfg[ws][wk] == when_value and not cfg[s][k].strip():
            raise bad(key, cfg[s][k], f"must name a file (a non-empty path) when "
                                      f"{when_key} = {when_value!r}")
    return rule


def _shared_path_rule(cfg):
    if cfg["weights"]["shared_path"] and cfg["init"]["per_path_weights"]:
        raise error("weights.shared_path = true with init.per_path_weights = true: one weight "
                    "path for every path needs one D(0); set one of them to false")


def _classes_rule(cfg):
    C, d = cfg["init"]["classes"], cfg["model"]["d"]
    if cfg["init"]["tokens"] == "classes" and C > 2 * d:
        raise bad("init.classes", C, f"must be <= 2 model.d = {2 * d} (the class centres are "
                                     "the vertices ±e_a)")


def _ledger_default(cfg):
    """True, unless the energy does not exist (``model.interaction = "general"``) or the
    layer-norm placement rescales the speeds (``model.layernorm`` other than "post")."""
    return cfg["model"]["interaction"] == "symmetric" and cfg["model"]["layernorm"] == "post"


def _steps_rule(cfg):
    s = cfg["solver"]
    if s["T"] < s["dt"]:
        raise bad("solver.T", s["T"], f"must be >= solver.dt = {s['dt']!r}")
    ratio = s["T"] / s["dt"]
    if not math.isfinite(ratio):
        raise bad("solver.T", s["T"], f"must be a whole number of steps of solver.dt = "
                                      f"{s['dt']!r} (T/dt overflows)")
    steps = int(round(ratio))
    if steps < 1 or abs(steps * s["dt"] - s["T"]) > STEP_RTOL * s["T"]:
        raise bad("solver.T", s["T"],
                  f"must be a whole number of steps of solver.dt (T/dt = {ratio:.10g})")


def _first_record_rule(cfg):
    s = cfg["solver"]
    if s["record_times"] == "geometric" and not first_record(cfg) < s["T"]:
        raise bad("solver.first_record", s["first_record"], f"must be < solver.T = {s['T']!r}")


def _record_default(cfg):
    """5, or the number of steps of a shorter run (a default never makes a run invalid)."""
    s = cfg["solver"]
    ratio = s["T"] / s["dt"]
    steps = int(round(ratio)) if math.isfinite(ratio) else 5
    return max(1, min(5, steps))


def _record_rule(cfg):
    steps = n_steps(cfg)
    if cfg["solver"]["record_every"] > steps:
        raise bad("solver.record_every", cfg["solver"]["record_every"],
                  f"must be <= the number of steps round(solver.T/solver.dt) = {steps}")
