r"""Frozen weights [model §5]: :math:`f(D, t) = 0`, :math:`D_{k+1} = D_k` (no keys)."""

from __future__ import annotations

import numpy as np

from wflow.model.processes.registry import register_process
from wflow.model.weights import WeightProcess, _batch

__all__ = ["Frozen"]


@register_process
class Frozen(WeightProcess):
    r"""Frozen weights.

    .. math::

        f(D, t) = 0, \qquad D_{k+1} = D_k .
    """

    name = "frozen"
    accepts_general = True
    deterministic = True
    #: f = 0: adaptive steps skip integrating D ([model §6d])
    piecewise_constant = True

    def drift(self, D, t):
        return np.zeros(np.shape(D))

    def step(self, D, t, dt, rngs=None):
        return np.array(_batch(D))
