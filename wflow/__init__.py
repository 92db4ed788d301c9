"""wflow: the mean-field transformer PDE on the sphere, as a time-dependent Wasserstein gradient flow.

Public API::

    wflow.energy(X, D, beta=1.0) -> float
    wflow.field(X, D, beta=1.0, normalization="head", laplacian_heads=(), mask="none", values=None)
    wflow.simulate(config) -> Result
    wflow.run_sweep(base, grid, outdir, executor="serial", paths_per_task=None, ...) -> xarray.Dataset
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


def run_sweep(base, grid, outdir="sweep", executor="serial", paths_per_task=None, **kw):
    """Run a parameter sweep, return its summary ``xarray.Dataset``; see
    :func:`wflow.lab.sweep.sweep` (``address``, ``n_workers``, ``client``, ``streams``, ``name``,
    ``overwrite``, ``progress``)."""
    from wflow.lab.sweep import sweep as _sweep

    return _sweep(base, grid, outdir, executor=executor, paths_per_task=paths_per_task, **kw)


__all__ = [
    "AttentionModel", "Field", "energy", "field", "simulate", "run_sweep", "ConfigError", "NumericalError",
    "WflowError", "__version__",
]
