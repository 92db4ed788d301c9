r"""One record of a run: the row of every active series of :data:`wflow.engine.series.SERIES`,
built by producers, one per group of series.

A producer is a function ``(run, state, field, t) -> dict`` of series name to array; ``run``
is the run's :class:`~wflow.engine.setup.RunSetup`, ``state`` its
:class:`~wflow.engine.state.State` at the record, ``field`` the
:class:`~wflow.model.attention.Field` at :math:`(X_k; D_k)`. :func:`record_row` calls them
in the order of :data:`PRODUCERS`; the fixed-step loop (:mod:`wflow.engine.run`) and the
adaptive loop (:mod:`wflow.engine.adaptive_run`) both build their records with it. A
diagnostic with a closed form at the record point is a ``point`` series with ``fn``
(:func:`wflow.engine.series.add_series`), not a producer.
"""

from __future__ import annotations

import numpy as np

from wflow.engine import series as _series
from wflow.errors import NumericalError
from wflow.model.diagnostics import clustering_series
from wflow.model.harmonics import harmonic_power

__all__ = ["record_row", "PRODUCERS", "point_series", "check_row", "DOCUMENTED_NAN",
           "documented_nan"]


def point_series(run, state, F, t) -> dict:
    """The ``core`` and ``user`` point series (each its ``fn`` of the
    :class:`~wflow.engine.series.RecordContext`)."""
    ctx = _series.RecordContext(X=state.X, D=state.D, t=t, field=F,
                                drift=run.process.drift(state.D, t), model=run.model_at(t),
                                process=run.process, config=run.config)
    return {name: s.fn(ctx) for name, s in _series.SERIES.items()
            if s.fn is not None and (s.group in ("core", "user")
                                     or (s.group == "clustering" and run.features.clustering))}


def cumulative(run, state, F, t) -> dict:
    r"""The cumulative sums, the paper's residual [model §6] (NaN off the post-LN placement:
    its balance assumes the field σv, [model §1c]), and NaN for the ledger's series where the
    exact ledger is not computed."""
    row = {k: state.cum[k].copy() for k in run.cum_names}
    if run.features.post:
        row["paper_residual"] = (
            F.energy - state.E0 - run.model.sigma * row["int_G2"] - row["int_dEdt_drift"]
            - row["int_ito_expected"] - row["paper_martingale"])
    else:
        row["paper_residual"] = np.full(run.P, np.nan)
    if not run.exact_ledger:
        for k in _series.names(group="ledger") + (_series.names(group="token_noise")
                                                   if run.features.token_noise else ()):
            row[k] = np.full(run.P, np.nan)
    return row


def density(run, state, F, t) -> dict:
    """A density's mass and cell dissipation; with diffusion its free energy [model §5b]."""
    row = {}
    if run.features.density:
        row["mass"] = run.model.grid.masses(state.X).sum(axis=-1)
        row["dissipation_cells"] = F.dissipation_cells.copy()
    if run.features.free_energy:
        for k in ("free_energy", "entropy", "free_energy_rate"):
            row[k] = getattr(F, k).copy()
        if not run.exact_ledger:
            row["free_energy_residual"] = np.full(run.P, np.nan)
    return row


def spectral(run, state, F, t) -> dict:
    """The spectral summation's report of the field at the record [model §2s]: per path the
    fraction of targets recomputed directly, the degree L and the largest indicator kept."""
    if not run.spectral:
        return {}
    rep = F.spectral
    return {"spectral_flagged": np.asarray(rep.flagged, dtype=float).copy(),
            "spectral_degree": np.asarray(rep.degree, dtype=float).copy(),
            "spectral_indicator": np.asarray(rep.indicator, dtype=float).copy()}


def snapshots(run, state, F, t) -> dict:
    """The state itself: tokens (a density's cell averages) and weights, when stored."""
    out, row = run.config["output"], {}
    if out["store_tokens"]:
        row["rho" if run.features.density else "X"] = state.X.copy()
    if out["store_weights"]:
        row["D"] = state.D.copy()
    return row


def clustering(run, state, F, t) -> dict:
    """The clustering series of [model §8]."""
    if not run.features.clustering:
        return {}
    dg = run.config["diagnostics"]
    return clustering_series(state.X, dg["cluster_angle"], dg["max_pairwise_n"],
                             dg["merge_cosine"])


def harmonics(run, state, F, t) -> dict:
    """The harmonic power per degree 1..L of the tokens, L = ``diagnostics.harmonic_degree``
    (particles; 0: off) [model §8]."""
    L = int(run.config["diagnostics"].get("harmonic_degree", 0))
    if not L or run.features.density:
        return {}
    return {"harmonic_power": harmonic_power(state.X, L)}


def step_ledger(run, state, F, t) -> dict:
    """The per-step ledger of the interval ending at this record (then a fresh buffer)."""
    return run.ledger.take_interval(state)


def w2(run, state, F, t) -> dict:
    """W₂ between this record's tokens and the last record's, and the metric speed."""
    if not run.features.w2:
        return {}
    w2 = np.full(run.P, np.nan)
    prev = state.w2_prev
    if prev is not None and run.n <= run.config["diagnostics"]["max_pairwise_n"]:
        from wflow.model.diagnostics import w2_geodesic

        w2 = np.array([w2_geodesic(prev[0][p], state.X[p]) for p in range(run.P)])
    row = {"w2_step": w2}
    if prev is not None:  # the last interval may be shorter than record_every steps
        w2 = w2 / (t - float(prev[1]))
    row["metric_speed"] = w2
    state.w2_prev = (state.X.copy(), t)
    return row


def stepper(run, state, F, t) -> dict:
    """The series the stepper reports (its last step's, e.g. JKO's or the placements' radii)."""
    return {name: state.stepper_info[name].copy() for name in run.stepper.series}


#: the producers of a record, in the order of its columns
PRODUCERS = [point_series, cumulative, density, spectral, snapshots, clustering, harmonics, step_ledger,
             w2, stepper]

#: series that hold no energy where none exists (general D_h, the causal mask) [model §1b, §2]
_ENERGY_SERIES = ("energy", "dissipation", "dEdt_drift", "ito_expected", "int_dissipation",
                  "int_dEdt_drift", "int_ito_expected", "paper_martingale", "paper_residual")
#: series of the mobility b̂ = 1/Z̄, undefined under the causal mask and with key biases
#: (a trained checkpoint's, [model §5c])
_MOBILITY_SERIES = ("G2", "G2_hm", "b_hat_mean", "b_hat_min", "b_hat_max", "int_G2")

#: Where a NaN is a documented value, not a failure: (series names or groups, when, why).
#: Every other non-finite value of a record stops the run (:func:`check_row`); an infinity
#: always does.
DOCUMENTED_NAN = (
    (("step_ledger",), lambda run: True,
     "the per-step ledger of steps not taken yet (the first record, a run's last interval)"),
    (("w2",), lambda run: True, "no earlier record, or n above diagnostics.max_pairwise_n"),
    (("stepper", "event_time", "step_size"), lambda run: True,
     "a stepper's series before its first step; no event; no step covering t = 0"),
    (("spectral_rank",), lambda run: True, "a collapsed cloud (variance at round-off) [model §8]"),
    (("ledger", "token_noise", "free_energy_residual"), lambda run: not run.exact_ledger,
     "the exact ledger is not computed (diagnostics.ledger = false, no energy, adaptive steps)"),
    (("paper_residual",), lambda run: not run.features.post,
     "the paper's balance assumes the field σv [model §1c]"),
    (("int_dissipation", "int_G2", "int_dEdt_drift", "int_ito_expected", "paper_martingale",
      "paper_residual"), lambda run: run.features.adaptive,
     "left-point sums are not kept with adaptive steps [model §6d]"),
    (_ENERGY_SERIES, lambda run: not run.features.energy,
     "no energy: general D_h or the causal mask [model §1b, §2]"),
    (_MOBILITY_SERIES, lambda run: run.config["model"]["mask"] == "causal",
     "not defined under the causal mask: the masked partition depends on the token's "
     "position, not on (x_i, μ), so it is no mobility [model §1b, §4]"),
)


def documented_nan(run) -> frozenset:
    """The series (by name) in which a NaN is documented for ``run`` (:data:`DOCUMENTED_NAN`)."""
    out = set(run.stepper.series)  # (a stepper registered after the series table)
    for names, when, _ in DOCUMENTED_NAN:
        if when(run):
            for key in names:
                out |= set(_series.names(group=key)) | {key}
    return frozenset(out)


def check_row(run, row, k: int, t: float) -> None:
    """A :class:`~wflow.errors.NumericalError` naming the series, the step and the time if a
    recorded value is infinite, or NaN where no NaN is documented."""
    allowed = run.documented_nan
    for name, value in row.items():
        a = np.asarray(value)
        if a.dtype.kind not in "fc" or np.all(np.isfinite(a)):
            continue
        if np.any(np.isinf(a)) or name not in allowed:
            what = "infinite" if np.any(np.isinf(a)) else "NaN"
            raise NumericalError(f"{what} {name} at step {k} (t = {t:.6g}): the recorded "
                                 "series overflowed or is undefined; the run stops here",
                                 step=k)


def record_row(run, state, F, t: float) -> dict:
    """One record: ``t`` and every active series at the state ``state`` with field ``F``,
    checked (:func:`check_row`)."""
    row = {"t": t}
    for produce in PRODUCERS:
        row.update(produce(run, state, F, t))
    check_row(run, row, state.k, t)
    return row
