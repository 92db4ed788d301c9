r"""A weight trajectory read from a file [model §5], piecewise-linear in time.

.. math::

    D(t) = (1 - w) D_i + w D_{i+1}, \quad w = \frac{t - t_i}{t_{i+1} - t_i} .
"""

from __future__ import annotations

import os

import numpy as np

from wflow.errors import ConfigError
from wflow.model.processes.registry import register_process
from wflow.model.weights import WeightProcess, _batch, _number, _validated, load_weight_file
from wflow.params import Param, Path, bad

__all__ = ["FromFile"]


def _file_rule(cfg):
    w = cfg["weights"]
    if w["process"] == "file" and not w["file"].strip():
        raise bad("weights.file", w["file"], "must name a file (a non-empty path) when "
                  "weights.process = 'file'")


@register_process
class FromFile(WeightProcess):
    r"""A weight trajectory, piecewise-linear in time.

    .. math::

        D(t) = (1 - w) D_i + w D_{i+1}, \quad w = \frac{t - t_i}{t_{i+1} - t_i}
        \ \text{on}\ [t_i, t_{i+1}], \qquad
        f(D, t) = \frac{D_{i+1} - D_i}{t_{i+1} - t_i},

    held constant (f = 0) before :math:`t_0` and from :math:`t_{K-1}` on; a single set
    is frozen. The drift is the slope of the interpolant, so the realised noise is
    ~0 on steps inside one interval.

    Parameters
    ----------
    times : array_like, shape (K,), or None
        Strictly increasing knot times (None allowed for a single set).
    D_traj : array_like, shape (K, H, d, d) or (H, d, d)
        Validated (finite, symmetric within ``SYM_RTOL``) and symmetrised.
    """

    name = "file"
    accepts_general = True
    params = (
        Param("file", "", Path(), "weight trajectory file (.npz/.h5, keys 'D' and 't')",
              rule=_file_rule),
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
        return cls(t, D)

    def initial(self, D0):
        """The trajectory fixes :math:`D(0)`."""
        return np.broadcast_to(self.at(0.0), np.shape(D0)).copy()

    def __init__(self, times, D_traj):
        D = _validated(D_traj, "weights.file: D", (3, 4))
        self.D = D[None] if D.ndim == 3 else D
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

    def at(self, t):
        """:math:`D(t)`, shape (H, d, d); exact at the knots."""
        if len(self.times) == 1:
            return self.D[0].copy()
        i = self._interval(t)
        w = (t - self.times[i]) / (self.times[i + 1] - self.times[i])
        w = min(max(w, 0.0), 1.0)
        return (1 - w) * self.D[i] + w * self.D[i + 1]

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
                "t_first": float(self.times[0]), "t_last": float(self.times[-1])}
