"""Every access of the benchmarks to wflow's private names, in one place.

The suites use the public API (:class:`wflow.AttentionModel`, :func:`wflow.simulate`) where
it says what they measure. Three things have no public form: naming a pair-pass route of
the kernel (:func:`fused_pass`, :func:`route_taken`), the rate of its polynomial exponential
(:func:`exp_rate`) and stepping a simulation a few steps at a time (:func:`simulation`); the
Section 6 study's tasks come from the studies (:func:`section6_tasks`). When these internals move, only this
module changes.
"""

from __future__ import annotations

import numpy as np

#: The routes :func:`fused_pass` can force: the kernel's own choice, the row pass (neither
#: the symmetric d = 3 pass nor the BLAS pair pass), the symmetric d = 3 pass, the tiled
#: BLAS pair pass (large d).
ROUTES = ("auto", "rows", "sym", "blas")


def _forced(X, D, route):
    """The kernel's :class:`wflow.kernels.Route` for one of :data:`ROUTES` (None: its own)."""
    from wflow import kernels as K
    from wflow.kernels.routing import BLAS_EPILOGUE_MIN_D

    P, n, d = X.shape
    if route == "auto":
        return None
    if route == "rows":
        return K.Route.ROWS
    if route == "blas":
        return K.Route.BLAS_COMBINE if d >= BLAS_EPILOGUE_MIN_D else K.Route.BLAS
    plan = K.plan_shapes(n, d, D.shape[1], P, threads=K.get_num_threads())
    if not plan.route.symmetric:
        raise ValueError(f"route 'sym': n = {n}, d = {d} cannot take the symmetric pass")
    return plan.route


def fused_pass(X, D, beta=1.0, want_ito=True, route="auto"):
    """One fused field evaluation (head normalisation, tied values) on a forced route.

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
        One of :data:`ROUTES`, passed to the kernel's ``route=`` (``"blas"``: the BLAS pair
        pass whatever n and d; ``"sym"``: the symmetric pass, which needs d = 3, float64,
        symmetric D and the fixed shift). :func:`route_taken` tells the kernel's own choice.

    Returns
    -------
    tuple
        The kernel's output (velocity first).
    """
    from wflow import kernels as K

    if route not in ROUTES:
        raise ValueError(f"route = {route!r}: one of {ROUTES}")
    lap = np.zeros(D.shape[1], dtype=bool)
    return K.fused_pass(X, D, None, float(beta), 0, lap, False, True, want_ito=want_ito,
                        route=_forced(X, D, route))


def route_taken(X, D, beta=1.0):
    """The route the kernel takes by itself at (X, D): ``"sym"``, ``"blas"`` or ``"rows"``."""
    from wflow import kernels as K

    X = np.ascontiguousarray(X, dtype=float)
    D = np.ascontiguousarray(D, dtype=float)
    route = K.plan(X, D, float(beta), single=False, fast_exp=True, U=None, causal=False,
                   threads=K.get_num_threads()).route
    return "sym" if route.symmetric else "blas" if route.blas else "rows"


def exp_rate(seconds=0.3):
    """Polynomial exponentials per second on all threads (the pair loop's bound)."""
    from wflow import kernels as K

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
