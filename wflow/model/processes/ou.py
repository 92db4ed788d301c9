r"""The Ornstein–Uhlenbeck weight process [model §5, §6], and its variant driven by one
prescribed Brownian path (refinement studies).

.. math::

    dD = \lambda (M - D)\,dt + g\, dW_{\mathrm{sym}} .
"""

from __future__ import annotations

import numpy as np

from wflow.model.processes.registry import register_process
from wflow.model.weights import WeightProcess, _batch, _choice, _number, _sym, check_weights
from wflow.params import Choice, Integer, Interval, Param

__all__ = ["SCHEMES", "OrnsteinUhlenbeck", "DrivenOU", "brownian_increments"]

#: weights.scheme of OU; the first is the default
SCHEMES = ("euler_maruyama", "exact")


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

    **General matrices** (``symmetric = False``, ``model.interaction = "general"``
    [model §1b]): :math:`S = \Xi` (the unsymmetrised :math:`dW`) and the step is not
    symmetrised; the stationary law has iid entries of variance g²/(2λ).

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
    accepts_general = True
    #: stochastic unless g² = 0 (:meth:`deterministic_for`; an instance carries its answer)
    deterministic = False
    deterministic_when = "weights.noise_var = 0"
    params = (
        Param("rate", 1.0, Interval(0, None, "neither"), "OU rate λ"),
        Param("mean", 1.0, Interval(), "OU mean M·I"),
        Param("noise_var", 2.0, Interval(0, None, "both"), "OU noise variance g²"),
        Param("noise_refine", 1, Integer(lo=1),
              "OU: a step of Δt draws r normals per entry, one per sub-interval Δt/r, and "
              "combines them exactly: a run at Δt with r = 2 and one at Δt/2 with r = 1 see the "
              "same Brownian path (pathwise Δt/2 checks)"),
        Param("scheme", SCHEMES[0], Choice(SCHEMES), "weight step: ou euler_maruyama | exact"),
    )

    @classmethod
    def from_config(cls, spec, H, d, dt):
        scheme = _choice(spec.get("scheme", "euler_maruyama"), "weights.scheme",
                         SCHEMES, {"euler": "euler_maruyama"})
        return cls(spec.get("rate", 1.0), spec.get("mean"), spec.get("noise_var", 2.0), scheme,
                   d=d, refine=spec.get("noise_refine", 1))

    @classmethod
    def deterministic_for(cls, spec):
        r"""No draws at all when :math:`g^2 = 0` (``noise_var``, default 2)."""
        return _number(spec.get("noise_var", 2.0), "weights.noise_var") == 0

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
        self.scheme = _choice(scheme, "weights.scheme", SCHEMES)
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
                out = out + np.sqrt(self.noise_var) * self.noise_scale(dt) * self._noise(xi)
            else:  # r sub-interval draws per path, in order, combined as r sub-steps would
                delta = dt / r
                decay = (np.ones(r) if self.scheme == "euler_maruyama"
                         else np.exp(-self.rate * delta * np.arange(r - 1, -1, -1)))
                xi = np.stack([sum(c * g.standard_normal((H, d, d)) for c in decay)
                               for g in rngs])
                out = out + np.sqrt(self.noise_var) * self.noise_scale(delta) * self._noise(xi)
        return _sym(out) if self.symmetric else out

    def _noise(self, xi):
        """S = (Ξ + Ξᵀ)/2, or Ξ itself for general matrices [model §1b]."""
        return _sym(xi) if self.symmetric else xi


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
