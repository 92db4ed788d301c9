r"""Time-dependent value matrices of the weight processes [model §1b, §5]: the layer's values
of ``layers``, the interpolated values of ``file``.

.. math::

    V_h(t) = V_{i,h}\ \text{(layer } i \text{ active at } t\text{)}, \qquad
    V_h(t) = (1 - w)\,V_{i,h} + w\,V_{i+1,h},\quad w = \frac{t - t_i}{t_{i+1} - t_i},

with :math:`V_{i,h} = D_{i,h}` for a tied layer. The values are a function of the time, not of
the weight state: two layers with the same :math:`D` and different :math:`V` are two
different values, and a resumed run finds the values of its step from the step's time alone.
The processes keep their own file (``layers.py``, ``file.py``) and call this module;
:func:`model_at` gives the run's attention model at a time.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from wflow.errors import ConfigError
from wflow.model.weights import WEIGHT_FILE_SUFFIXES

__all__ = ["LAYER_VALUES", "VALUES_SPAWN_KEY", "fixed_values", "layer_values",
           "load_values_file", "model_at", "check_run"]

#: a layer's ``values``: one of these or the path of an array file (key 'V')
LAYER_VALUES = ("tied", "identity", "minus_identity", "gaussian", "symmetric_gaussian")
#: the spawn key of a layer's values stream, SeedSequence(seed, spawn_key=(1,)); its D draw is
#: SeedSequence(seed) (no spawn key), so drawn values never move the D draws
VALUES_SPAWN_KEY = (1,)


def fixed_values(kind, H, d, rng=None):
    r"""Value matrices (H, d, d) of ``kind`` [model §1b]: None for "tied" (V_h = D_h),
    :math:`\pm I`, :math:`\Xi/\sqrt d` ("gaussian") or :math:`(\Xi + \Xi^\top)/\sqrt{2d}`
    ("symmetric_gaussian": Var V_aa = 2/d, V_ab = 1/d), :math:`\Xi` iid N(0, 1) drawn from
    ``rng`` (``rng.standard_normal((H, d, d))``, the draws of ``model.values``)."""
    if kind == "tied":
        return None
    if kind == "identity":
        return np.broadcast_to(np.eye(d), (H, d, d)).copy()
    if kind == "minus_identity":
        return -np.broadcast_to(np.eye(d), (H, d, d)).copy()
    if kind == "gaussian":
        return rng.standard_normal((H, d, d)) / np.sqrt(d)
    if kind == "symmetric_gaussian":
        xi = rng.standard_normal((H, d, d))
        return (xi + xi.transpose(0, 2, 1)) / np.sqrt(2 * d)
    raise ConfigError(f"values = {kind!r}: allowed values are {', '.join(LAYER_VALUES)}")


def _finite(V, where, ndims, H, d):
    V = np.asarray(V)
    if V.dtype.kind not in "biuf":
        raise ConfigError(f"{where}: dtype {V.dtype}: expected real numbers")
    V = np.array(V, dtype=float)
    if V.ndim not in ndims or V.shape[-3:] != (H, d, d):
        want = " or ".join(f"({'K, ' if k == 4 else ''}{H}, {d}, {d})" for k in ndims)
        raise ConfigError(f"{where}: shape {V.shape}: expected {want}")
    if not np.all(np.isfinite(V)):
        raise ConfigError(f"{where}: values must be finite")
    return V


def load_values_file(path, key, H, d):
    """Value matrices from an ``.npz``/``.h5``/``.hdf5`` file: key ``'V'`` of shape (H, d, d)
    or (K, H, d, d) (any real matrices), optional ``'t'`` (K,). Returns ``(V, t or None)``;
    ConfigError (one line naming ``key``) otherwise."""
    from wflow.storage.io import read_arrays

    where = f"{key} = {str(path)!r}"
    if Path(path).suffix.lower() not in WEIGHT_FILE_SUFFIXES:
        raise ConfigError(f"{where}: allowed values are {', '.join(LAYER_VALUES)} or a "
                          ".npz/.h5/.hdf5 path")
    raw = read_arrays(path, ("V", "t"), what="values file", where=where)
    if "V" not in raw:
        raise ConfigError(f"{where}: key 'V' missing: expected a dataset 'V' of shape "
                          f"({H}, {d}, {d}) or (K, {H}, {d}, {d})")
    V = _finite(raw["V"], f"{where}: key 'V'", (3, 4), H, d)
    t = None
    if "t" in raw:
        t = np.asarray(raw["t"], dtype=float)
        K = V.shape[0] if V.ndim == 4 else 1
        if t.shape != (K,) or not np.all(np.isfinite(t)) or np.any(np.diff(t) <= 0):
            raise ConfigError(f"{where}: key 't' of shape {t.shape}: expected ({K},) finite, "
                              "strictly increasing times matching 'V'")
    return V, t


def layer_values(i, layer, H, d):
    r"""The values of layer ``i`` (``weights.layers[i].values``): ``(V or None, source)``;
    None is tied (:math:`V_h = D_h` of the layer). "gaussian" and "symmetric_gaussian" draw
    from the layer's values stream, SeedSequence(seed, spawn_key=:data:`VALUES_SPAWN_KEY`)."""
    key = f"weights.layers[{i}].values"
    v = layer.get("values", "tied")
    if isinstance(v, str) and v in LAYER_VALUES:
        if v in ("gaussian", "symmetric_gaussian"):
            seed = layer.get("seed", 0)
            if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
                raise ConfigError(f"weights.layers[{i}].seed = {seed!r}: {v} values need a "
                                  "non-negative integer seed")
            rng = np.random.default_rng(np.random.SeedSequence(int(seed),
                                                               spawn_key=VALUES_SPAWN_KEY))
            return fixed_values(v, H, d, rng), f"{v}(seed={int(seed)})"
        return fixed_values(v, H, d), v
    if isinstance(v, (str, os.PathLike)) and str(v).strip():
        V, _ = load_values_file(v, key, H, d)
        if V.ndim == 4 and V.shape[0] != 1:
            raise ConfigError(f"{key} = {str(v)!r}: key 'V' holds {V.shape[0]} sets: a layer "
                              "needs one (H, d, d)")
        return V.reshape(V.shape[-3:]), str(v)
    if isinstance(v, (list, tuple, np.ndarray)):
        return _finite(v, key, (3,), H, d), "array"
    raise ConfigError(f"{key} = {v!r}: allowed values are {', '.join(LAYER_VALUES)} or a "
                      ".npz/.h5/.hdf5 path")


def model_at(model, V):
    """The attention model ``model`` with the values ``V`` ((H, d, d) or None: tied), a new
    frozen model (the others unchanged)."""
    if V is None and model.values is None:
        return model
    return dataclasses.replace(model, values=V)


def check_run(cfg, key):
    """The runs that take time-dependent values, given by ``key`` [model §1b]: tied
    ``model.values`` (the process gives the values), particles (a density model keeps one
    attention model), fixed steps (an adaptive step ending on a layer switch would evaluate
    its last stage with the next layer's values and the held weights). ConfigError, one line."""
    from wflow.params import error

    m, s = cfg["model"], cfg["solver"]
    if m["values"] != "tied":
        raise error(f"{key} with model.values = {m['values']!r}: the weight process gives the "
                    "values; allowed is model.values = 'tied' (docs/model.md §1b)")
    if s["representation"] == "density":
        raise error(f"{key} with solver.representation = 'density': time-dependent values run "
                    "on particles; allowed is solver.representation = 'particles'")
    if s["adaptive"]:
        raise error(f"{key} with solver.adaptive = true: time-dependent values take fixed "
                    "steps; allowed is solver.adaptive = false (docs/model.md §1b)")
