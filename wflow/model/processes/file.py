r"""A weight trajectory read from a file [model §5], piecewise-linear in time, with its
values [model §1b].

.. math::

    (D, V)(t) = (1 - w) (D_i, V_i) + w (D_{i+1}, V_{i+1}), \quad w = \frac{t - t_i}{t_{i+1} - t_i} .
"""

from __future__ import annotations

import os

import numpy as np

from wflow.errors import ConfigError
from wflow.model.processes import values as _values
from wflow.model.processes.registry import register_process
from wflow.model.weights import WeightProcess, _batch, _number, _validated, load_weight_file
from wflow.params import Param, Path, bad

__all__ = ["FromFile"]


def _file_rule(cfg):
    w = cfg["weights"]
    if w["process"] == "file" and not w["file"].strip():
        raise bad("weights.file", w["file"], "must name a file (a non-empty path) when "
                  "weights.process = 'file'")


def _file_values_rule(cfg):
    w = cfg["weights"]
    if w["file_values"].strip():
        if w["process"] != "file":
            raise bad("weights.file_values", w["file_values"], "needs weights.process = 'file' "
                      f"(got {w['process']!r}); the layers give their own 'values'")
        _values.check_run(cfg, "weights.file_values")


@register_process
class FromFile(WeightProcess):
    r"""A weight trajectory, piecewise-linear in time.

    .. math::

        D(t) = (1 - w) D_i + w D_{i+1}, \quad w = \frac{t - t_i}{t_{i+1} - t_i}
        \ \text{on}\ [t_i, t_{i+1}], \qquad
        f(D, t) = \frac{D_{i+1} - D_i}{t_{i+1} - t_i},

    held constant (f = 0) before :math:`t_0` and from :math:`t_{K-1}` on; a single set
    is frozen. The drift is the slope of the interpolant, so the realised noise is
    ~0 on steps inside one interval. The values :math:`V(t)` (``weights.file_values``,
    [model §1b]) are interpolated with the same :math:`w`; tied (:math:`V = D`) without them.

    Parameters
    ----------
    times : array_like, shape (K,), or None
        Strictly increasing knot times (None allowed for a single set).
    D_traj : array_like, shape (K, H, d, d) or (H, d, d)
        Validated (finite, symmetric within ``SYM_RTOL``) and symmetrised.
    V_traj : array_like, shape (K, H, d, d) or (H, d, d), optional
        The values at the knots (any real matrices), or None (tied).
    """

    name = "file"
    accepts_general = True
    params = (
        Param("file", "", Path(), "weight trajectory file (.npz/.h5, keys 'D' and 't')",
              rule=_file_rule),
        Param("file_values", "", Path(), "values V(t) on the knots of weights.file (.npz/.h5, "
              "key 'V' (K, H, d, d), optional 't' equal to the file's), interpolated like D; "
              "empty: tied [model §1b]", rule=_file_values_rule),
    )
    deterministic = True

    @classmethod
    def from_config(cls, spec, H, d, dt):
        path = spec.get("file")
        if not isinstance(path, (str, os.PathLike)) or not str(path):
            raise ConfigError("weights.file: missing: process 'file' needs the path of an "
                              ".npz/.h5/.hdf5 weight file")
        data = load_weight_file(path, key="weights.file")
        D, t = data["D"], data["t"]
        if D.shape[-3:] != (H, d, d):
            raise ConfigError(f"weights.file = {str(path)!r}: key 'D' has shape {D.shape}: "
                              f"expected (..., {H}, {d}, {d})")
        if t is None and D.ndim == 4:
            t = _number(dt, "solver.dt", strict=True) * np.arange(D.shape[0])
        V = None
        vpath = spec.get("file_values") or ""
        if str(vpath).strip():
            V, tv = _values.load_values_file(vpath, "weights.file_values", H, d)
            K, KV = (D.shape[0] if D.ndim == 4 else 1), (V.shape[0] if V.ndim == 4 else 1)
            if KV != K:
                raise ConfigError(f"weights.file_values = {str(vpath)!r}: key 'V' holds {KV} "
                                  f"sets, weights.file {K}: expected one per knot of D")
            if tv is not None and not (t is not None and np.array_equal(tv, np.ravel(t))):
                raise ConfigError(f"weights.file_values = {str(vpath)!r}: key 't' differs "
                                  "from the knots of weights.file: the values share D's grid")
        return cls(t, D, V)

    def initial(self, D0):
        """The trajectory fixes :math:`D(0)`."""
        return np.broadcast_to(self.at(0.0), np.shape(D0)).copy()

    def __init__(self, times, D_traj, V_traj=None):
        D = _validated(D_traj, "weights.file: D", (3, 4))
        self.D = D[None] if D.ndim == 3 else D
        self.V = None  # (K, H, d, d) values at the knots, or None (tied) [model §1b]
        if V_traj is not None:
            H, d = self.D.shape[1:3]
            V = _values._finite(V_traj, "weights.file_values: V", (3, 4), H, d)
            self.V = V[None] if V.ndim == 3 else V
            if self.V.shape != self.D.shape:
                raise ConfigError(f"weights.file_values: V of shape {self.V.shape}: expected "
                                  f"{self.D.shape}, one set per knot of D")
        #: whether the values are the file's (V(t) from :meth:`values_at`)
        self.time_values = self.V is not None
        K = self.D.shape[0]
        if times is None and K == 1:
            times = [0.0]
        try:
            self.times = np.asarray(times, dtype=float)
        except (TypeError, ValueError):
            self.times = np.array([np.nan])
        if (self.times.shape != (K,) or not np.all(np.isfinite(self.times))
                or np.any(np.diff(self.times) <= 0)):
            raise ConfigError(f"weights.file: t of shape {np.shape(times)}: expected ({K},) "
                              "finite, strictly increasing times matching D")

    def _interval(self, t):
        i = int(np.searchsorted(self.times, t, side="right")) - 1
        return min(max(i, 0), len(self.times) - 2)

    def _lerp(self, M, t):
        """(1 − w) M_i + w M_{i+1} at t (M (K, H, d, d)); exact at the knots."""
        if len(self.times) == 1:
            return M[0].copy()
        i = self._interval(t)
        w = (t - self.times[i]) / (self.times[i + 1] - self.times[i])
        w = min(max(w, 0.0), 1.0)
        return (1 - w) * M[i] + w * M[i + 1]

    def at(self, t):
        """:math:`D(t)`, shape (H, d, d); exact at the knots."""
        return self._lerp(self.D, t)

    def values_at(self, t):
        """:math:`V(t)`, shape (H, d, d), interpolated as :math:`D(t)` (the same w); None
        when tied."""
        return None if self.V is None else self._lerp(self.V, t)

    def slope(self, t):
        """Slope of the interpolant at t on [t_i, t_{i+1}), 0 outside [t_0, t_{K-1}); (H, d, d)."""
        if not self.times[0] <= t < self.times[-1]:
            return np.zeros(self.D.shape[1:])
        i = self._interval(t)
        return (self.D[i + 1] - self.D[i]) / (self.times[i + 1] - self.times[i])

    def jump_times(self):
        """The knots: the slope of the interpolant jumps there (breakpoints, [model §6d])."""
        return [float(x) for x in self.times]

    def drift(self, D, t):
        return np.broadcast_to(self.slope(t), np.shape(D)).copy()

    def step(self, D, t, dt, rngs=None):
        D = _batch(D, *self.D.shape[1:3])
        return np.broadcast_to(self.at(t + dt), D.shape).copy()

    def describe(self):
        K, H, d, _ = self.D.shape
        return {"process": self.name, "K": K, "H": H, "d": d,
                "t_first": float(self.times[0]), "t_last": float(self.times[-1]),
                **({"values": "file"} if self.time_values else {})}
