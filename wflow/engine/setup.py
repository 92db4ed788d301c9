r"""The build of a run: one :class:`RunSetup`, made once from a validated configuration, that
the run loops, the initial state and the records read.

It holds the attention model (on cell averages for a density [model §5b]), the weight process
[model §5], the stepper (wrapped for a layer-norm placement [model §1c], or the adaptive pair
[model §6d]), the initial tokens and weights with their random streams, the record steps, the
ledger [model §6] and the :class:`~wflow.engine.features.Features` of the run.

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

import numpy as np

from wflow import config as _config
from wflow.engine import features as _features
from wflow.engine import initial
from wflow.engine import series as _series
from wflow.engine.initial import UNIT_TOL
from wflow.engine.ledger import Ledger
from wflow.engine.records import documented_nan
from wflow.engine.state import State
from wflow.errors import ConfigError
from wflow.geometry import sphere
from wflow.geometry.circle_fv import CircleGrid
from wflow.geometry.sphere_mesh import voronoi_mesh
from wflow.model import layernorm as _layernorm
from wflow.model.attention import AttentionModel
from wflow.model.density import DensityModel, initial_density
from wflow.model.density_spectral import given_density as given_spectral
from wflow.model.density_spectral import initial_density as initial_spectral
from wflow.model.density_spectral import spectral_model
from wflow.model.processes import deterministic_text, make_process
from wflow.model.processes import values as _values
from wflow.model.spectral import run_summation
from wflow.stepping.adaptive import Adaptive
from wflow.stepping.density import DensityStepper
from wflow.stepping.integrators import TABLEAUX
from wflow.stepping.layernorm import PlacedStepper
from wflow.stepping.registry import get_stepper

log = logging.getLogger(__name__)

__all__ = ["RunSetup", "RecordSteps", "build", "record_times", "MASS_TOL", "DENSITY_NEG_TOL"]

#: a given density's mass may differ from 1 by this (a run conserves it to round-off)
MASS_TOL = 1e-9
#: a given density's cell averages may be negative by this, relative to their maximum
DENSITY_NEG_TOL = 1e-12

JKO_HEAD_WARNING = (
    "solver.method = 'jko' with model.normalization = 'head' and %d heads is not the exact "
    "gradient flow: no scalar mobility reproduces the head-normalised velocity, the steps use "
    "b_hat and are not expected to converge to the explicit flow [model §7]; "
    "model.normalization = 'joint' or 'none' is exact")
MIX_WARNING = ("model.layernorm = 'mix' switches from post- to pre-LN at model.mix_switch = %g, "
               "not before solver.T = %g: this run is post-LN throughout (set model.mix_switch "
               "below T) [model §1c]")


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
    t = np.array(list(RecordSteps(nsteps, int(s["record_every"]))), dtype=float) * dt
    t[-1] = T
    return t


class RecordSteps:
    """The steps with a record: 0, every ``every``-th step and the last (uniform records), or
    the sorted ``steps`` (geometric records). Membership, length, iteration and
    :meth:`before` without a list of every step (a run of 10⁹ steps holds no set of them)."""

    def __init__(self, nsteps: int, every: int, steps=None):
        self.nsteps, self.every = int(nsteps), int(every)
        self.steps = None if steps is None else list(steps)
        self._set = None if steps is None else frozenset(self.steps)

    def __contains__(self, k) -> bool:
        if self._set is not None:
            return k in self._set
        return 0 <= k <= self.nsteps and (k % self.every == 0 or k == self.nsteps)

    def __len__(self) -> int:
        if self.steps is not None:
            return len(self.steps)
        return self.nsteps // self.every + 1 + (1 if self.nsteps % self.every else 0)

    def __iter__(self):
        if self.steps is not None:
            return iter(self.steps)
        tail = () if self.nsteps % self.every == 0 else (self.nsteps,)
        return iter((*range(0, self.nsteps + 1, self.every), *tail))

    def before(self, k: int) -> int:
        """The number of record steps < k."""
        if self.steps is not None:
            return sum(1 for s in self.steps if s < k)
        if k <= 0:
            return 0
        multiples = min((k - 1) // self.every + 1, self.nsteps // self.every + 1)
        return multiples + (1 if self.nsteps % self.every and self.nsteps < k else 0)


class RunSetup:
    r"""Everything a run is made of, built once (:func:`build`).

    Attributes
    ----------
    config : the validated configuration.
    features : its :class:`~wflow.engine.features.Features`.
    n, d, H, P, dt, nsteps, record_every : sizes and steps.
    model : the :class:`~wflow.model.attention.AttentionModel` (or the
        :class:`~wflow.model.density.DensityModel` of a density run).
    process : the weight process; ``time_values`` whether it carries values V(t).
    stepper : the token stepper (a :class:`~wflow.stepping.layernorm.PlacedStepper` off
        post-LN; the :class:`~wflow.stepping.adaptive.Adaptive` pair with adaptive steps).
    placement : the :class:`~wflow.model.layernorm.Placement`.
    ledger : the :class:`~wflow.engine.ledger.Ledger`; ``exact_ledger`` whether it is computed.
    spectral : whether the field is summed spectrally (``solver.summation``, resolved by
        :func:`~wflow.model.spectral.run_summation`) [model §2s]: its records carry the
        summation's report (the ``spectral`` series).
    X0, D0, values : the initial tokens (P, n, d) (cell averages (P, N) for a density), the
        initial weights (P, H, d, d) and the values of ``model.values``.
    record_steps : the steps with a record (fixed steps).
    path_seeds, token_seeds : the seed sequences of the weight noise and token noise.
    cum_names : the cumulative series the run keeps.
    memory : the memory estimate it was admitted with.
    """

    def model_at(self, t: float):
        r"""The attention model at time t: the run's model with the weight process's values
        :math:`V(t)` [model §1b] (the run's model itself without time-dependent values). The
        token step from :math:`t_k` uses :math:`V(t_k)` throughout, as it uses :math:`D_k`."""
        if not self.time_values:
            return self.model
        V = self.process.values_at(t)
        if self._at is None or V is not self._at[0]:
            self._at = (V, _values.model_at(self.model, V))
        return self._at[1]

    @property
    def adaptive(self) -> bool:
        """Whether the run takes adaptive steps [model §6d]."""
        return self.features.adaptive

    @property
    def n_streams(self) -> int:
        """The random streams a checkpoint carries: weight noise, then token noise."""
        return len(self.path_seeds) + len(self.token_seeds)

    def initial_state(self) -> State:
        """The state at t = 0."""
        rngs = [np.random.default_rng(s) for s in self.path_seeds + self.token_seeds]
        zeros = {k: np.zeros(self.P) for k in self.cum_names}
        info = {}
        initial_info = getattr(self.stepper, "initial_info", None)
        if initial_info is not None:
            info = initial_info(self.P, self.n)
        return State(k=0, X=self.X0.copy(), D=self.D0.copy(),
                     rng_states=[r.bit_generator.state for r in rngs], cum=zeros,
                     E0=np.full(self.P, np.nan), stepper_info=info)


def build(cfg: dict, memory, process=None, tokens=None) -> RunSetup:
    """The :class:`RunSetup` of the validated configuration ``cfg`` (``process`` and
    ``tokens`` as in :class:`~wflow.engine.run.Simulation`)."""
    run = RunSetup()
    run.config, run.memory = cfg, memory
    run.features = f = _features.of(cfg)
    m, ini, w, s, dg = (cfg[k] for k in ("model", "init", "weights", "solver", "diagnostics"))
    run.n, run.d, run.H, run.P = m["n"], m["d"], m["heads"], s["paths"]
    run.dt = float(s["dt"])
    run.nsteps = int(round(s["T"] / run.dt))
    run.record_every = int(s["record_every"])
    given_rho = None
    if tokens is not None and f.density:  # checked on the mesh, below
        given_rho, tokens = tokens, None
    if tokens is not None:  # checked before anything is drawn
        tokens = _given_tokens(tokens, run.P, run.n, run.d)
    start = initial.draw(cfg, tokens)
    run.first_path, run.path_seeds = start.first_path, start.path_seeds
    run.token_seeds = list(start.token_seeds)  # none for a density [model §5b]
    run.nu = float(m["diffusion"])
    run.cum_names = tuple(
        k for k in _series.names(kind="cumulative")
        if {"token_noise": f.token_noise,
            "free_energy": f.free_energy}.get(_series.SERIES[k].group, True))
    X0, D0, values = start.X0, start.D0, start.values
    with _config.config_errors():  # the model names its parameters; errors name keys
        run.model = AttentionModel(
            beta=float(m["beta"]), normalization=m["normalization"], sign=m["sign"],
            laplacian_heads=tuple(m["laplacian_heads"]), causal=(m["mask"] == "causal"),
            values=values, backend=s["backend"], fast_exp=(s["exp"] == "fast"),
            precision=s["precision"], interaction=m["interaction"],
            head_combine=m["head_combine"], summation=run_summation(cfg),
            tol=float(s["summation_tol"]), max_flagged=float(s["max_flagged"]),
        )
    run.process = process if process is not None else make_process(
        w, run.H, run.d, run.dt, interaction=m["interaction"])
    D0 = run.process.initial(D0)
    attach = getattr(run.process, "attach_model", None)
    if attach is not None:  # values, key weights, drift from the weight state [model §5c]
        with _config.config_errors():
            run.model = attach(run.model, cfg, X0)
    # time-dependent values V(t) of the weight process [model §1b]: the model of step k is
    # the run's model with V(t_k) (model_at)
    run.time_values = bool(getattr(run.process, "time_values", False))
    run._at = None  # (V, the model with V) of the last model_at
    if run.time_values and process is not None:  # (the configuration checks its own)
        _values.check_run(cfg, "the weight process's values")
    note = getattr(run.process, "rounding_note", "")
    if note:  # layer durations are rounded to whole steps [model §5]: say so
        log.warning("weights.layers: %s", note)
    run.method = s["method"]
    with _config.config_errors():  # (the configuration refuses what it cannot apply to)
        run.placement = _layernorm.Placement(
            m["layernorm"], float(m.get("ngpt_alpha", 0.2)), float(m.get("mix_switch", 5.0)))
    if f.density:
        X0 = _density_setup(run, cfg, given_rho)
    else:
        with _config.config_errors():
            run.stepper = get_stepper(run.method, {**s, "max_pairwise_n": dg["max_pairwise_n"]})
        if not f.post:
            run.stepper = PlacedStepper(run.stepper, TABLEAUX[run.method], run.placement)
    if run.method == "jko" and m["normalization"] == "head" and run.H >= 2:
        log.warning(JKO_HEAD_WARNING, run.H)
    if run.placement.name == "mix" and run.placement.switch >= float(s["T"]):
        log.warning(MIX_WARNING, run.placement.switch, float(s["T"]))
    run.X0, run.D0, run.values = X0, D0, values
    if f.geometric:  # rounded to the step grid [model §6d]
        run.record_steps = RecordSteps(run.nsteps, run.record_every, sorted(
            {int(round(t / run.dt)) for t in record_times(cfg)} | {run.nsteps}))
    else:
        run.record_steps = RecordSteps(run.nsteps, run.record_every)
    if f.adaptive:  # an embedded pair per path [model §6d]
        run.stepper = _adaptive_solver(run)
    run.spectral = f.spectral
    run.exact_ledger = f.ledger and f.energy
    run.ledger = Ledger(exact=run.exact_ledger, step_ledger=f.step_ledger,
                        free_energy=f.free_energy, record_every=run.record_every,
                        sigma=run.model.sigma, dt=run.dt, n=run.n)
    run.documented_nan = documented_nan(run)  # the series a record may hold NaN in
    return run


def _density_setup(run, cfg, given_rho):
    """The density model and stepper of ``run`` [model §5b]; returns the initial cell
    averages (P, N)."""
    m, ini, dn = cfg["model"], cfg["init"], cfg["density"]
    if dn["representation"] == "spectral":  # nodal values of a band-limited density
        with _config.config_errors():
            run.model = spectral_model(run.model, run.d, dn, float(m["diffusion"]))
            run.stepper = DensityStepper(run.method, positive=False)
            rho0 = (given_spectral(_given_density(given_rho, run.P, run.model.grid),
                                   run.model.grid) if given_rho is not None
                    else initial_spectral(ini, run.model.grid, float(dn["positivity_tol"])))
        return np.broadcast_to(rho0, (run.P, run.model.grid.N)).copy()
    with _config.config_errors():
        grid = (CircleGrid(int(dn["cells"])) if run.d == 2
                else voronoi_mesh(int(dn["cells"]), lloyd=int(dn["lloyd"])))
        run.model = DensityModel(run.model, grid, limiter=dn["limiter"], cfl=float(dn["cfl"]),
                                 nu=float(m["diffusion"]), diffusion_scheme=dn["diffusion_scheme"],
                                 diffusion_mobility=dn["diffusion_mobility"])
        run.stepper = DensityStepper(run.method,
                                     diffuse=run.model.diffuse if run.model.split else None)
    if given_rho is not None:
        rho0 = _given_density(given_rho, run.P, run.model.grid)
    else:
        with _config.config_errors():
            rho0 = initial_density(ini, run.model.grid)
    return np.broadcast_to(rho0, (run.P, run.model.grid.N)).copy()


def _adaptive_solver(run) -> Adaptive:
    """The adaptive solver of ``run``; refuses a weight process that draws random numbers
    (one line naming the key)."""
    s, w = run.config["solver"], run.config["weights"]
    if not getattr(run.process, "deterministic", False):  # (a process given as an object)
        raise ConfigError(f"weights.process = {w['process']!r}: must be a deterministic process "
                          f"({deterministic_text()}) with solver.adaptive = true: noise would "
                          "need a Brownian path queried at any time (not in wflow)")
    return Adaptive(TABLEAUX[s["method"]], s["rtol"], s["atol"], run.dt, s["max_steps"])


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


def _given_density(rho, P, grid):
    r"""``rho`` (N,) or (P, N) as (P, N) float64 cell averages; ConfigError unless finite,
    non-negative and of mass :math:`\sum_j \rho_j\lvert K_j\rvert = 1` on ``grid``."""
    r = np.asarray(rho, dtype=float)
    N = grid.N
    if r.shape not in ((N,), (P, N)):
        what = ("nodal values of the grid of density.degree = " + str(grid.degree)
                if hasattr(grid, "degree") else "cell averages of density.cells")
        raise ConfigError(f"tokens: a density run starts from {what}: shape ({N},) or "
                          f"(solver.paths, {N}) = ({P}, {N}), not {r.shape}")
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
