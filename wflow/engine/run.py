r"""``simulate``: one configuration in, the result series of [model §10] out; the fixed-step
run loop.

Stepping contract [model §6]: within step k the weights are frozen at D_k; the
token solver advances X_k -> X_{k+1}; then the weights move D_k -> D_{k+1}
with one draw per path. Diagnostics at (X_k; D_k) come from the same fused pass
that gives the solver's first stage.

The loop reads one :class:`~wflow.engine.setup.RunSetup` (the model, the weight process, the
stepper, the flags, the streams), keeps the energy bookkeeping in its
:class:`~wflow.engine.ledger.Ledger` and writes each record with
:func:`~wflow.engine.records.record_row`. The exact ledger's :math:`E' = E(X_{k+1}; D_k)`
needs a second evaluation per step; it is done together with the next step's
:math:`(X_{k+1}; D_{k+1})` (``AttentionModel.evaluate_pair``: one batch of 2P paths where that
gives the same bits as two calls). Adaptive steps are the other loop
(:mod:`wflow.engine.adaptive_run`). Token noise [model §6b]: with :math:`\nu > 0` the Euler
step is projected Euler–Maruyama (``StepContext.noise`` = :math:`\sqrt{2\nu\Delta t}\,\xi`,
one (n, d) draw per path and step from the path's token-noise stream).
"""

from __future__ import annotations

import logging
import sys
import time

import numpy as np

from wflow import config as _config
from wflow.engine import adaptive_run
from wflow.engine import memory as _memory
from wflow.engine.initial import perturb_tokens, perturb_weights
from wflow.engine.records import record_row
from wflow.engine.setup import DENSITY_NEG_TOL, MASS_TOL, RunSetup, build
from wflow.engine.state import ListRecorder, Result, State
from wflow.errors import NumericalError
from wflow.kernels import spin_us
from wflow.model import layernorm as _layernorm
from wflow.model.attention import Field
from wflow.stepping.registry import StepContext

log = logging.getLogger(__name__)

__all__ = ["simulate", "Simulation", "Result", "State", "ListRecorder", "perturb_tokens",
           "perturb_weights", "MASS_TOL", "DENSITY_NEG_TOL"]

#: The line a run with a progress bar prints before its kernels compile (a cold numba cache:
#: once per machine and CPU; the measured times are in docs/performance.md).
COMPILING = ("wflow: compiling the numba kernels for this CPU, once per machine "
             "(about 20 s on an idle 2-core machine, 60-90 s when other jobs share it; "
             "later runs load them from numba's cache)")


class Simulation:
    r"""A configured run: its :class:`~wflow.engine.setup.RunSetup` and the fixed-step loop.

    Every attribute of the setup (``model``, ``process``, ``stepper``, ``n``, ``P``, ``dt``,
    ``nsteps``, ``X0``, ``record_steps``, …) is readable on the simulation.

    Parameters
    ----------
    config : dict (nested, [model §10]), path, or None for the embedded default.
    overrides : list of "section.key=value".
    process : a :class:`~wflow.model.weights.WeightProcess` instance to use instead of the one
        the ``[weights]`` table describes (e.g. :class:`~wflow.model.processes.DrivenOU` for
        refinement studies); the run then records its parameters, not the table's.
    tokens : array (n, d) or (P, n, d), optional
        The initial tokens X0 (unit rows), instead of the ones ``init.tokens`` draws (the
        draw still happens, so every other stream is unchanged); ``init.token_perturbation``
        applies on top. Not recorded in the configuration: a file-backed run that must be
        reproducible from its file alone should use ``init.tokens = "file"``.
        For ``solver.representation = "density"``: the initial cell averages
        :math:`\rho_j` (N,) or (P, N) on the run's mesh (``density.cells``; the ``rho``
        series of a result), instead of ``init.tokens``' law; finite, non-negative
        (:data:`~wflow.engine.setup.DENSITY_NEG_TOL`) and of mass
        :math:`\sum_j \rho_j\lvert K_j\rvert = 1` per path (to
        :data:`~wflow.engine.setup.MASS_TOL`), else a :class:`~wflow.errors.ConfigError`. A
        continued run (:meth:`wflow.studies.Study.continued`) starts this way.
    """

    def __init__(self, config=None, overrides=(), process=None, explicit=None, tokens=None):
        cfg = _config.resolve(config, overrides, explicit=explicit)
        spin_us()  # a bad WFLOW_SPIN_US is refused before anything is written
        # refuse a run that cannot fit before allocating anything (records go to a recorder
        # here; simulate() checks again with every record kept in memory)
        memory = _memory.check(cfg, keep_records=False)
        self.setup: RunSetup = build(cfg, memory, process=process, tokens=tokens)

    def __getattr__(self, name):
        setup = self.__dict__.get("setup")
        if setup is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(setup, name)

    def __setattr__(self, name, value):
        if name in ("setup", "elapsed", "final_state") or "setup" not in self.__dict__:
            object.__setattr__(self, name, value)
        else:  # (e.g. the memory estimate of simulate())
            setattr(self.setup, name, value)

    def initial_state(self) -> State:
        """The state at t = 0."""
        return self.setup.initial_state()

    def run(self, recorder=None, state: State | None = None, progress=False, stop_after=None):
        """Run (or continue from ``state``) to the end; returns a :class:`Result`.

        ``recorder`` receives one dict per record (``record``) and checkpoints
        (``checkpoint``); ``stop_after`` stops after that many steps (for tests).
        """
        rec = recorder if recorder is not None else ListRecorder()
        if self.setup.features.adaptive:  # from t = 0 or a checkpoint's loop state [model §6d]
            t_start = time.perf_counter()
            stats, self.final_state = adaptive_run.run(self.setup, rec, state)
            self.elapsed = time.perf_counter() - t_start
            meta = {"adaptive": stats}
        else:
            self.final_state, self.elapsed = fixed_steps(self.setup, rec, state,
                                                         progress=progress, stop_after=stop_after)
            meta = {}
        if isinstance(rec, ListRecorder):
            return Result(self.setup.config, rec.arrays(), {"elapsed": self.elapsed, **meta})
        return rec


def fixed_steps(run: RunSetup, rec, state: State | None = None, progress=False,
                stop_after=None) -> tuple[State, float]:
    """The fixed-step loop [model §6]: from t = 0 (or ``state``) to T, one record per record
    step to ``rec``, a checkpoint every ``output.checkpoint_every`` steps; returns the final
    state and the seconds spent stepping (after the kernels' compilation). ``stop_after``
    stops after that many steps (for tests)."""
    st = state if state is not None else run.initial_state()
    seeds = run.path_seeds + run.token_seeds
    rngs = []
    for s, stt in zip(seeds, st.rng_states):
        r = np.random.default_rng(s)
        r.bit_generator.state = stt
        rngs.append(r)
    rngs, token_rngs = rngs[:len(run.path_seeds)], rngs[len(run.path_seeds):]
    noise_scale = np.sqrt(2.0 * run.nu * run.dt)
    dt, P, ledger = run.dt, run.P, run.ledger
    want_ito = run.process.needs_ito
    ckpt_every = int(run.config["output"].get("checkpoint_every", 0) or 0)
    bar = _progress_bar(run, st, want_ito) if progress else None
    t_start = time.perf_counter()
    for name in run.stepper.series:
        st.stepper_info.setdefault(name, np.full(P, np.nan))
    ledger.open(st)
    steps_done = 0
    # the ledger's (X_{k+1}; D_k) and the next step's (X_{k+1}; D_{k+1}) in one call where
    # that gives the same bits as two (AttentionModel.evaluate_pair); a resumed run
    # evaluates its first step alone, to the same bits
    pair = (not run.features.density and hasattr(run.model, "evaluate_pair")
            and not run.time_values)  # (V(t_k) and V(t_{k+1}): two models)
    F_next = None
    try:
        while True:
            k = st.k
            t = k * dt
            model = run.model_at(t)
            if F_next is None:
                F = model.evaluate(st.X, st.D, want_ito=want_ito)
            else:
                F, F_next = F_next, None
            if run.features.energy:
                check_finite(F.energy, "energy", k, t)
            ledger.close(st, F, k)  # the weight part of step k − 1 needs E(X_k; D_k)
            if k in run.record_steps:
                rec.record(record_row(run, st, F, t))
            if k >= run.nsteps or (stop_after is not None and steps_done >= stop_after):
                break

            # token step with weights frozen at D_k
            Dk = st.D
            ctx = step_context(run, st, F, model)
            if token_rngs:  # [model §6b]: one (n, d) draw per path and step
                ctx.noise = noise_scale * np.stack(
                    [r.standard_normal((run.n, run.d)) for r in token_rngs])
            X1, info = run.stepper.step(ctx)
            st.stepper_info.update(info)
            check_finite(X1, "tokens X", k + 1, t + dt)

            # the weight step, the paper's left-point balance, the exact ledger's second pass
            fk = run.process.drift(Dk, t)
            D1 = run.process.step(Dk, t, dt, rngs)
            xi = run.process.noise_increment(Dk, D1, t, dt)
            ledger.left_point(st, F, fk, xi, run.process.ito_rate(run.model.beta, F.ito_sum))
            if run.exact_ledger:
                if pair:
                    Fm, F_next = run.model.evaluate_pair(X1, Dk, D1, want_ito=(False, want_ito))
                else:
                    Fm = model.evaluate(X1, Dk, want_ito=False)
                ledger.token_step(st, F, Fm, fk, xi, ctx.noise)
                del Fm  # (with the joint evaluation: its arrays, twice the paths)
            st.X, st.D, st.k = X1, D1, k + 1
            steps_done += 1
            if bar is not None:
                bar.update(1)
            if ckpt_every and st.k % ckpt_every == 0 and st.k < run.nsteps:
                st.rng_states = [r.bit_generator.state for r in rngs + token_rngs]
                rec.checkpoint(st)
    except NumericalError as exc:
        if exc.step is not None:
            raise
        # a failure inside a field evaluation (the spectral summation's flagged fraction over
        # solver.max_flagged, [model §2s]): named with the step it happened in
        raise NumericalError(f"in step {st.k} (t = {st.k * dt:.6g} to {(st.k + 1) * dt:.6g}): "
                             f"{exc}; the run stops here", step=st.k) from None
    st.rng_states = [r.bit_generator.state for r in rngs + token_rngs]
    if bar is not None:
        bar.close()
    return st, time.perf_counter() - t_start


def _progress_bar(run, st, want_ito):
    """A tqdm bar over the steps; a cold kernel cache compiles first, with one line saying
    so, so that the bar's rate and ETA are the run's own."""
    from tqdm.auto import tqdm

    ready = getattr(run.model, "kernels_ready", None)
    if ready is not None and not ready(st.X, st.D):
        print(COMPILING, file=sys.stderr, flush=True)
        run.model.evaluate(st.X, st.D, want_ito=want_ito)
    return tqdm(total=run.nsteps, initial=st.k, unit="step", dynamic_ncols=True, desc="wflow")


def step_context(run: RunSetup, st: State, F: Field, model=None) -> StepContext:
    """What a stepper may use at step k: the field with weights frozen at D_k (and the values
    of ``model``, :meth:`~wflow.engine.setup.RunSetup.model_at` t_k), its first stage, the
    stepper's series of its last step, and for energy-based steppers E, ∇E and the mobility —
    b̂ (head, joint) or 1 (none), frozen at X_k [model §7]."""
    model = run.model if model is None else model
    X, Dk, t = st.X, st.D, st.k * run.dt
    sigma, n = model.sigma, run.n
    if run.features.density:  # the rate of the cell averages, its CFL step
        return StepContext(X=X, dt=run.dt, sigma=sigma, k1=F.rate, max_dt=F.max_dt,
                           velocity=lambda rho: model.rate(rho, Dk), t=t,
                           last=st.stepper_info)

    def energy_grad(p, Y):
        G = model.evaluate(Y[None], Dk[p : p + 1], want_ito=False)
        return float(G.energy[0]), G.gradient[0] / n

    def output(Y):  # σ u(Y; D_k), the output before the projection [model §1c]
        return sigma * _layernorm.output(model, Y, Dk, F.velocity if Y is X else None)

    b = np.ones_like(F.b_hat) if model.normalization == "none" else F.b_hat
    return StepContext(X=X, dt=run.dt, sigma=sigma,
                       velocity=lambda Y: sigma * model.velocity(Y, Dk),
                       k1=sigma * F.velocity, energy_grad=energy_grad, mobility=b,
                       output=output, t=t, last=st.stepper_info)


def check_finite(a, what, k, t):
    """A :class:`~wflow.errors.NumericalError` naming ``what``, the step and the time unless
    every entry of ``a`` is finite."""
    if not np.all(np.isfinite(a)):
        raise NumericalError(f"non-finite {what} at step {k} (t = {t:.6g}); the run stops here",
                             step=k)


def simulate(config=None, overrides=(), recorder=None, progress=False) -> Result:
    """Run one configuration (nested dict of [model §10], a TOML path, or None = default).

    Returns
    -------
    Result with ``t`` (records,), series (records, P) of [model §10], ``X`` (records, P, n, d).
    """
    sim = Simulation(config, overrides)
    if recorder is None:  # every record stays in memory
        sim.memory = _memory.check(sim.config, keep_records=True)
    res = sim.run(recorder=recorder, progress=progress)
    log.info("simulate: %d steps in %.3f s", sim.nsteps, sim.elapsed)
    return res
