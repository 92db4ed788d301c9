"""Every access of the benchmarks to wflow's private names, in one place.

The suites use the public API (:class:`wflow.AttentionModel`, :func:`wflow.simulate`) where
it says what they measure. Three things have no public form: forcing a pair-pass route of
the kernel (:func:`fused_pass`), the rate of its polynomial exponential (:func:`exp_rate`)
and stepping a simulation a few steps at a time (:func:`simulation`); the Section 6 study's
tasks come from the lab (:func:`section6_tasks`). When these internals move, only this
module changes.
"""

from __future__ import annotations

import numpy as np

#: The routes :func:`fused_pass` can force: the kernel's own choice, the row pass (neither
#: the symmetric d = 3 pass nor the BLAS pair pass), the symmetric d = 3 pass, the tiled
#: BLAS pair pass (large d).
ROUTES = ("auto", "rows", "sym", "blas")


def fused_pass(X, D, beta=1.0, want_ito=True, route="auto"):
    """One fused field evaluation (head normalisation, tied values) on a forced route.

    The one function that touches the kernel's route selection.

    Parameters
    ----------
    X : numpy.ndarray
        (P, n, d) tokens, float64.
    D : numpy.ndarray
        (P, H, d, d) symmetric interaction matrices.
    beta : float
        Inverse temperature.
    want_ito : bool
        Also compute the Itô sum.
    route : str
        One of :data:`ROUTES`. ``"rows"`` switches both special passes off; ``"blas"`` the
        symmetric pass off and the BLAS pass on whatever n and d (``BLAS_MIN_D`` and
        ``BLAS_MIN_N`` set to 0); ``"sym"`` the BLAS pass off (the symmetric pass still needs
        its conditions: d = 3, float64, symmetric D, the fixed shift). :func:`route_taken`
        tells the kernel's own choice.

    Returns
    -------
    tuple
        The kernel's output (velocity first).
    """
    from wflow.core import _kernels as K

    if route not in ROUTES:
        raise ValueError(f"route = {route!r}: one of {ROUTES}")
    saved = K._SYM_ENABLED, K.BLAS_MIN_D, K.BLAS_MIN_N
    off = 1 << 62
    K._SYM_ENABLED, K.BLAS_MIN_D, K.BLAS_MIN_N = {
        "auto": saved, "rows": (False, off, off), "sym": (True, off, off),
        "blas": (False, 0, 0)}[route]
    try:
        lap = np.zeros(D.shape[1], dtype=bool)
        return K.fused_pass(X, D, None, float(beta), 0, lap, False, True, want_ito=want_ito)
    finally:
        K._SYM_ENABLED, K.BLAS_MIN_D, K.BLAS_MIN_N = saved


def route_taken(X, D, beta=1.0):
    """The route the kernel takes by itself at (X, D): ``"sym"``, ``"blas"`` or ``"rows"``."""
    from wflow.core import _kernels as K

    P, n, d = X.shape
    if K.takes_sym_pass(X, D, beta):
        return "sym"
    if K._use_blas(n, d, False, True):
        return "blas"
    return "rows"


def exp_rate(seconds=0.3):
    """Polynomial exponentials per second on all threads (the pair loop's bound)."""
    from wflow.core import _kernels as K

    return K.fast_exp_rate(seconds=seconds)


def simulation(config):
    """A :class:`wflow.engine.run.Simulation` of a configuration dict (``run(stop_after=k)``
    steps it k steps; ``initial_state()`` starts it again)."""
    from wflow.engine.run import Simulation

    return Simulation(config)


def section6_tasks(T, paths, ledger, heads):
    """(name, config) of the paper's Section 6 study with ``heads`` heads."""
    from wflow.studies import StudyOptions, get_study

    opts = StudyOptions(ledger=ledger,
                        overrides=(f"solver.T={float(T)}", f"solver.paths={int(paths)}"))
    return [(name, cfg) for name, cfg in get_study("section6").tasks(opts)
            if cfg["model"]["heads"] in heads]
