r"""``simulate``: one configuration in, the result series of [model §10] out.

Stepping contract [model §6]: within step k the weights are frozen at D_k; the
token solver advances X_k -> X_{k+1}; then the weights move D_k -> D_{k+1}
with one draw per path. Diagnostics at (X_k; D_k) come from the same fused pass
that gives the solver's first stage.

Exact ledger (per step, with :math:`E' = E(X_{k+1}; D_k)`):

.. math::
    \text{token part} = E' - E(X_k; D_k),\qquad
    \text{weight part} = E(X_{k+1}; D_{k+1}) - E',

    \text{weight part} = \underbrace{\langle\partial_D E', f(D_k,t_k)\Delta t\rangle}_{\text{drift}}
    + \underbrace{\langle\partial_D E', \xi_k\rangle}_{\text{martingale}} + \text{Itô (realised)},

    R = \sum_k \text{token part} - \sigma\sum_k\Delta t\,\tfrac12(\mathcal D_k + \mathcal D'_k).

Token noise [model §6b]: with :math:`\nu > 0` the Euler step is projected Euler–Maruyama
(``StepContext.noise`` = :math:`\sqrt{2\nu\Delta t}\,\xi`), and the token part splits further
into the residual's martingale :math:`\frac1n\sum_i\langle g_i, \sqrt{2\nu\Delta t}\,\xi_i\rangle`
(``token_martingale``) and the realised Itô term ``token_ito_realised`` = R − martingale.

E' needs a second evaluation per step, at (X_{k+1}; D_k); it is done together with the next
step's (X_{k+1}; D_{k+1}) (``AttentionModel.evaluate_pair``: one batch of 2P paths where that
gives the same bits as two calls).

The paper's balance uses left-point sums at (X_k; D_k):
:math:`\text{paper\_residual} = \Delta E - \sigma\sum\Delta t\,G^2 - \sum\Delta t\,\partial_tE
- \sum\Delta t\,\text{Itô}_{\text{expected}} - M`.

Random streams: children of ``SeedSequence(init.seed)`` with fixed spawn keys — ``(0,)`` the
shared tokens, ``(1,)`` the shared initial weights (then the random values), ``(2, p)`` the
noise of path p, ``(0, p)`` and ``(1, p)`` its own X0 and D(0) under
``init.per_path_tokens`` / ``init.per_path_weights`` and ``init.tokens = "classes"`` (its
sequence centre, then its tokens), ``(3,)`` and ``(4,)`` the directions of
``init.token_perturbation`` and ``init.weight_perturbation`` (drawn only when they are > 0, so
other runs are unchanged), ``(5,)`` the one noise stream of every path under
``weights.shared_path``, ``(6, p)`` the token noise of path p (``model.diffusion`` > 0
on particles only: one standard normal array (n, d) per step, [model §6b]), ``(7,)`` the
coefficients of a density's ``init.tokens = "uniform_noise"``. Path p is path
``init.first_path + p`` of the Monte Carlo ensemble, so its draws depend on (seed, p) alone
and a run of paths [a, b) equals paths a..b−1 of one run of all of them (sweeps batch paths
this way).
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from wflow import config as _config
from wflow.engine import adaptive_run, initial
from wflow.engine import memory as _memory
from wflow.engine import series as _series
from wflow.engine.initial import UNIT_TOL, perturb_tokens, perturb_weights
from wflow.errors import ConfigError, NumericalError
from wflow.geometry import sphere
from wflow.geometry.circle_fv import CircleGrid
from wflow.geometry.sphere_mesh import voronoi_mesh
from wflow.kernels import spin_us
from wflow.model import layernorm as _layernorm
from wflow.model.attention import AttentionModel, Field
from wflow.model.density import DensityModel, initial_density
from wflow.model.diagnostics import clustering_series
from wflow.model.processes import make_process
from wflow.model.processes import values as _values
from wflow.stepping.density import DensityStepper
from wflow.stepping.integrators import TABLEAUX
from wflow.stepping.layernorm import placement_step
from wflow.stepping.registry import StepContext, get_stepper

log = logging.getLogger(__name__)

__all__ = ["simulate", "Simulation", "Result", "State", "perturb_tokens", "perturb_weights"]

#: the per-step ledger pieces, in the order of the step-ledger buffer's last axis
STEP_LEDGER = _series.names(kind="per_step", group="step_ledger")

#: The line a run with a progress bar prints before its kernels compile (a cold numba cache:
#: once per machine and CPU; the measured times are in docs/performance.md).
COMPILING = ("wflow: compiling the numba kernels for this CPU, once per machine "
             "(about 20-60 s on 2 cores; later runs load them from numba's cache)")


@dataclass
class State:
    """Everything needed to continue a run bit-identically (the checkpoint).

    ``cum`` holds the cumulative series (P,) each; ``rng_states`` the weight-noise streams of
    the paths, then (with token noise) their token-noise streams; ``pending`` the ledger pieces of the last
    step, finished at the next pass; ``stepper_info`` the stepper's series of its last step;
    ``step_ledger`` the per-step ledger of the open record interval (record_every, P, 6);
    ``w2_prev`` the last recorded snapshot and its time (for ``w2_step``); ``radius`` the
    radii r_i (P, n) of the residual stream under the pre-, peri- and mix-LN placements
    (None otherwise, [model §1c]).
    """

    k: int
    X: np.ndarray  # (P, n, d)
    D: np.ndarray  # (P, H, d, d)
    rng_states: list  # bit-generator states: one per path, then one per path of token noise
    cum: dict  # cumulative sums, (P,) each
    E0: np.ndarray  # (P,) energy at t = 0 (NaN until the first pass at k = 0 sets it)
    pending: dict = field(default_factory=dict)
    stepper_info: dict = field(default_factory=dict)
    step_ledger: np.ndarray | None = None
    w2_prev: tuple | None = None  # (X (P, n, d), t)
    radius: np.ndarray | None = None  # (P, n) [model §1c]

    def to_checkpoint(self) -> dict:
        """A plain mapping of arrays for the storage layer (the file layout of
        ``wflow-results/1`` and ``/2``: the stepper, step-ledger and W₂ pieces under ``memo``)."""
        memo = dict(self.stepper_info)
        if self.step_ledger is not None:
            memo["step_ledger"] = self.step_ledger
        if self.w2_prev is not None:
            memo["w2_prev_X"], memo["w2_prev_t"] = self.w2_prev[0], np.array(self.w2_prev[1])
        if self.radius is not None:
            memo["radius"] = self.radius
        return {"k": np.int64(self.k), "X": self.X, "D": self.D, "E0": self.E0,
                "cum": self.cum, "pending": self.pending, "memo": memo,
                "rng_states": self.rng_states}

    @classmethod
    def from_checkpoint(cls, c: dict) -> "State":
        memo = dict(c.get("memo", {}))
        led = memo.pop("step_ledger", None)
        w2 = None
        if "w2_prev_X" in memo:
            w2 = (memo.pop("w2_prev_X"), float(memo.pop("w2_prev_t")))
        radius = memo.pop("radius", None)
        return cls(k=int(c["k"]), X=c["X"], D=c["D"], rng_states=c["rng_states"], cum=c["cum"],
                   E0=c["E0"], pending=c.get("pending", {}), stepper_info=memo,
                   step_ledger=led, w2_prev=w2, radius=radius)


class Result:
    """The result series of a run [model §10].

    Attributes are arrays: ``t`` (records,), every series (records, P), ``X``
    (records, P, n, d) when stored, ``D`` (records, P, H, d, d) when stored, and
    ``config`` (the validated dict).
    """

    def __init__(self, config, arrays, meta=None):
        self.config = config
        self.arrays = arrays
        self.meta = meta or {}

    def __getattr__(self, name):
        arrays = self.__dict__.get("arrays", {})
        if name in arrays:
            return arrays[name]
        raise AttributeError(name)

    def __getitem__(self, name):
        return self.arrays[name]

    def keys(self):
        return self.arrays.keys()

    def __repr__(self):
        t = self.arrays.get("t")
        return f"Result(records={0 if t is None else len(t)}, series={sorted(self.arrays)})"


class ListRecorder:
    """Collects records in memory (the default); io.H5Recorder has the same methods."""

    def __init__(self):
        self.rows = []

    def record(self, row: dict):
        self.rows.append(row)

    def checkpoint(self, state):  # in-memory runs need no checkpoint
        pass

    def arrays(self):
        if not self.rows:
            return {}
        return {k: np.stack([np.asarray(r[k]) for r in self.rows]) for k in self.rows[0]}


class Simulation:
    r"""A configured run: builds the model, weight process, solver and streams.

    Parameters
    ----------
    config : dict (nested, [model §10]), path, or None for the embedded default.
    overrides : list of "section.key=value".
    process : a :class:`~wflow.model.weights.WeightProcess` instance to use instead of the one
        the ``[weights]`` table describes (e.g. :class:`~wflow.model.weights.DrivenOU` for
        refinement studies); the run then records its parameters, not the table's.
    tokens : array (n, d) or (P, n, d), optional
        The initial tokens X0 (unit rows), instead of the ones ``init.tokens`` draws (the
        draw still happens, so every other stream is unchanged); ``init.token_perturbation``
        applies on top. Not recorded in the configuration: a file-backed run that must be
        reproducible from its file alone should use ``init.tokens = "file"``.
        For ``solver.representation = "density"``: the initial cell averages
        :math:`\rho_j` (N,) or (P, N) on the run's mesh (``density.cells``; the ``rho``
        series of a result), instead of ``init.tokens``' law; finite, non-negative
        (:data:`DENSITY_NEG_TOL`) and of mass :math:`\sum_j \rho_j\lvert K_j\rvert = 1`
        per path (to :data:`MASS_TOL`), else a :class:`~wflow.errors.ConfigError`. A
        continued run (:meth:`wflow.studies.Study.continued`) starts this way.
    """

    def __init__(self, config=None, overrides=(), process=None, explicit=None, tokens=None):
        cfg = _config.resolve(config, overrides, explicit=explicit)
        self.config = cfg
        spin_us()  # a bad WFLOW_SPIN_US is refused before anything is written
        # refuse a run that cannot fit before allocating anything (records go to a recorder
        # here; simulate() checks again with every record kept in memory)
        self.memory = _memory.check(cfg, keep_records=False)
        m, ini, w, s, dg = (cfg[k] for k in ("model", "init", "weights", "solver", "diagnostics"))
        self.n, self.d, self.H, self.P = m["n"], m["d"], m["heads"], s["paths"]
        self.dt = float(s["dt"])
        self.nsteps = int(round(s["T"] / self.dt))
        self.record_every = int(s["record_every"])
        self.ledger = bool(dg["ledger"])
        self.w2 = bool(dg["w2"])
        self._step_ledger = self.ledger and m["mask"] != "causal"
        self.clustering = bool(dg["clustering"])
        # the density representation [model §5b]: the state X is rho (P, N), the model acts
        # on cell averages, the stepper is SSP Runge–Kutta; everything else is shared
        self.density = s["representation"] == "density"
        if self.density:
            self.w2 = self.clustering = False  # token diagnostics
        given_rho = None
        if tokens is not None and self.density:  # checked on the mesh, below
            given_rho, tokens = tokens, None
        if tokens is not None:  # checked before anything is drawn
            tokens = _given_tokens(tokens, self.P, self.n, self.d)
        start = initial.draw(cfg, tokens)
        self.first_path, self._path_seeds = start.first_path, start.path_seeds
        # token noise [model §6b]: its own stream per path, after the weight streams
        self.nu = float(m["diffusion"])
        self._token_seeds = list(start.token_seeds)  # none for a density [model §5b]
        self.n_streams = len(self._path_seeds) + len(self._token_seeds)
        self.token_noise = self.nu > 0 and not self.density
        # the free energy and its ledger: density runs with diffusion [model §5b]
        self.free_energy = self.density and self.nu > 0
        self._cum_names = tuple(
            k for k in _series.names(kind="cumulative")
            if {"token_noise": self.token_noise,
                "free_energy": self.free_energy}.get(_series.SERIES[k].group, True))
        X0, D0, values = start.X0, start.D0, start.values

        with _config.config_errors():  # the model names its parameters; errors name keys
            self.model = AttentionModel(
                beta=float(m["beta"]), normalization=m["normalization"], sign=m["sign"],
                laplacian_heads=tuple(m["laplacian_heads"]), causal=(m["mask"] == "causal"),
                values=values, backend=s["backend"], fast_exp=(s["exp"] == "fast"),
                precision=s["precision"], interaction=m["interaction"],
                head_combine=m["head_combine"],
            )
        # E, g, 𝒟 and the ledger exist: symmetric D_h, no mask [model §1b, §2]
        self._energy = m["mask"] != "causal" and m["interaction"] == "symmetric"
        self.process = process if process is not None else make_process(
            w, self.H, self.d, self.dt, interaction=m["interaction"])
        D0 = self.process.initial(D0)
        attach = getattr(self.process, "attach_model", None)
        if attach is not None:  # values, key weights, drift from the weight state [model §5c]
            with _config.config_errors():
                self.model = attach(self.model, cfg, X0)
        # time-dependent values V(t) of the weight process [model §1b]: the model of step k
        # is the run's model with V(t_k) (model_at)
        self._time_values = bool(getattr(self.process, "time_values", False))
        self._at = None  # (V, the model with V) of the last model_at
        if self._time_values and process is not None:  # (the configuration checks its own)
            _values.check_run(cfg, "the weight process's values")
        note = getattr(self.process, "rounding_note", "")
        if note:  # layer durations are rounded to whole steps [model §5]: say so
            log.warning("weights.layers: %s", note)
        self.method = s["method"]
        # the layer-norm placement [model §1c] (the config refuses what it cannot apply to)
        with _config.config_errors():
            self.placement = _layernorm.Placement(
                m["layernorm"], float(m.get("ngpt_alpha", 0.2)), float(m.get("mix_switch", 5.0)))
        self._post = self.placement.name == "post"
        if self.density:
            dn = cfg["density"]
            with _config.config_errors():
                grid = (CircleGrid(int(dn["cells"])) if self.d == 2
                        else voronoi_mesh(int(dn["cells"]), lloyd=int(dn["lloyd"])))
                self.model = DensityModel(self.model, grid, limiter=dn["limiter"],
                                          cfl=float(dn["cfl"]), nu=float(m["diffusion"]),
                                          diffusion_scheme=dn["diffusion_scheme"],
                                          diffusion_mobility=dn["diffusion_mobility"])
                self.stepper = DensityStepper(
                    self.method, diffuse=self.model.diffuse if self.model.split else None)
            if given_rho is not None:
                rho0 = _given_density(given_rho, self.P, self.model.grid)
            else:
                with _config.config_errors():
                    rho0 = initial_density(ini, self.model.grid)
            X0 = np.broadcast_to(rho0, (self.P, self.model.grid.N)).copy()
        else:
            with _config.config_errors():
                self.stepper = get_stepper(self.method,
                                           {**s, "max_pairwise_n": dg["max_pairwise_n"]})
        if self.method == "jko" and m["normalization"] == "head" and self.H >= 2:
            log.warning(JKO_HEAD_WARNING, self.H)
        self.X0, self.D0, self.values = X0, D0, values
        self.record_steps = sorted(set(range(0, self.nsteps + 1, self.record_every)) | {self.nsteps})
        if s["record_times"] == "geometric":  # rounded to the step grid [model §6d]
            self.record_steps = sorted({int(round(t / self.dt))
                                        for t in adaptive_run.record_times(cfg)} | {self.nsteps})
            self._step_ledger = False  # its buffer holds record_every steps per record
        self._record_set = frozenset(self.record_steps)
        # adaptive steps [model §6d]: an embedded pair per path; no ledger (its split assumes
        # weights frozen within a step)
        self.adaptive = bool(s["adaptive"])
        if self.adaptive:
            self.stepper = adaptive_run.make_solver(self)
            self.ledger = self._step_ledger = False

    def model_at(self, t: float):
        r"""The attention model at time t: the run's model with the weight process's values
        :math:`V(t)` [model §1b] (the run's model itself without time-dependent values). The
        token step from :math:`t_k` uses :math:`V(t_k)` throughout, as it uses :math:`D_k`."""
        if not self._time_values:
            return self.model
        V = self.process.values_at(t)
        if self._at is None or V is not self._at[0]:
            self._at = (V, _values.model_at(self.model, V))
        return self._at[1]

    # ------------------------------------------------------------------ state
    def initial_state(self) -> State:
        rngs = [np.random.default_rng(s) for s in self._path_seeds + self._token_seeds]
        zeros = {k: np.zeros(self.P) for k in self._cum_names}
        radius = np.ones((self.P, self.n)) if self.placement.has_radius else None
        return State(k=0, X=self.X0.copy(), D=self.D0.copy(),
                     rng_states=[r.bit_generator.state for r in rngs], cum=zeros,
                     E0=np.full(self.P, np.nan), radius=radius)

    def _row(self, state: State, F: Field, t: float):
        """One record: every active series of :data:`wflow.engine.series.SERIES`."""
        ctx = _series.RecordContext(X=state.X, D=state.D, t=t, field=F,
                                    drift=self.process.drift(state.D, t), model=self.model_at(t),
                                    process=self.process, config=self.config)
        row = {"t": t}
        for name, s in _series.SERIES.items():
            if s.fn is not None and (s.group in ("core", "user")
                                     or (s.group == "clustering" and self.clustering)):
                row[name] = s.fn(ctx)
        for k in self._cum_names:
            row[k] = state.cum[k].copy()
        row["paper_residual"] = (
            F.energy - state.E0 - self.model.sigma * row["int_G2"] - row["int_dEdt_drift"]
            - row["int_ito_expected"] - row["paper_martingale"]
        )
        if not self._post:  # its balance assumes the field σv [model §1c]
            row["paper_residual"] = np.full(self.P, np.nan)
        if state.radius is not None:
            row["radius"] = state.radius.copy()
        if not self.ledger or not self._energy:
            for k in _series.names(group="ledger") + (_series.names(group="token_noise")
                                                       if self.token_noise else ()):
                row[k] = np.full(self.P, np.nan)
        out = self.config["output"]
        if self.density:
            row["mass"] = self.model.grid.masses(state.X).sum(axis=-1)
            row["dissipation_cells"] = F.dissipation_cells.copy()
        if self.free_energy:  # [model §5b]
            for k in ("free_energy", "entropy", "free_energy_rate"):
                row[k] = getattr(F, k).copy()
            if not self.ledger:
                row["free_energy_residual"] = np.full(self.P, np.nan)
        if out["store_tokens"]:
            row["rho" if self.density else "X"] = state.X.copy()
        if out["store_weights"]:
            row["D"] = state.D.copy()
        if self.clustering:
            dg = self.config["diagnostics"]
            row.update(clustering_series(state.X, dg["cluster_angle"], dg["max_pairwise_n"],
                                         dg["merge_cosine"]))
        if self._step_ledger:  # the steps of the interval ending here, then a fresh buffer
            for i, name in enumerate(STEP_LEDGER):
                row[name] = state.step_ledger[..., i].copy()
            state.step_ledger[...] = np.nan
        if self.w2:
            row.update(self._w2_series(state, t))
        for name in self.stepper.series:
            row[name] = state.stepper_info[name].copy()
        return row

    def _w2_series(self, state: State, t: float) -> dict:
        w2 = np.full(self.P, np.nan)
        prev = state.w2_prev
        if prev is not None and self.n <= self.config["diagnostics"]["max_pairwise_n"]:
            from wflow.model.diagnostics import w2_geodesic

            w2 = np.array([w2_geodesic(prev[0][p], state.X[p]) for p in range(self.P)])
        out = {"w2_step": w2}
        if prev is not None:  # the last interval may be shorter than record_every steps
            w2 = w2 / (t - float(prev[1]))
        out["metric_speed"] = w2
        state.w2_prev = (state.X.copy(), t)
        return out

    # ------------------------------------------------------------------ loop
    def run(self, recorder=None, state: State | None = None, progress=False, stop_after=None):
        """Run (or continue from ``state``) to the end; returns a :class:`Result`.

        ``recorder`` receives one dict per record (``record``) and checkpoints
        (``checkpoint``); ``stop_after`` stops after that many steps (for tests).
        """
        rec = recorder if recorder is not None else ListRecorder()
        if self.adaptive:  # from t = 0 or from a checkpoint's loop state [model §6d]
            t_start = time.perf_counter()
            stats = adaptive_run.run(self, rec, state)
            self.elapsed = time.perf_counter() - t_start
            if isinstance(rec, ListRecorder):
                return Result(self.config, rec.arrays(),
                              {"elapsed": self.elapsed, "adaptive": stats})
            return rec
        st = state if state is not None else self.initial_state()
        rngs = []
        for s, stt in zip(self._path_seeds + self._token_seeds, st.rng_states):
            r = np.random.default_rng(s)
            r.bit_generator.state = stt
            rngs.append(r)
        rngs, token_rngs = rngs[:len(self._path_seeds)], rngs[len(self._path_seeds):]
        noise_scale = np.sqrt(2.0 * self.nu * self.dt)
        sigma, dt, P = self.model.sigma, self.dt, self.P
        want_ito = self.process.needs_ito
        ckpt_every = int(self.config["output"].get("checkpoint_every", 0) or 0)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            ready = getattr(self.model, "kernels_ready", None)
            if ready is not None and not ready(st.X, st.D):
                # the first field evaluation compiles; the bar starts after it, so its rate
                # and ETA are the run's own
                print(COMPILING, file=sys.stderr, flush=True)
                self.model.evaluate(st.X, st.D, want_ito=want_ito)
            bar = tqdm(total=self.nsteps, initial=st.k, unit="step", dynamic_ncols=True,
                       desc="wflow")
        t_start = time.perf_counter()
        for name in self.stepper.series:
            st.stepper_info.setdefault(name, np.full(P, np.nan))
        if self._step_ledger and st.step_ledger is None:
            st.step_ledger = np.full((self.record_every, P, len(STEP_LEDGER)), np.nan)
        steps_done = 0
        # the ledger's (X_{k+1}; D_k) and the next step's (X_{k+1}; D_{k+1}) in one call where
        # that gives the same bits as two (AttentionModel.evaluate_pair); a resumed run
        # evaluates its first step alone, to the same bits
        pair = (not self.density and hasattr(self.model, "evaluate_pair")
                and not self._time_values)  # (V(t_k) and V(t_{k+1}): two models)
        F_next = None
        while True:
            k = st.k
            t = k * dt
            model = self.model_at(t)
            if F_next is None:
                F = model.evaluate(st.X, st.D, want_ito=want_ito)
            else:
                F, F_next = F_next, None
            if self._energy:
                _check_finite(F.energy, "energy", k, t)
            if k == 0:
                st.E0 = F.energy.copy()
            # finish the ledger of the previous step: its weight part needs E(X_k; D_k)
            if st.pending:
                wpart = F.energy - st.pending["E_mid"]
                st.cum["weight_work"] += wpart
                st.cum["ito_realised"] += wpart - st.pending["drift"] - st.pending["mart"]
                st.cum["ledger_telescoping"] = (
                    F.energy - st.E0 - st.cum["weight_work"] - st.cum["token_work"]
                )
                j = (k - 1) % self.record_every  # slot of step k − 1 in the record interval
                if self._step_ledger:  # (not kept under geometric record times)
                    st.step_ledger[j] = np.stack([wpart, st.pending["tok"], st.pending["drift"],
                                   st.pending["mart"], wpart - st.pending["drift"] - st.pending["mart"],
                                   st.pending["res"]], axis=-1)
                st.pending = {}
            if k in self._record_set:
                rec.record(self._row(st, F, t))
            if k >= self.nsteps or (stop_after is not None and steps_done >= stop_after):
                break

            # token step with weights frozen at D_k
            Dk = st.D
            ctx = self._step_context(st.X, Dk, F, model)
            if token_rngs:  # [model §6b]: one (n, d) draw per path and step
                ctx.noise = noise_scale * np.stack(
                    [r.standard_normal((self.n, self.d)) for r in token_rngs])
            place = "post" if self._post else self.placement.at(t, dt)
            if place == "post":
                X1, info = self.stepper.step(ctx)
            else:  # [model §1c]
                X1, st.radius = placement_step(TABLEAUX[self.method], place, st.X, st.radius, dt,
                                               ctx.output, self.placement.alpha)
                info = {}
            st.stepper_info.update(info)
            _check_finite(X1, "tokens X", k + 1, t + dt)

            # the paper's balance, left point
            fk = self.process.drift(Dk, t)
            D1 = self.process.step(Dk, t, dt, rngs)
            xi = self.process.noise_increment(Dk, D1, t, dt)
            c = st.cum
            c["int_dissipation"] += dt * F.dissipation
            c["int_G2"] += dt * F.G2
            c["int_dEdt_drift"] += dt * np.einsum("phab,phab->p", F.dE_dD, fk)
            c["int_ito_expected"] += dt * self.process.ito_rate(self.model.beta, F.ito_sum)
            c["paper_martingale"] += np.einsum("phab,phab->p", F.dE_dD, xi)
            # the exact ledger needs (X_{k+1}; D_k): a second pass
            if self.ledger and self._energy:
                if pair:
                    Fm, F_next = self.model.evaluate_pair(X1, Dk, D1, want_ito=(False, want_ito))
                else:
                    Fm = model.evaluate(X1, Dk, want_ito=False)
                tok = Fm.energy - F.energy
                res = tok - sigma * dt * 0.5 * (F.dissipation + Fm.dissipation)
                c["token_work"] += tok
                c["ledger_residual"] += res
                if self.free_energy:  # the chain rule of F = -σE + νS at frozen D_k
                    c["free_energy_residual"] += (
                        Fm.free_energy - F.free_energy
                        - dt * 0.5 * (F.free_energy_rate + Fm.free_energy_rate))
                if ctx.noise is not None:  # <g_i, P eta_i> = <g_i, eta_i>: g_i is tangent
                    tmart = np.einsum("pia,pia->p", F.gradient, ctx.noise) / self.n
                    c["token_martingale"] += tmart
                    c["token_ito_realised"] += res - tmart
                drift = np.einsum("phab,phab->p", Fm.dE_dD, fk * dt)
                mart = np.einsum("phab,phab->p", Fm.dE_dD, xi)
                c["drift_work"] += drift
                c["martingale"] += mart
                st.pending = {"E_mid": Fm.energy.copy(), "drift": drift, "mart": mart,
                              "tok": tok, "res": res}
                del Fm  # (with the joint evaluation: its arrays, twice the paths)
            st.X, st.D, st.k = X1, D1, k + 1
            steps_done += 1
            if bar is not None:
                bar.update(1)
            if ckpt_every and st.k % ckpt_every == 0 and st.k < self.nsteps:
                st.rng_states = [r.bit_generator.state for r in rngs + token_rngs]
                rec.checkpoint(st)
        st.rng_states = [r.bit_generator.state for r in rngs + token_rngs]
        if bar is not None:
            bar.close()
        self.elapsed = time.perf_counter() - t_start
        self.final_state = st
        if isinstance(rec, ListRecorder):
            arrays = rec.arrays()
            return Result(self.config, arrays, {"elapsed": self.elapsed})
        return rec

    def _step_context(self, X, Dk, F: Field, model=None) -> StepContext:
        """What a stepper may use at step k: the field with weights frozen at D_k (and the
        values of ``model``, :meth:`model_at` t_k), its first stage, and for energy-based
        steppers E, ∇E and the mobility — b̂ (head, joint) or 1 (none), frozen at X_k
        [model §7]."""
        model = self.model if model is None else model
        sigma, n = model.sigma, self.n
        if self.density:  # the rate of the cell averages, its CFL step
            return StepContext(X=X, dt=self.dt, sigma=sigma, k1=F.rate, max_dt=F.max_dt,
                               velocity=lambda rho: model.rate(rho, Dk))

        def energy_grad(p, Y):
            G = model.evaluate(Y[None], Dk[p : p + 1], want_ito=False)
            return float(G.energy[0]), G.gradient[0] / n

        def output(Y):  # σ u(Y; D_k), the output before the projection [model §1c]
            return sigma * _layernorm.output(model, Y, Dk, F.velocity if Y is X else None)

        b = np.ones_like(F.b_hat) if model.normalization == "none" else F.b_hat
        return StepContext(X=X, dt=self.dt, sigma=sigma,
                           velocity=lambda Y: sigma * model.velocity(Y, Dk),
                           k1=sigma * F.velocity, energy_grad=energy_grad, mobility=b,
                           output=output)


def _given_tokens(tokens, P, n, d):
    """``tokens`` (n, d) or (P, n, d) as (P, n, d) float64; ConfigError if not unit rows."""
    X = np.asarray(tokens, dtype=float)
    if X.shape not in ((n, d), (P, n, d)):
        raise ConfigError(f"tokens: shape {X.shape}, the configuration needs (model.n, model.d) "
                          f"= ({n}, {d}) or (solver.paths, n, d) = ({P}, {n}, {d})")
    norms = np.linalg.norm(X, axis=-1)
    if not np.all(np.isfinite(norms)) or np.any(np.abs(norms - 1.0) > UNIT_TOL):
        raise ConfigError(f"tokens: rows must be finite unit vectors (norms {np.nanmin(norms):.3g} "
                          f"to {np.nanmax(norms):.3g}); tokens lie on the sphere")
    return np.broadcast_to(sphere.normalize(X), (P, n, d)).copy()


#: a given density's mass may differ from 1 by this (a run conserves it to round-off)
MASS_TOL = 1e-9
#: a given density's cell averages may be negative by this, relative to their maximum
DENSITY_NEG_TOL = 1e-12


def _given_density(rho, P, grid):
    r"""``rho`` (N,) or (P, N) as (P, N) float64 cell averages; ConfigError unless finite,
    non-negative and of mass :math:`\sum_j \rho_j\lvert K_j\rvert = 1` on ``grid``."""
    r = np.asarray(rho, dtype=float)
    N = grid.N
    if r.shape not in ((N,), (P, N)):
        raise ConfigError(f"tokens: a density run starts from cell averages of shape "
                          f"(density.cells,) = ({N},) or (solver.paths, density.cells) = "
                          f"({P}, {N}), not {r.shape}")
    if not np.all(np.isfinite(r)):
        raise ConfigError("tokens: the given density has non-finite cell averages")
    if np.min(r) < -DENSITY_NEG_TOL * max(float(np.max(r)), 0.0):
        raise ConfigError(f"tokens: the given density has a negative cell average "
                          f"({np.min(r):.3g}); a density is non-negative")
    mass = grid.masses(r).sum(axis=-1)
    if np.any(np.abs(mass - 1.0) > MASS_TOL):
        raise ConfigError(f"tokens: the given density has mass {np.min(mass):.12g} to "
                          f"{np.max(mass):.12g}; a probability density has mass 1 (cell "
                          "averages times cell sizes)")
    return np.broadcast_to(r, (P, N)).copy()


def _check_finite(a, what, k, t):
    if not np.all(np.isfinite(a)):
        raise NumericalError(f"non-finite {what} at step {k} (t = {t:.6g}); the run stops here",
                             step=k)


JKO_HEAD_WARNING = (
    "solver.method = 'jko' with model.normalization = 'head' and %d heads is not the exact "
    "gradient flow: no scalar mobility reproduces the head-normalised velocity, the steps use "
    "b_hat and are not expected to converge to the explicit flow [model §7]; "
    "model.normalization = 'joint' or 'none' is exact")

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
