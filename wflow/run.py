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

The paper's balance uses left-point sums at (X_k; D_k):
:math:`\text{paper\_residual} = \Delta E - \sigma\sum\Delta t\,G^2 - \sum\Delta t\,\partial_tE
- \sum\Delta t\,\text{Itô}_{\text{expected}} - M`.

Random streams: ``SeedSequence(init.seed).spawn(3)`` gives the token stream, the
weight-initialisation stream and the path streams; path p's weight noise comes
only from its own generator, so results do not depend on batching.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from . import config as _config
from . import sphere
from .attention import AttentionModel, Field
from .diagnostics import CLUSTERING_NAMES, clustering_series
from .errors import ConfigError, NumericalError
from .integrators import get_solver
from .weights import initial_weights, load_weight_file, make_process

log = logging.getLogger(__name__)

__all__ = ["simulate", "Simulation", "Result", "SERIES_POINT", "SERIES_CUMULATIVE"]

#: values at the record time, at (X_k; D_k), shape (records, P)
SERIES_POINT = (
    "energy", "dissipation", "G2", "G2_hm", "v2_mean", "b_hat_mean", "b_hat_min", "b_hat_max",
    "Zbar_mean", "dEdt_drift", "ito_expected",
)
#: cumulative from t = 0 to the record time, shape (records, P)
SERIES_CUMULATIVE = (
    "int_dissipation", "int_G2", "int_dEdt_drift", "int_ito_expected", "paper_martingale",
    "paper_residual", "weight_work", "token_work", "drift_work", "martingale", "ito_realised",
    "ledger_residual", "ledger_telescoping",
)
#: the exact-ledger series (NaN when diagnostics.ledger = false or under the causal mask)
LEDGER_NAMES = (
    "weight_work", "token_work", "drift_work", "martingale", "ito_realised", "ledger_residual",
    "ledger_telescoping",
)
#: the per-step ledger, shape (records, record_every, P): entry [r, j] is step
#: (r − 1)·record_every + j of the interval ending at record r (NaN at r = 0 and for
#: missing steps of a shorter last interval)
STEP_LEDGER = ("step_weight_part", "step_token_part", "step_drift", "step_martingale",
               "step_ito_realised", "step_ledger_residual")
#: JKO statistics of the last step before the record (only for solver.method = "jko")
SERIES_JKO = ("jko_iterations", "jko_converged", "jko_objective_drop", "jko_w2", "jko_identity")


@dataclass
class State:
    """Everything needed to continue a run bit-identically (the checkpoint)."""

    k: int
    X: np.ndarray  # (P, n, d)
    D: np.ndarray  # (P, H, d, d)
    rng_states: list  # bit-generator states, one per path
    cum: dict  # cumulative sums, (P,) each
    E0: np.ndarray  # (P,) energy at t = 0 (NaN until the first pass at k = 0 sets it)
    pending: dict = field(default_factory=dict)  # ledger pieces of the last step, (P,) each
    memo: dict = field(default_factory=dict)  # what later records need: last JKO info, last snapshot


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

    def checkpoint(self, state: State):  # in-memory runs need no checkpoint
        pass

    def arrays(self):
        if not self.rows:
            return {}
        return {k: np.stack([np.asarray(r[k]) for r in self.rows]) for k in self.rows[0]}


class Simulation:
    """A configured run: builds the model, weight process, solver and streams.

    Parameters
    ----------
    config : dict (nested, [model §10]), path, or None for the embedded default.
    overrides : list of "section.key=value".
    process : WeightProcess, optional
        Use this weight process instead of the one ``weights`` describes (e.g. a
        :class:`wflow.weights.DrivenOU`); the Itô term then uses its ``noise_var``.
    """

    def __init__(self, config=None, overrides=(), process=None):
        cfg = _config.resolve(config, overrides)
        self.config = cfg
        m, ini, w, s, dg = (cfg[k] for k in ("model", "init", "weights", "solver", "diagnostics"))
        self.n, self.d, self.H, self.P = m["n"], m["d"], m["heads"], s["paths"]
        self.dt = float(s["dt"])
        self.nsteps = int(round(s["T"] / self.dt))
        self.record_every = int(s["record_every"])
        self.ledger = bool(dg["ledger"])
        self.w2 = bool(dg["w2"])
        self._step_ledger = self.ledger and m["mask"] != "causal"
        self.clustering = bool(dg["clustering"])
        ss = np.random.SeedSequence(int(ini["seed"]))
        ss_tok, ss_w, ss_paths = ss.spawn(3)
        self._path_seeds = ss_paths.spawn(self.P)

        # initial weights (shared by the paths unless asked per path), values
        rng_w = np.random.default_rng(ss_w)
        given = None
        if ini["weights"] == "file":
            given = load_weight_file(ini["weights_file"])["D"]
            if given.ndim == 4:
                given = given[0]
        wkind = "given" if ini["weights"] == "file" else ini["weights"]
        if ini.get("per_path_weights"):
            D0 = np.stack([initial_weights(wkind, self.H, self.d, rng_w, given) for _ in range(self.P)])
        else:
            D0 = np.broadcast_to(initial_weights(wkind, self.H, self.d, rng_w, given),
                                 (self.P, self.H, self.d, self.d)).copy()
        values = None
        if m["values"] == "identity":
            values = np.broadcast_to(np.eye(self.d), (self.H, self.d, self.d)).copy()
        elif m["values"] == "gaussian":
            values = rng_w.standard_normal((self.H, self.d, self.d)) / np.sqrt(self.d)

        # initial tokens
        rng_t = np.random.default_rng(ss_tok)
        per_path_tok = bool(ini.get("per_path_tokens"))
        X0 = np.stack([self._tokens(ini, rng_t) for _ in range(self.P if per_path_tok else 1)])
        X0 = np.broadcast_to(X0, (self.P, self.n, self.d)).copy()

        self.model = AttentionModel(
            beta=float(m["beta"]), normalization=m["normalization"], sign=m["sign"],
            laplacian=tuple(m["laplacian_heads"]), causal=(m["mask"] == "causal"),
            values=values, backend=s["backend"], fast_exp=(s["exp"] == "fast"),
            precision=s["precision"],
        )
        self.process = make_process(w, self.H, self.d, self.dt) if process is None else process
        if w["process"] in ("layers", "file"):  # the weight trajectory fixes D(0)
            D0 = np.broadcast_to(self.process.at(0.0), D0.shape).copy()
        note = getattr(self.process, "rounding_note", "")
        if note:  # layer durations are rounded to whole steps [model §5]: say so
            log.warning("weights.layers: %s", note)
        self.noise_var = float(w.get("noise_var", 0.0)) if w["process"] == "ou" else 0.0
        if process is not None:
            self.noise_var = float(getattr(process, "noise_var", 0.0))
        self.method = s["method"]
        if self.method == "jko":
            from .jko import JKO

            self.stepper = JKO(tol=s["jko_tol"], maxiter=s["jko_maxiter"],
                               max_n=dg["max_pairwise_n"])
        else:
            self.stepper = get_solver(self.method)
        self.X0, self.D0, self.values = X0, D0, values
        self.record_steps = sorted(set(range(0, self.nsteps + 1, self.record_every)) | {self.nsteps})
        self._record_set = frozenset(self.record_steps)

    def _tokens(self, ini, rng):
        kind = ini["tokens"]
        if kind == "octahedral":
            return sphere.octahedral(self.n, self.d, rng, noise=float(ini["token_noise"]))
        if kind == "uniform":
            return sphere.uniform(self.n, self.d, rng)
        if kind == "vmf":
            mu = np.zeros(self.d)
            mu[-1] = 1.0
            return sphere.von_mises_fisher(self.n, mu, float(ini["kappa"]), rng)
        if kind == "file":
            return _load_tokens(ini["tokens_file"], self.n, self.d)
        raise ConfigError(f"init.tokens = {kind!r}: allowed values are octahedral, uniform, vmf, file")

    # ------------------------------------------------------------------ state
    def initial_state(self) -> State:
        rngs = [np.random.default_rng(s) for s in self._path_seeds]
        zeros = {k: np.zeros(self.P) for k in SERIES_CUMULATIVE}
        return State(k=0, X=self.X0.copy(), D=self.D0.copy(),
                     rng_states=[r.bit_generator.state for r in rngs], cum=zeros,
                     E0=np.full(self.P, np.nan))

    def series_names(self):
        names = list(SERIES_POINT) + list(SERIES_CUMULATIVE)
        if self.clustering:
            names += list(CLUSTERING_NAMES)
        if self.method == "jko":
            names += list(SERIES_JKO)
        if self.w2:
            names += ["w2_step", "metric_speed"]
        if self._step_ledger:
            names += list(STEP_LEDGER)
        return names

    def _row(self, state: State, F: Field, t: float, extra: dict):
        row = {"t": t}
        fcur = self.process.drift(state.D, t)
        row.update(
            energy=F.energy, dissipation=F.dissipation, G2=F.G2, G2_hm=F.G2_hm,
            v2_mean=np.mean(np.sum(F.velocity**2, axis=-1), axis=-1),
            b_hat_mean=F.b_hat.mean(axis=1), b_hat_min=F.b_hat.min(axis=1),
            b_hat_max=F.b_hat.max(axis=1), Zbar_mean=F.partition.mean(axis=(1, 2)),
            dEdt_drift=np.einsum("phab,phab->p", F.dE_dD, fcur),
            ito_expected=self._ito_rate(F),
        )
        for k in SERIES_CUMULATIVE:
            row[k] = state.cum[k].copy()
        row["paper_residual"] = (
            F.energy - state.E0 - self.model.sigma * row["int_G2"] - row["int_dEdt_drift"]
            - row["int_ito_expected"] - row["paper_martingale"]
        )
        if not self.ledger or self.model.causal:
            for k in LEDGER_NAMES:
                row[k] = np.full(self.P, np.nan)
        out = self.config["output"]
        if out["store_tokens"]:
            row["X"] = state.X.copy()
        if out["store_weights"]:
            row["D"] = state.D.copy()
        if self.clustering:
            dg = self.config["diagnostics"]
            row.update(clustering_series(state.X, dg["cluster_angle"], dg["max_pairwise_n"]))
        if self._step_ledger:  # the steps of the interval ending here, then a fresh buffer
            buf = state.memo["step_ledger"]
            for i, name in enumerate(STEP_LEDGER):
                row[name] = buf[..., i].copy()
            buf[...] = np.nan
        if self.w2:
            prev = state.memo.get("w2_prev_X")
            w2 = np.full(self.P, np.nan)
            if prev is not None and self.n <= self.config["diagnostics"]["max_pairwise_n"]:
                from .diagnostics import w2_geodesic

                w2 = np.array([w2_geodesic(prev[p], state.X[p]) for p in range(self.P)])
            row["w2_step"] = w2
            if prev is not None:  # the last interval may be shorter than record_every steps
                w2 = w2 / (t - float(state.memo["w2_prev_t"]))
            row["metric_speed"] = w2
            state.memo["w2_prev_X"] = state.X.copy()
            state.memo["w2_prev_t"] = np.array(t)
        row.update(extra)
        return row

    def _ito_rate(self, F: Field):
        if self.noise_var == 0.0:
            return np.zeros(self.P)
        return self.model.beta * self.noise_var / 4.0 * F.ito_sum

    # ------------------------------------------------------------------ loop
    def run(self, recorder=None, state: State | None = None, progress=False, stop_after=None):
        """Run (or continue from ``state``) to the end; returns a :class:`Result`.

        ``recorder`` receives one dict per record (``record``) and checkpoints
        (``checkpoint``); ``stop_after`` stops after that many steps (for tests).
        """
        rec = recorder if recorder is not None else ListRecorder()
        st = state if state is not None else self.initial_state()
        rngs = []
        for s, stt in zip(self._path_seeds, st.rng_states):
            r = np.random.default_rng(s)
            r.bit_generator.state = stt
            rngs.append(r)
        sigma, dt, P = self.model.sigma, self.dt, self.P
        want_ito = self.noise_var > 0.0
        ckpt_every = int(self.config["output"].get("checkpoint_every", 0) or 0)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=self.nsteps, initial=st.k, unit="step", dynamic_ncols=True,
                       desc="wflow")
        t_start = time.perf_counter()
        if self.method == "jko":
            for k in SERIES_JKO:
                st.memo.setdefault(k, np.full(P, np.nan))
        if self._step_ledger:
            st.memo.setdefault("step_ledger",
                               np.full((self.record_every, P, len(STEP_LEDGER)), np.nan))
        steps_done = 0
        while True:
            k = st.k
            t = k * dt
            F = self.model.evaluate(st.X, st.D, want_ito=want_ito)
            if not self.model.causal:
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
                buf = st.memo["step_ledger"]
                buf[j] = np.stack([wpart, st.pending["tok"], st.pending["drift"],
                                   st.pending["mart"], wpart - st.pending["drift"] - st.pending["mart"],
                                   st.pending["res"]], axis=-1)
                st.pending = {}
            if k in self._record_set:
                rec.record(self._row(st, F, t, {k: st.memo[k].copy() for k in SERIES_JKO}
                                         if self.method == "jko" else {}))
            if k >= self.nsteps or (stop_after is not None and steps_done >= stop_after):
                break

            # token step with weights frozen at D_k
            Dk = st.D
            F_tok = lambda Y, Dk=Dk: sigma * self.model.velocity(Y, Dk)
            if self.method == "jko":
                X1, info = self._jko_step(st.X, Dk, F)
                st.memo.update(info)
            else:
                X1 = self.stepper.step(F_tok, st.X, dt, k1=sigma * F.velocity)
            _check_finite(X1, "tokens X", k + 1, t + dt)

            # the paper's balance, left point
            fk = self.process.drift(Dk, t)
            D1 = self.process.step(Dk, t, dt, rngs)
            xi = self.process.noise_increment(Dk, D1, t, dt)
            c = st.cum
            c["int_dissipation"] += dt * F.dissipation
            c["int_G2"] += dt * F.G2
            c["int_dEdt_drift"] += dt * np.einsum("phab,phab->p", F.dE_dD, fk)
            c["int_ito_expected"] += dt * self._ito_rate(F)
            c["paper_martingale"] += np.einsum("phab,phab->p", F.dE_dD, xi)
            # the exact ledger needs (X_{k+1}; D_k): a second pass
            if self.ledger and not self.model.causal:
                Fm = self.model.evaluate(X1, Dk, want_ito=False)
                tok = Fm.energy - F.energy
                res = tok - sigma * dt * 0.5 * (F.dissipation + Fm.dissipation)
                c["token_work"] += tok
                c["ledger_residual"] += res
                drift = np.einsum("phab,phab->p", Fm.dE_dD, fk * dt)
                mart = np.einsum("phab,phab->p", Fm.dE_dD, xi)
                c["drift_work"] += drift
                c["martingale"] += mart
                st.pending = {"E_mid": Fm.energy, "drift": drift, "mart": mart, "tok": tok,
                              "res": res}
            st.X, st.D, st.k = X1, D1, k + 1
            steps_done += 1
            if bar is not None:
                bar.update(1)
            if ckpt_every and st.k % ckpt_every == 0 and st.k < self.nsteps:
                st.rng_states = [r.bit_generator.state for r in rngs]
                rec.checkpoint(st)
        st.rng_states = [r.bit_generator.state for r in rngs]
        if bar is not None:
            bar.close()
        self.elapsed = time.perf_counter() - t_start
        self.final_state = st
        if isinstance(rec, ListRecorder):
            arrays = rec.arrays()
            return Result(self.config, arrays, {"elapsed": self.elapsed})
        return rec

    def _jko_step(self, X, Dk, F: Field):
        """JKO step with weights D_k and mobility frozen at X_k: b̂ (head, joint) or 1 (none)."""
        b = np.ones_like(F.b_hat) if self.model.normalization == "none" else F.b_hat
        n = self.n

        def energy_grad(p, Y):
            G = self.model.evaluate(Y[None], Dk[p : p + 1], want_ito=False)
            return float(G.energy[0]), G.gradient[0] / n

        return self.stepper.step(energy_grad, X, b, self.dt, self.model.sigma)


def _check_finite(a, what, k, t):
    if not np.all(np.isfinite(a)):
        raise NumericalError(f"non-finite {what} at step {k} (t = {t:.6g}); the run stops here")


def _load_tokens(path, n, d):
    try:
        if str(path).endswith((".h5", ".hdf5")):
            import h5py

            with h5py.File(path, "r") as f:
                X = np.asarray(f["X"])
        else:
            with np.load(path, allow_pickle=False) as z:
                X = np.asarray(z["X"])
    except (OSError, KeyError, ValueError) as e:
        raise ConfigError(f"init.tokens_file = {str(path)!r}: cannot read key 'X' ({e})") from None
    if X.shape != (n, d) or not np.all(np.isfinite(X)):
        raise ConfigError(
            f"init.tokens_file = {str(path)!r}: 'X' must be finite with shape ({n}, {d}), got {X.shape}"
        )
    return sphere.normalize(X)


def simulate(config=None, overrides=(), recorder=None, progress=False) -> Result:
    """Run one configuration (nested dict of [model §10], a TOML path, or None = default).

    Returns
    -------
    Result with ``t`` (records,), series (records, P) of [model §10], ``X`` (records, P, n, d).
    """
    sim = Simulation(config, overrides)
    res = sim.run(recorder=recorder, progress=progress)
    log.info("simulate: %d steps in %.3f s", sim.nsteps, sim.elapsed)
    return res
