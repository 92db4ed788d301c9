r"""Oscillating weights [model §5]: relaxation towards a periodic forcing, per head with a phase.

.. math::

    \frac{dD_h}{dt} = F(t + \varphi_h) - D_h .
"""

from __future__ import annotations

import numpy as np

from wflow.errors import ConfigError
from wflow.model.processes.registry import register_process
from wflow.model.weights import WeightProcess, _batch, _choice, _sym
from wflow.params import Choice, Param

__all__ = ["SCHEMES", "PHASES", "TARGETS", "Oscillating"]

#: weights.scheme of the oscillating process; the first is the default
SCHEMES = ("euler", "exact")
PHASES = ("shared", "spread")
#: the oscillating forcing for d >= 4 (``weights.target``): wflow's choice or the paper's code
TARGETS = ("wflow", "paper")


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

    params = (
        Param("scheme", SCHEMES[0], Choice(SCHEMES), "oscillating euler | exact"),
        Param("phase", "shared", Choice(PHASES), "shared: φ_h = 0; spread: φ_h = 2πh/H"),
        Param("target", "wflow", Choice(TARGETS),
              "oscillating forcing for d ≥ 4: wflow (off-diagonal sin(ω_ab τ + aπ/2)) or paper "
              "(the paper's code: p-th pair sin(2τ + 2πp/n_pairs)); equal for d ≤ 3"),
    )
    #: deterministic: configurations state its noise as noise_var = 0 (accepted, ignored)
    ignores = ("noise_var",)

    @classmethod
    def from_config(cls, spec, H, d, dt):
        scheme = _choice(spec.get("scheme", "euler"), "weights.scheme",
                         SCHEMES, {"euler_maruyama": "euler"})
        return cls(d, H, spec.get("phase", "shared"), scheme, spec.get("target", "wflow"))

    def __init__(self, d, H, phase="shared", scheme="euler", target="wflow"):
        if int(d) != d or d < 2 or int(H) != H or H < 1:
            raise ConfigError(f"oscillating weights: d = {d}, H = {H}: allowed values are "
                              "integers d >= 2, H >= 1")
        self.d, self.H = int(d), int(H)
        self.phase = _choice(phase, "weights.phase", PHASES)
        self.scheme = _choice(scheme, "weights.scheme", SCHEMES)
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
