r"""Adaptive runs: the run loop of ``solver.adaptive = true`` [model §6d].

.. math::

    \dot x_i = \sigma\, v_i(X; D(t)), \qquad \dot D = f(D, t)
    \quad (\text{integrated together, per path, under error control}),

with records at times shared by all paths (uniform: the fixed steppers' grid; geometric:
:math:`t_j = t_1 (T/t_1)^{j/(N-1)}`). The result has the series of a fixed-step run; the
ledger and the left-point integrals are NaN, and ``steps_accepted``, ``steps_rejected``,
``field_evals`` and ``step_size`` are added.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from wflow.engine.records import record_row
from wflow.engine.setup import record_times
from wflow.model.diagnostics import clustering_statistic

__all__ = ["run", "loop_state", "PREFIX"]


#: the prefix of the loop-state arrays in a checkpoint's ``memo`` [model §6d, "Checkpoints"]
PREFIX = "adaptive_"


def loop_state(state):
    """The adaptive loop state held by a checkpoint's :class:`~wflow.engine.run.State`, or
    None (a checkpoint written before the first round: start at t = 0)."""
    if state is None:
        return None
    memo = {k[len(PREFIX):]: v for k, v in state.stepper_info.items() if k.startswith(PREFIX)}
    return memo or None


def run(sim, rec, state=None):
    """Integrate every path of the :class:`~wflow.engine.setup.RunSetup` ``sim`` to T under
    error control, then one record per shared time (the diagnostics of [model §8] at the
    dense-output state); returns the solver's statistics and the final state.

    Every ``output.checkpoint_every`` rounds of the loop the recorder receives a checkpoint
    holding the loop state (:data:`wflow.stepping.adaptive.LOOP_STATE`, under ``memo`` with
    the prefix ``adaptive_``); ``state`` (such a checkpoint's State) continues from it,
    bit-identically [model §6d, "Checkpoints"]. The records are written when every path has
    reached T (or stopped): a checkpoint has none."""
    s = sim.config["solver"]
    proc, sigma = sim.process, sim.model.sigma
    T = float(s["T"])
    times = record_times(sim.config)

    def field(Y, D, t):
        return sigma * sim.model.velocity(Y, D)

    drift = None
    if not getattr(proc, "piecewise_constant", False):
        def drift(D, t):
            return np.stack([np.asarray(proc.drift(D[j], float(t[j])), dtype=float)
                             for j in range(len(t))])
    jumps = getattr(proc, "jump_times", None)
    bps = jumps() if jumps is not None else ()
    reset = None
    if bps and hasattr(proc, "at"):
        def reset(t):
            return proc.at(t)
    event = None
    if s["event"]:
        dg = sim.config["diagnostics"]
        sign = 1.0 if s["event_direction"] == "up" else -1.0
        thr = float(s["event_threshold"])

        def event(X):  # g >= 0 at the event [model §6d]
            stat = clustering_statistic(X, s["event"], dg["cluster_angle"],
                                        dg["max_pairwise_n"], dg["merge_cosine"])
            return sign * (stat - thr)
    ckpt = None
    every = int(sim.config["output"].get("checkpoint_every", 0) or 0)
    if every:
        base = state if state is not None else sim.initial_state()

        def ckpt(loop):
            rounds = int(loop["rounds"])
            info = {PREFIX + k: v for k, v in loop.items()}
            rec.checkpoint(replace(base, k=rounds, X=loop["X"], D=loop["D"],
                                   stepper_info=info))
    Xr, Dr, stats = sim.stepper.solve(field, sim.X0, sim.D0, T, times, drift=drift,
                                      breakpoints=bps, reset=reset,
                                      stop_at_records=bool(s["stop_at_records"]), event=event,
                                      event_tol=float(s["event_tol"]),
                                      event_stop=bool(s["event_stop"]),
                                      state=loop_state(state), checkpoint=ckpt,
                                      checkpoint_every=every)
    if s["event"] and s["event_stop"] and np.all(np.isfinite(stats["event_time"][0])):
        # every path stopped: the run ends at the last record at or after the last event
        last = int(np.searchsorted(times, np.max(stats["event_time"][0]), side="left"))
        keep = min(last + 1, len(times))
        times, Xr, Dr = times[:keep], Xr[:keep], Dr[:keep]
        stats = {k: v[:keep] for k, v in stats.items()}
    st = sim.initial_state()
    for k in st.cum:
        st.cum[k] = np.full(sim.P, np.nan)
    want_ito = proc.needs_ito
    for r, t in enumerate(times):
        st.X, st.D, st.k = Xr[r], Dr[r], r
        F = sim.model.evaluate(st.X, st.D, want_ito=want_ito)
        if r == 0:
            st.E0 = F.energy.copy()
        st.stepper_info = {name: stats[name][r] for name in sim.stepper.series}
        rec.record(record_row(sim, st, F, float(t)))
    return stats, st
