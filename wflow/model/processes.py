r"""The built-in weight processes [model §5]: frozen, Ornstein–Uhlenbeck (and the driven
variant of refinement studies), oscillating, piecewise-constant layers, from file.

Each is one class, registered under its ``weights.process`` name by
:func:`wflow.model.weights.register_process`; the protocol is :class:`wflow.model.weights.WeightProcess`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from wflow.errors import ConfigError
from wflow.model.weights import (
    PHASES,
    SCHEMES_BY_PROCESS,
    TARGETS,
    WEIGHT_FILE_SUFFIXES,
    WeightProcess,
    _batch,
    _choice,
    _number,
    _sym,
    _validated,
    check_weights,
    initial_weights,
    load_weight_file,
    register_process,
)

__all__ = ["TARGETS", "Frozen", "OrnsteinUhlenbeck", "DrivenOU", "brownian_increments", "Oscillating",
           "Layers", "FromFile"]


@register_process
class Frozen(WeightProcess):
    r"""Frozen weights.

    .. math::

        f(D, t) = 0, \qquad D_{k+1} = D_k .
    """

    name = "frozen"
    deterministic = True

    def drift(self, D, t):
        return np.zeros(np.shape(D))

    def step(self, D, t, dt, rngs=None):
        return np.array(_batch(D))


@register_process
class OrnsteinUhlenbeck(WeightProcess):
    r"""Matrix Ornstein–Uhlenbeck process on Sym(d), per head and path.

    .. math::

        dD = \lambda (M - D)\,dt + g\, dW_{\mathrm{sym}}, \qquad
        dW_{\mathrm{sym}} = (dW + dW^T)/2, \qquad g^2 = \text{noise\_var}.

    Schemes, with :math:`S = (\Xi + \Xi^T)/2`, :math:`\Xi` iid N(0, 1) of shape (H, d, d)
    drawn as ``rngs[p].standard_normal((H, d, d))``:

    .. math::

        \text{euler\_maruyama: } D' = D + \lambda (M - D)\Delta t + g\sqrt{\Delta t}\, S,

        \text{exact: } D' = M + e^{-\lambda\Delta t}(D - M)
            + g \sqrt{\tfrac{1 - e^{-2\lambda\Delta t}}{2\lambda}}\, S
            \quad(\text{scale } \sqrt{\Delta t} \text{ if } \lambda = 0).

    Stationary law :math:`M + G`, Var(G_aa) = g²/(2λ), Var(G_ab) = g²/(4λ).

    **Refined noise** (``refine`` = r > 1): a step of Δt draws r arrays
    :math:`\Xi_1, \dots, \Xi_r` in turn from the path's generator, one per sub-interval
    δ = Δt/r, and uses the innovation the r sub-steps would give,

    .. math::
        \text{euler\_maruyama: } g\sqrt{\delta}\,\sum_l S_l, \qquad
        \text{exact: } g\,s(\delta)\sum_l e^{-\lambda(r-l)\delta} S_l
        \quad\Big(\operatorname{Var} = g^2 s(\Delta t)^2,\
        s(\delta)^2 = \tfrac{1 - e^{-2\lambda\delta}}{2\lambda}\Big),

    so a run at Δt with r = 2 and a run at Δt/2 with r = 1 are driven by the same Brownian
    path: their difference is the time-step error alone (for the exact scheme the weights
    agree to round-off at the common times).

    Parameters
    ----------
    rate : float
        :math:`\lambda \ge 0`.
    mean : None, float or array_like of shape (d, d)
        :math:`M`: None is the identity, a float m is m·I, an array must be symmetric.
    noise_var : float
        :math:`g^2 \ge 0`; 0 makes the process deterministic (no draws at all).
    scheme : {"euler_maruyama", "exact"}
    d : int, optional
        Dimension, checked against an array ``mean``.
    refine : int
        r ≥ 1 normals per entry and step (see above); 1 is the plain scheme.
    """

    name = "ou"
    params = {"rate": 1.0, "mean": 1.0, "noise_var": 2.0, "scheme": "euler_maruyama",
              "noise_refine": 1}

    @classmethod
    def from_config(cls, spec, H, d, dt):
        scheme = _choice(spec.get("scheme", "euler_maruyama"), "weights.scheme",
                         SCHEMES_BY_PROCESS["ou"], {"euler": "euler_maruyama"})
        return cls(spec.get("rate", 1.0), spec.get("mean"), spec.get("noise_var", 2.0), scheme,
                   d=d, refine=spec.get("noise_refine", 1))

    def ito_rate(self, beta, ito_sum):
        r"""Expected Itô rate :math:`\beta g^2/4 \cdot` ``ito_sum`` [model §6]."""
        if self.noise_var == 0.0:
            return np.zeros(np.shape(ito_sum))
        return beta * self.noise_var / 4.0 * ito_sum

    @property
    def needs_ito(self):
        return self.noise_var > 0.0

    def __init__(self, rate=1.0, mean=None, noise_var=2.0, scheme="euler_maruyama", d=None,
                 refine=1):
        self.rate = _number(rate, "weights.rate")
        if isinstance(refine, bool) or int(refine) != refine or refine < 1:
            raise ValueError(f"weights.noise_refine = {refine!r}: expected an integer >= 1")
        self.refine = int(refine)
        self.noise_var = _number(noise_var, "weights.noise_var")
        self.scheme = _choice(scheme, "weights.scheme", SCHEMES_BY_PROCESS["ou"])
        self.deterministic = self.noise_var == 0
        if mean is None:
            mean = 1.0
        if np.ndim(mean) == 0:
            self.mean = _number(mean, "weights.mean", minimum=None)
        else:
            self.mean = check_weights(np.asarray(mean)[None], d=d, name="weights.mean")[0]

    def mean_matrix(self, d):
        """:math:`M` as a (d, d) array."""
        if np.ndim(self.mean) == 0:
            return self.mean * np.eye(d)
        if self.mean.shape != (d, d):
            raise ValueError(f"weights.mean has shape {self.mean.shape}, weights have d = {d}")
        return self.mean

    def drift(self, D, t):
        r""":math:`f(D, t) = \lambda (M - D)`."""
        D = np.asarray(D, dtype=float)
        return self.rate * (self.mean_matrix(D.shape[-1]) - D)

    def noise_scale(self, dt):
        r"""Factor of :math:`g\,S` in one step: :math:`\sqrt{\Delta t}` (EM) or the exact one."""
        if self.scheme == "euler_maruyama" or self.rate == 0:
            return np.sqrt(dt)
        return np.sqrt(-np.expm1(-2 * self.rate * dt) / (2 * self.rate))

    def step(self, D, t, dt, rngs=None):
        D = _batch(D)
        P, H, d, _ = D.shape
        M = self.mean_matrix(d)
        if self.scheme == "euler_maruyama":
            out = D + self.rate * (M - D) * dt
        else:
            out = M + np.exp(-self.rate * dt) * (D - M)
        if not self.deterministic:
            if rngs is None or len(rngs) != P:
                raise ValueError(f"OU step needs one generator per path: P = {P}")
            r = self.refine
            if r == 1:
                xi = np.stack([g.standard_normal((H, d, d)) for g in rngs])
                out = out + np.sqrt(self.noise_var) * self.noise_scale(dt) * _sym(xi)
            else:  # r sub-interval draws per path, in order, combined as r sub-steps would
                delta = dt / r
                decay = (np.ones(r) if self.scheme == "euler_maruyama"
                         else np.exp(-self.rate * delta * np.arange(r - 1, -1, -1)))
                xi = np.stack([sum(c * g.standard_normal((H, d, d)) for c in decay)
                               for g in rngs])
                out = out + np.sqrt(self.noise_var) * self.noise_scale(delta) * _sym(xi)
        return _sym(out)

    def noise_increment(self, D, D_next, t, dt):
        r""":math:`\xi = D' - D - \lambda(M - D)\Delta t`; exactly 0 if noise_var = 0 (EM)."""
        if self.deterministic and self.scheme == "euler_maruyama":
            return np.zeros(np.shape(D))
        return super().noise_increment(D, D_next, t, dt)

    def stationary_variance(self):
        r"""Stationary (Var G_aa, Var G_ab): :math:`(g^2/(2\lambda),\ g^2/(4\lambda))`."""
        if self.rate == 0:
            v = np.inf if self.noise_var > 0 else 0.0
            return v, v
        return self.noise_var / (2 * self.rate), self.noise_var / (4 * self.rate)

    def describe(self):
        mean = self.mean if np.ndim(self.mean) == 0 else self.mean.tolist()
        out = {"process": self.name, "rate": self.rate, "mean": mean,
               "noise_var": self.noise_var, "scheme": self.scheme}
        if self.refine > 1:
            out["noise_refine"] = self.refine
        return out


def brownian_increments(K, shape, dt, rng):
    r"""Increments of an entrywise Brownian motion on a fine grid: (K, *shape), variance ``dt``."""
    return np.sqrt(dt) * rng.standard_normal((K, *shape))


class DrivenOU(OrnsteinUhlenbeck):
    r"""Euler–Maruyama OU driven by one prescribed Brownian path (refinement studies).

    A step of length :math:`\Delta t = m\,\delta` uses the sum of the m fine increments
    :math:`\Delta W = \sum W_{k m + l}` of the path, so the same path is refined across
    :math:`\Delta t` [model §6]:

    .. math:: D' = D + \lambda(M - D)\Delta t + g\,(\Delta W + \Delta W^T)/2 .

    Parameters
    ----------
    dW : (K, P, H, d, d) fine increments, variance ``dt_fine`` (see :func:`brownian_increments`).
    dt_fine : δ; every coarse step must be a whole number of fine steps.
    """

    def __init__(self, dW, dt_fine, rate=1.0, mean=None, noise_var=2.0):
        super().__init__(rate=rate, mean=mean, noise_var=noise_var, scheme="euler_maruyama")
        self.dW = np.asarray(dW, dtype=float)
        self.dt_fine = float(dt_fine)
        self.deterministic = False

    def step(self, D, t, dt, rngs=None):
        m = int(round(dt / self.dt_fine))
        if m < 1 or abs(m * self.dt_fine - dt) > 1e-9 * dt:
            raise ValueError(f"DrivenOU: dt = {dt} is not a whole number of fine steps {self.dt_fine}")
        k = int(round(t / dt))
        if (k + 1) * m > len(self.dW):
            raise ValueError(f"DrivenOU: the Brownian path ends before t = {t + dt}")
        D = _batch(D)
        S = _sym(self.dW[k * m:(k + 1) * m].sum(axis=0))
        M = self.mean_matrix(D.shape[-1])
        return _sym(D + self.rate * (M - D) * dt + np.sqrt(self.noise_var) * S)


@register_process
class Oscillating(WeightProcess):
    r"""Relaxation towards a periodic forcing, per head with a phase.

    .. math::

        \frac{dD_h}{dt} = F(t + \varphi_h) - D_h, \qquad
        \varphi_h = 0 \ (\text{shared}) \ \text{or}\ 2\pi h/H \ (\text{spread}),\ h = 0..H-1.

    The forcing, for every :math:`d \ge 2` (a, b = 0..d−1, a < b):

    .. math::

        F_{aa}(t) = 2 + 1.5\cos(t + \psi_a), \qquad
        F_{ab}(t) = F_{ba}(t) = \sin(\omega_{ab} t + a\pi/2), \qquad
        \omega_{ab} = 1 + ((a + b) \bmod 2),

    with :math:`\psi = (0, -\pi/2, \pi/4)` for d = 3 and :math:`\psi_a = 2\pi a/d`
    otherwise. This is [model §5] exactly for d = 2 (ψ = (0, π), F_01 = sin 2t) and
    d = 3 (F_01 = sin 2t, F_02 = sin t, F_12 = cos 2t); for d ≥ 4 it is the
    project's *choice* (off-diagonals as for d = 3, diagonal phases spread so the
    trace is the constant 2d, as for d = 2).

    Every entry is :math:`c + A\sin(\omega\tau + \chi)`, so the periodic solution is
    :math:`P(\tau) = c + A\,(\sin\theta - \omega\cos\theta)/(1 + \omega^2)`,
    :math:`\theta = \omega\tau + \chi`, and

    .. math::

        \text{euler: } D' = D + \Delta t\,(F(t + \varphi) - D), \qquad
        \text{exact: } D' = P(t + \Delta t + \varphi) + e^{-\Delta t}\,(D - P(t + \varphi)).

    ``target = "paper"`` is the forcing of the paper's published code for d ≥ 4 (p = 0, 1, …
    the pairs a < b in row-major order, :math:`n_{\text{pairs}} = d(d-1)/2`):

    .. math::

        F_{aa}(\tau) = 2 + 1.5\cos(\tau + 2\pi a/d), \qquad
        F_{ab}(\tau) = F_{ba}(\tau) = \sin(2\tau + 2\pi p/n_{\text{pairs}});

    for d ≤ 3 it is the default forcing above ([model §5] exactly, which is the paper's).

    Parameters
    ----------
    d : int
        Dimension, d ≥ 2.
    H : int
        Number of heads.
    phase : {"shared", "spread"}
    scheme : {"euler", "exact"}
        ``euler`` is the reference simulation (its noise increment is exactly 0).
    target : {"wflow", "paper"}
        The forcing for d ≥ 4: wflow's choice (default) or the paper's published code.
    """

    name = "oscillating"
    deterministic = True

    params = {"phase": "shared", "scheme": "euler", "target": "wflow"}

    @classmethod
    def from_config(cls, spec, H, d, dt):
        scheme = _choice(spec.get("scheme", "euler"), "weights.scheme",
                         SCHEMES_BY_PROCESS["oscillating"], {"euler_maruyama": "euler"})
        return cls(d, H, spec.get("phase", "shared"), scheme, spec.get("target", "wflow"))

    def __init__(self, d, H, phase="shared", scheme="euler", target="wflow"):
        if int(d) != d or d < 2 or int(H) != H or H < 1:
            raise ConfigError(f"oscillating weights: d = {d}, H = {H}: allowed values are "
                              "integers d >= 2, H >= 1")
        self.d, self.H = int(d), int(H)
        self.phase = _choice(phase, "weights.phase", PHASES)
        self.scheme = _choice(scheme, "weights.scheme", SCHEMES_BY_PROCESS["oscillating"])
        self.target = _choice(target, "weights.target", TARGETS)
        h = np.arange(self.H)
        self.phases = 2 * np.pi * h / self.H if self.phase == "spread" else np.zeros(self.H)
        a = np.arange(self.d)
        psi = np.array([0.0, -np.pi / 2, np.pi / 4]) if self.d == 3 else 2 * np.pi * a / self.d
        eye = np.eye(self.d, dtype=bool)
        lo = np.minimum.outer(a, a)
        self._c = 2.0 * eye
        self._amp = np.where(eye, 1.5, 1.0)
        self._omega = np.where(eye, 1.0, 1.0 + np.add.outer(a, a) % 2)
        self._chi = np.where(eye, psi[:, None] + np.pi / 2, lo * np.pi / 2)
        if self.target == "paper" and self.d >= 4:
            # the p-th pair a < b in row-major order: sin(2τ + 2πp/n_pairs); the diagonal
            # cos(τ + 2πa/d) = sin(τ + 2πa/d + π/2) is already the default's for d >= 4
            iu = np.triu_indices(self.d, 1)
            p = np.zeros((self.d, self.d))
            p[iu] = np.arange(iu[0].size)
            p = p + p.T
            self._omega = np.where(eye, 1.0, 2.0)
            self._chi = np.where(eye, self._chi, 2 * np.pi * p / iu[0].size)

    def _theta(self, t):
        tau = (float(t) + self.phases)[:, None, None]
        return self._omega * tau + self._chi

    def forcing(self, t):
        r""":math:`F(t + \varphi_h)` for every head, shape (H, d, d)."""
        return self._c + self._amp * np.sin(self._theta(t))

    def periodic_solution(self, t):
        r"""Periodic solution :math:`P(t + \varphi_h)` of :math:`\dot D = F - D`, (H, d, d)."""
        th = self._theta(t)
        w = self._omega
        return self._c + self._amp * (np.sin(th) - w * np.cos(th)) / (1 + w**2)

    def drift(self, D, t):
        r""":math:`f(D, t) = F(t + \varphi) - D`."""
        return self.forcing(t) - np.asarray(D, dtype=float)

    def step(self, D, t, dt, rngs=None):
        D = _batch(D, self.H, self.d)
        if self.scheme == "euler":
            return _sym(D + dt * (self.forcing(t) - D))
        Pt = self.periodic_solution(t)
        return _sym(self.periodic_solution(t + dt) + np.exp(-dt) * (D - Pt))

    def noise_increment(self, D, D_next, t, dt):
        r""":math:`\xi = D' - D - f\,\Delta t`: exactly 0 (euler), :math:`O(\Delta t^2)` (exact)."""
        if self.scheme == "euler":
            return np.zeros(np.shape(D))
        return super().noise_increment(D, D_next, t, dt)

    def describe(self):
        return {"process": self.name, "d": self.d, "H": self.H, "phase": self.phase,
                "scheme": self.scheme, "target": self.target}


@register_process
class Layers(WeightProcess):
    r"""Piecewise-constant weights: a list of sets, each held for a whole number of steps.

    .. math::

        D(t_k) = W_i \quad\text{for}\quad n_0 + \dots + n_{i-1} \le k < n_0 + \dots + n_i,
        \qquad n_i = \mathrm{round}(\text{duration}_i / \Delta t) \ge 1,

    and the last set is held after the last layer ends; :math:`f = 0`, so the noise
    increment of a step is the jump :math:`D_{k+1} - D_k`.

    Parameters
    ----------
    weight_sets : list of array_like, each (H, d, d)
        Validated with :func:`check_weights`.
    durations : list of float
        Positive; rounded to whole steps (``steps_per_layer``), said in ``rounding_note``
        ("" when nothing was rounded).
    dt : float
        The step used for the rounding and for the step index ``round(t / dt)``.
    """

    name = "layers"
    params = {"layers": []}
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
        proc = cls([W for W, _ in built], [x.get("duration") for x in layers], dt)
        proc.sources = [s for _, s in built]
        return proc

    def initial(self, D0):
        """The trajectory fixes :math:`D(0)`: the first layer."""
        return np.broadcast_to(self.at(0.0), np.shape(D0)).copy()

    def __init__(self, weight_sets, durations, dt):
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

    def index_at_step(self, k):
        """Index of the set active at step k (time k·dt)."""
        return min(int(np.searchsorted(self._ends, k, side="right")), len(self.sets) - 1)

    def at(self, t):
        """The set active at time t, shape (H, d, d)."""
        return self.sets[self.index_at_step(round(t / self.dt))].copy()

    def drift(self, D, t):
        return np.zeros(np.shape(D))

    def step(self, D, t, dt, rngs=None):
        D = _batch(D, *self.sets.shape[1:3])
        W = self.sets[self.index_at_step(round((t + dt) / self.dt))]
        return np.broadcast_to(W, D.shape).copy()

    def describe(self):
        return {"process": self.name, "durations": self.durations, "dt": self.dt,
                "steps_per_layer": self.steps_per_layer, "rounding_note": self.rounding_note,
                "sources": self.sources}


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
    params = {"file": ""}
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

    def drift(self, D, t):
        return np.broadcast_to(self.slope(t), np.shape(D)).copy()

    def step(self, D, t, dt, rngs=None):
        D = _batch(D, *self.D.shape[1:3])
        return np.broadcast_to(self.at(t + dt), D.shape).copy()

    def describe(self):
        K, H, d, _ = self.D.shape
        return {"process": self.name, "K": K, "H": H, "d": d,
                "t_first": float(self.times[0]), "t_last": float(self.times[-1])}


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
