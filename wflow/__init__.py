"""wflow: the mean-field transformer PDE on the sphere, as a time-dependent Wasserstein gradient flow.

Public API::

    wflow.energy(X, D, beta=1.0) -> float
    wflow.field(X, D, beta=1.0, normalization="head", laplacian_heads=(), mask="none", values=None)
    wflow.simulate(config) -> Result
    wflow.run_sweep(base, grid, outdir, executor="serial", paths_per_task=None, ...) -> xarray.Dataset

This module is the public facade, above the layers (README, "Layout"): it imports the model on
first use of ``energy``, ``field``, ``AttentionModel`` or ``Field`` (``import wflow``, and so the
command line's start, loads no numba), and the engine and the sweeps inside ``simulate`` and
``run_sweep``; no module of the package imports it (an import-linter contract), so these
imports close no circle.
"""

import logging
import os


def _threading_defaults(environ=os.environ):
    """Sleeping, not spinning, OpenMP and OpenBLAS threads, and OpenMP before TBB, unless the
    user chose (``setdefault``).

    Must run before numba (or anything else) loads an OpenMP runtime, which reads these
    variables once. GNU OpenMP otherwise spins ~300 000 iterations (milliseconds) at every
    barrier: beside other CPU-bound work the spinning threads take the cores from the
    working ones, and runs were 10–40× slower. ``KMP_BLOCKTIME`` is the same for the
    Intel/LLVM runtime. Child processes inherit the settings.
    """
    if "OMP_WAIT_POLICY" not in environ:
        environ["OMP_WAIT_POLICY"] = "passive"
        # wflow's own worker threads (wflow.kernels.pool) read the policy too: a passive policy
        # set by the user means no spinning, this default does not
        environ["WFLOW_OMP_DEFAULTS"] = "1"
    if environ["OMP_WAIT_POLICY"].strip().lower() == "passive":
        environ.setdefault("KMP_BLOCKTIME", "0")
    # numba takes TBB first when it is installed; beside two busy processes a default run took
    # 2.43x its time alone under TBB against 1.54x under OpenMP (goal <= 2.4; the contention
    # suite of benchmarks/)
    environ.setdefault("NUMBA_THREADING_LAYER_PRIORITY", "omp tbb workqueue")
    # OpenBLAS's idle workers spin 2^28 cycles (~0.1 s) after each threaded call (a record's
    # Gram matrix from n ~ 600, LAPACK's eigensolver at d = 64), taking a core from the numba
    # threads: 2^4 cycles instead (a run with n = 1000: 1.83-1.93 -> 1.06-1.07 s)
    environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")


_threading_defaults()

from wflow._version import __version__  # noqa: E402
from wflow.errors import ConfigError, NumericalError, WflowError  # noqa: E402

#: the names of the model that the facade imports on first use (PEP 562)
_MODEL_NAMES = ("AttentionModel", "Field", "energy", "field")


def __getattr__(name):
    if name in _MODEL_NAMES:
        from wflow.model import attention

        return getattr(attention, name)
    raise AttributeError(f"module 'wflow' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_MODEL_NAMES))

logging.getLogger(__name__).addHandler(logging.NullHandler())


def simulate(config=None, overrides=(), recorder=None, progress=False):
    r"""Run one configuration of the transformer PDE's particle system and return its series.

    .. math::

        \dot x_i = \sigma\, v_i(X; D(t)),\qquad D(t)\ \text{a weight process}
        \quad [\text{model §2–§6}]

    Parameters
    ----------
    config : None, str or path, or dict
        None: the default run (every key at its default, ``wflow/data/default.toml``); a path:
        a TOML file; a dict: the nested ``{section: {key: value}}`` of [model §10]. Keys left
        out take their defaults, the same through every door.
    overrides : sequence of str
        ``"section.key=value"`` strings applied on top (values parsed as TOML), as
        ``wflow run --set``.
    recorder : object, optional
        Receives the records instead of memory: ``record(row: dict)`` once per record and
        ``checkpoint(state)`` every ``output.checkpoint_every`` steps (e.g.
        :class:`wflow.storage.io.H5Recorder`); it is returned in place of a
        :class:`~wflow.engine.state.Result`. None keeps every record in memory (after a
        memory check that refuses a run that cannot fit).
    progress : bool
        A progress bar on stderr (tqdm), after the kernels' compilation on a cold cache.

    Returns
    -------
    Result
        ``t`` (records,), every series (records, P) of [model §10], ``X`` (records, P, n, d)
        when stored; ``result.keys()`` and ``dir(result)`` list them, ``result.config`` is
        the validated configuration.

    Raises
    ------
    ConfigError
        Bad input (one line naming the key and what is allowed).
    NumericalError
        The run left the domain where its equations hold (naming the step and the time).
    """
    from wflow.engine.run import simulate as _simulate

    return _simulate(config, overrides=overrides, recorder=recorder, progress=progress)


def run_sweep(base, grid, outdir="sweep", executor="serial", paths_per_task=None, **kw):
    """Run a parameter sweep, return its summary ``xarray.Dataset``; see
    :func:`wflow.sweeps.sweep.sweep` (``address``, ``n_workers``, ``client``, ``streams``, ``name``,
    ``overwrite``, ``progress``)."""
    from wflow.sweeps.sweep import sweep as _sweep

    return _sweep(base, grid, outdir, executor=executor, paths_per_task=paths_per_task, **kw)


__all__ = [
    "AttentionModel", "Field", "energy", "field", "simulate", "run_sweep", "ConfigError", "NumericalError",
    "WflowError", "__version__",
]
