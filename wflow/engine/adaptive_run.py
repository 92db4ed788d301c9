r"""Adaptive runs and record times: the run loop of ``solver.adaptive = true`` [model §6d].

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

from wflow import config as _config
from wflow.errors import ConfigError
from wflow.model.diagnostics import clustering_statistic
from wflow.stepping.adaptive import Adaptive
from wflow.stepping.integrators import TABLEAUX

__all__ = ["record_times", "make_solver", "run", "loop_state", "PREFIX"]


def record_times(cfg) -> np.ndarray:
    r"""The record times of a run: 0, then uniform (every ``record_every`` steps of ``dt`` and
    T) or geometric :math:`t_j = t_1 (T/t_1)^{j/(N-1)}`, j = 0..N−1, :math:`t_{N-1} = T`."""
    s = cfg["solver"]
    T, dt = float(s["T"]), float(s["dt"])
    nsteps = int(round(T / dt))
    if s["record_times"] == "geometric":
        N, t1 = int(s["records"]), _config.first_record(cfg)
        t = t1 * (T / t1) ** (np.arange(N) / (N - 1))
        t[-1] = T
        return np.concatenate([[0.0], t])
    steps = sorted(set(range(0, nsteps + 1, int(s["record_every"]))) | {nsteps})
    t = np.array(steps, dtype=float) * dt
    t[-1] = T
    return t


def make_solver(sim) -> Adaptive:
    """The adaptive solver of a configured :class:`~wflow.engine.run.Simulation`; refuses a
    weight process that draws random numbers (one line naming the key)."""
    s, w = sim.config["solver"], sim.config["weights"]
    if not getattr(sim.process, "deterministic", False):
        extra = (f" (weights.noise_var = {w['noise_var']!r})" if "noise_var" in w else "")
        raise ConfigError(f"weights.process = {w['process']!r}{extra}: must be deterministic "
                          "with solver.adaptive = true (noise would need a Brownian path "
                          "queried at any time, not in wflow)")
    return Adaptive(TABLEAUX[s["method"]], s["rtol"], s["atol"], sim.dt, s["max_steps"])


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
    """Integrate every path to T under error control, then one record per shared time (the
    diagnostics of [model §8] at the dense-output state); returns the solver's statistics.

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
        rec.record(sim._row(st, F, float(t)))
    sim.final_state = st
    return stats
