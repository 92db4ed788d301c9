"""wflow: the mean-field transformer PDE on the sphere, as a time-dependent Wasserstein gradient flow.

Public API::

    wflow.energy(X, D, beta=1.0) -> float
    wflow.field(X, D, beta=1.0, normalization="head", laplacian_heads=(), mask="none", values=None)
    wflow.simulate(config) -> Result
"""

import logging

from wflow._version import __version__
from wflow.errors import ConfigError, NumericalError, WflowError
from wflow.model.attention import AttentionModel, Field, energy, field

logging.getLogger(__name__).addHandler(logging.NullHandler())


def simulate(config=None, overrides=(), recorder=None, progress=False):
    """Run one configuration; see :func:`wflow.engine.run.simulate`."""
    from wflow.engine.run import simulate as _simulate

    return _simulate(config, overrides=overrides, recorder=recorder, progress=progress)


__all__ = [
    "AttentionModel", "Field", "energy", "field", "simulate", "ConfigError", "NumericalError",
    "WflowError", "__version__",
]
