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
from wflow.model.diagnostics import clustering_series

__all__ = ["record_row", "PRODUCERS", "point_series"]


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
PRODUCERS = [point_series, cumulative, density, snapshots, clustering, step_ledger, w2, stepper]


def record_row(run, state, F, t: float) -> dict:
    """One record: ``t`` and every active series at the state ``state`` with field ``F``."""
    row = {"t": t}
    for produce in PRODUCERS:
        row.update(produce(run, state, F, t))
    return row
