"""wflow: the mean-field transformer PDE on the sphere, as a time-dependent Wasserstein gradient flow.

Public API::

    wflow.energy(X, D, beta=1.0) -> float
    wflow.field(X, D, beta=1.0, normalization="head", laplacian_heads=(), mask="none", values=None)
    wflow.simulate(config) -> Result
"""

import logging

from .attention import AttentionModel, Field, energy, field
from .errors import ConfigError, NumericalError, WflowError

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())


def simulate(config=None, overrides=(), recorder=None, progress=False):
    """Run one configuration; see :func:`wflow.run.simulate`."""
    from .run import simulate as _simulate

    return _simulate(config, overrides=overrides, recorder=recorder, progress=progress)


__all__ = [
    "AttentionModel", "Field", "energy", "field", "simulate", "ConfigError", "NumericalError",
    "WflowError", "__version__",
]
