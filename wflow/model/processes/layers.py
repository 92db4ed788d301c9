r"""Piecewise-constant weights [model §5]: a list of sets, each held for a whole number of steps,
with their values [model §1b].

.. math::

    (D, V)(t_k) = (W_i, V_i) \quad\text{for}\quad n_0 + \dots + n_{i-1} \le k < n_0 + \dots + n_i .
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from wflow.errors import ConfigError
from wflow.model.processes import values as _values
from wflow.model.processes.registry import register_process
from wflow.model.weights import (
    LAYER_WEIGHTS,
    WEIGHT_FILE_SUFFIXES,
    WeightProcess,
    _batch,
    _number,
    check_weights,
    initial_weights,
    load_weight_file,
)
from wflow.params import (
    Custom,
    Integer,
    Interval,
    Param,
    String,
    bad,
    choices_text,
    error,
    typename,
    unknown_key,
)

__all__ = ["Layers", "LAYER_KEYS"]

LAYER_KEYS = ("duration", "weights", "values", "seed")


def _check_layers(key, value, cfg=None) -> list[dict]:
    """``weights.layers``: a list of tables {duration > 0, weights (a string), values (a
    string, default "tied"), seed >= 0}."""
    table = "a list of tables {duration, weights, seed}"
    if not isinstance(value, (list, tuple)):
        raise bad(key, value, f"must be {table} (got {typename(value)})")
    out = []
    for i, layer in enumerate(value):
        lkey = f"{key}[{i}]"
        if not isinstance(layer, Mapping):
            raise bad(lkey, layer, f"must be a table {{duration, weights, seed}} "
                                   f"(got {typename(layer)})")
        for k in layer:
            if not isinstance(k, str) or k not in LAYER_KEYS:
                raise unknown_key(lkey, k, LAYER_KEYS)
        for k in ("duration", "weights"):
            if k not in layer:
                raise error(f"{lkey}.{k} is missing: every layer needs 'duration' and 'weights'")
        what = f"a string ({choices_text(LAYER_WEIGHTS)} or a file path)"
        vwhat = f"a string ({choices_text(_values.LAYER_VALUES)} or a file path)"
        one = {"duration": Interval(0, None, "neither")(f"{lkey}.duration", layer["duration"]),
               "weights": String(True, what)(f"{lkey}.weights", layer["weights"]),
               "seed": Integer(lo=0)(f"{lkey}.seed", layer.get("seed", 0))}
        if "values" in layer:  # (absent: tied, and the table stays as it was written)
            one["values"] = String(True, vwhat)(f"{lkey}.values", layer["values"])
        out.append(one)
    return out


def _layers_rule(cfg):
    w = cfg["weights"]
    if w["process"] == "layers" and not w["layers"]:
        raise bad("weights.layers", w["layers"], "must be a non-empty list of tables "
                  "{duration, weights, seed} when weights.process = 'layers'")
    if w["process"] == "layers":
        given = [i for i, x in enumerate(w["layers"]) if x.get("values", "tied") != "tied"]
        if given:
            _values.check_run(cfg, f"weights.layers[{given[0]}].values")


@register_process
class Layers(WeightProcess):
    r"""Piecewise-constant weights: a list of sets, each held for a whole number of steps.

    .. math::

        (D, V)(t_k) = (W_i, V_i) \quad\text{for}\quad n_0 + \dots + n_{i-1} \le k < n_0 + \dots + n_i,
        \qquad n_i = \mathrm{round}(\text{duration}_i / \Delta t) \ge 1,

    and the last set is held after the last layer ends; :math:`f = 0`, so the noise
    increment of a step is the jump :math:`D_{k+1} - D_k`. The values :math:`V_i` of a layer
    (``values``, [model §1b]) are a function of the step, not of :math:`D`: tied
    (:math:`V_i = W_i`) unless given.

    Parameters
    ----------
    weight_sets : list of array_like, each (H, d, d)
        Validated with :func:`check_weights`.
    durations : list of float
        Positive; rounded to whole steps (``steps_per_layer``), said in ``rounding_note``
        ("" when nothing was rounded).
    dt : float
        The step used for the rounding and for the step index ``round(t / dt)``.
    values : list of (array_like (H, d, d) or None), optional
        The values of each layer (None: tied); None for all tied (``time_values`` False).
    """

    name = "layers"
    accepts_general = True
    params = (
        Param("layers", [], Custom(_check_layers,
                                   "a list of tables {duration, weights, values, seed}"),
              "piecewise-constant weights: [[weights.layers]] tables; a layer's values "
              "(default tied: V = D) [model §1b]", rule=_layers_rule),
    )
    deterministic = True

    @classmethod
    def from_config(cls, spec, H, d, dt):
        layers = spec.get("layers")
        if not isinstance(layers, (list, tuple)) or not layers:
            raise ConfigError("weights.layers: missing or empty: expected a list of "
                              "{duration, weights, seed} tables")
        if not all(isinstance(x, dict) for x in layers):
            raise ConfigError("weights.layers: expected a list of {duration, weights, seed} tables")
        built = [_layer_weights(i, x, H, d) for i, x in enumerate(layers)]
        vals = [_values.layer_values(i, x, H, d) for i, x in enumerate(layers)]
        proc = cls([W for W, _ in built], [x.get("duration") for x in layers], dt,
                   values=[V for V, _ in vals])
        proc.sources = [s for _, s in built]
        if proc.time_values:
            proc.value_sources = [s for _, s in vals]
        return proc

    def initial(self, D0):
        """The trajectory fixes :math:`D(0)`: the first layer."""
        return np.broadcast_to(self.at(0.0), np.shape(D0)).copy()

    def __init__(self, weight_sets, durations, dt, values=None):
        self.dt = _number(dt, "solver.dt", strict=True)
        if len(weight_sets) == 0 or len(weight_sets) != len(durations):
            raise ConfigError(f"weights.layers: {len(weight_sets)} weight sets and "
                              f"{len(durations)} durations: need the same number, at least 1")
        sets = [check_weights(W, name=f"weights.layers[{i}].weights")
                for i, W in enumerate(weight_sets)]
        if any(W.shape != sets[0].shape for W in sets):
            raise ConfigError("weights.layers: weight sets of different shapes "
                              f"{[W.shape for W in sets]}: all must be (H, d, d) alike")
        self.sets = np.stack(sets)
        self.durations = [_number(x, f"weights.layers[{i}].duration", strict=True)
                          for i, x in enumerate(durations)]
        self.steps_per_layer, notes = [], []
        for i, dur in enumerate(self.durations):
            n = int(round(dur / self.dt))
            if n < 1:
                raise ConfigError(f"weights.layers[{i}].duration = {dur:g}: rounds to 0 steps of "
                                  f"dt = {self.dt:g}; allowed values are >= dt/2")
            if abs(n * self.dt - dur) > 1e-9 * max(dur, self.dt):
                notes.append(f"layer {i}: {dur:g} -> {n * self.dt:g} ({n} steps)")
            self.steps_per_layer.append(n)
        self._ends = np.cumsum(self.steps_per_layer)
        self.rounding_note = (f"layer durations rounded to whole steps of dt = {self.dt:g}: "
                              + "; ".join(notes)) if notes else ""
        self.sources = None  # filled by make_process, for provenance
        self.value_sources = None
        self.value_sets = None  # per layer (H, d, d) or None (tied) [model §1b]
        if values is not None:
            if len(values) != len(self.sets):
                raise ConfigError(f"weights.layers: {len(values)} values for {len(self.sets)} "
                                  "layers: need one per layer")
            H, d = self.sets.shape[1:3]
            self.value_sets = [None if V is None else _values._finite(
                V, f"weights.layers[{i}].values", (3,), H, d) for i, V in enumerate(values)]
        #: whether some layer has its own values (V(t) then comes from :meth:`values_at`)
        self.time_values = self.value_sets is not None and any(
            V is not None for V in self.value_sets)

    def index_at_step(self, k):
        """Index of the set active at step k (time k·dt)."""
        return min(int(np.searchsorted(self._ends, k, side="right")), len(self.sets) - 1)

    def at(self, t):
        """The set active at time t, shape (H, d, d)."""
        return self.sets[self.index_at_step(round(t / self.dt))].copy()

    def values_at(self, t):
        """The values of the layer active at time t, (H, d, d), or None (tied: V = D); the
        same array object for every time of a layer."""
        if self.value_sets is None:
            return None
        return self.value_sets[self.index_at_step(round(t / self.dt))]

    #: f = 0 between jumps (adaptive steps skip integrating D, [model §6d])
    piecewise_constant = True

    def jump_times(self):
        """The times the weights jump: the ends of the layers (whole steps of dt), but the last."""
        return [float(e * self.dt) for e in self._ends[:-1]]

    def drift(self, D, t):
        return np.zeros(np.shape(D))

    def step(self, D, t, dt, rngs=None):
        D = _batch(D, *self.sets.shape[1:3])
        W = self.sets[self.index_at_step(round((t + dt) / self.dt))]
        return np.broadcast_to(W, D.shape).copy()

    def describe(self):
        return {"process": self.name, "durations": self.durations, "dt": self.dt,
                "steps_per_layer": self.steps_per_layer, "rounding_note": self.rounding_note,
                "sources": self.sources,
                **({"values": self.value_sources} if self.time_values else {})}


def _layer_weights(i, layer, H, d):
    key = f"weights.layers[{i}]"
    w = layer.get("weights")
    if isinstance(w, str) and w == "identity":
        return np.tile(np.eye(d), (H, 1, 1)), "identity"
    if isinstance(w, str) and w == "symmetric_gaussian":
        seed = layer.get("seed")
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
            raise ConfigError(f"{key}.seed = {seed!r}: symmetric_gaussian needs a non-negative "
                              "integer seed")
        W = initial_weights("symmetric_gaussian", H, d, np.random.default_rng(seed))
        return W, f"symmetric_gaussian(seed={int(seed)})"
    if isinstance(w, (str, os.PathLike)):
        if Path(w).suffix.lower() not in WEIGHT_FILE_SUFFIXES:
            raise ConfigError(f"{key}.weights = {str(w)!r}: allowed values are identity, "
                              "symmetric_gaussian or a .npz/.h5/.hdf5 path")
        D = load_weight_file(w, key=f"{key}.weights")["D"]
        if D.ndim == 4 and D.shape[0] != 1:
            raise ConfigError(f"{w}: key 'D' holds {D.shape[0]} sets: a layer needs one (H, d, d)")
        return check_weights(D.reshape(D.shape[-3:]), H, d, name=f"{w}: key 'D'"), str(w)
    if w is None:
        raise ConfigError(f"{key}.weights: missing: allowed values are identity, "
                          "symmetric_gaussian or a .npz/.h5/.hdf5 path")
    return check_weights(w, H, d, name=f"{key}.weights"), "array"
