r"""The result series, declared once [model §10].

Every series a run can record is one :class:`Series` in :data:`SERIES`: its name, its
kind (which fixes its shape), a description, its units, the group that decides when it is
recorded, and — for values at the record point — how it is computed from the
:class:`RecordContext`. The run loop, the HDF5 writer (descriptions, units, dimension
names), ``wflow info``, plotting and analysis all read this table, as Dedalus's
``add_task(name)`` or diffrax's ``SaveAt(fn=…)`` declare outputs instead of writing them
into the loop.

Kinds and shapes:

=============  =========================================  ==========================
kind           meaning                                    shape in a result
=============  =========================================  ==========================
``point``      value at the record, at :math:`(X_k; D_k)`  (records, P)
``cumulative`` sum from t = 0 to the record                (records, P)
``per_step``   every step of the record interval           (records, record_every, P)
``snapshot``   the state itself                            (records, P, …)
=============  =========================================  ==========================

Groups: ``core`` (always), ``ledger`` (NaN unless ``diagnostics.ledger``), ``step_ledger``
(with the ledger, not under the causal mask), ``clustering`` (``diagnostics.clustering``),
``w2`` (``diagnostics.w2``), ``token_noise`` (``model.diffusion`` > 0; NaN without the
ledger, [model §6b]), ``stepper`` (declared beside the stepper with
:func:`wflow.stepping.registry.register_series`, e.g. JKO's),
``harmonics`` (``diagnostics.harmonic_degree`` > 0 on particles: the harmonic power per
degree, [model §8]), ``tokens``/``weights`` (``output.store_tokens``/``store_weights``; a density run stores
``rho`` instead of ``X``), ``density`` (density runs), ``free_energy`` (density runs with
``model.diffusion`` > 0: the free energy, its rate and its ledger), ``radius`` (the radii of
the residual stream under ``model.layernorm`` "pre", "peri", "mix", [model §1c]), ``spectral``
(runs whose ``solver.summation`` resolves to "spectral",
:func:`wflow.model.spectral.run_summation`: the report of the field's evaluation at the
record, [model §2s]), ``user`` (added with
:func:`add_series`: recorded by every run while registered).

Adding a diagnostic is one call::

    wflow.engine.series.add_series("mean_z", "point", "mean third coordinate", "dimensionless",
                            fn=lambda ctx: ctx.X[..., 2].mean(axis=-1))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from wflow.registry import register
from wflow.stepping.registry import STEPPER_SERIES

__all__ = ["Series", "SERIES", "RecordContext", "add_series", "remove_series", "describe",
           "describe_full", "dims", "names"]

KINDS = ("point", "cumulative", "per_step", "snapshot", "time")
_DIMS = {
    "time": ("record",),
    "point": ("record", "path"),
    "cumulative": ("record", "path"),
    "per_step": ("record", "step_in_record", "path"),
}


@dataclass(frozen=True)
class Series:
    """One recorded series (see the module docstring for kinds and groups)."""

    name: str
    kind: str
    description: str
    units: str
    group: str = "core"
    fn: Callable | None = None  # point series: fn(RecordContext) -> (P,) array
    dims: tuple = ()


@dataclass
class RecordContext:
    r"""What a point series may read at a record: tokens ``X`` (P, n, d), weights ``D``
    (P, H, d, d), the time ``t``, the :class:`~wflow.model.attention.Field` ``field`` at
    :math:`(X_k; D_k)`, the drift ``drift`` :math:`f(D_k, t_k)`, the ``model``, the weight
    ``process`` and the validated ``config``."""

    X: np.ndarray
    D: np.ndarray
    t: float
    field: object
    drift: np.ndarray
    model: object
    process: object
    config: dict


SERIES: dict[str, Series] = {}


def add_series(name, kind, description, units, group="user", fn=None, dims=None, *,
               replace=False) -> Series:
    """Declare a series (the one place a new diagnostic is written). A ``point`` series of
    the ``user`` group needs ``fn(ctx: RecordContext) -> (P,)``; it is then recorded by
    every run, in memory and in the HDF5 file, until :func:`remove_series`. A name declared
    twice is refused (``ValueError``) unless ``replace``."""
    if kind not in KINDS:
        raise ValueError(f"kind = {kind!r}: allowed values are {', '.join(KINDS)}")
    if group == "user" and (kind != "point" or fn is None):
        raise ValueError(f"series {name!r}: a user series is a 'point' series with fn")
    s = Series(name, kind, description, units, group, fn,
               tuple(dims) if dims is not None else _DIMS.get(kind, ()))
    return register(SERIES, name, s, what="series", by="add_series", replace=replace)


def remove_series(name):
    """Forget a series added with :func:`add_series`."""
    SERIES.pop(name, None)


def describe(name):
    """(description, units) of a series; a generic text for names not in the table."""
    s = SERIES.get(name)
    if s is None and name in STEPPER_SERIES:  # of a stepper registered after this table
        return STEPPER_SERIES[name]
    if s is None:
        return f"result series {name!r}", "see docs/model.md §10"
    return s.description, s.units


def describe_full(name):
    """(description, units, dims): what the storage layer writes beside each dataset."""
    return (*describe(name), dims(name))


def dims(name):
    """Dimension names of a series in a result (``(record, path)`` for unknown names)."""
    s = SERIES.get(name)
    return s.dims if s is not None else _DIMS["point"]


def names(kind=None, group=None):
    """Names in declaration order, filtered by kind and/or group."""
    return tuple(n for n, s in SERIES.items()
                 if (kind is None or s.kind == kind) and (group is None or s.group == group))


def _avg(c, a):
    r"""Mean over the points (last axis): uniform for tokens, mass-weighted
    :math:`\sum_k m_k a_k` for a density (a field with ``masses``)."""
    m = getattr(c.field, "masses", None)
    return np.mean(a, axis=-1) if m is None else np.sum(m * a, axis=-1)


def _over_support(c, a, reduce):
    r"""``reduce`` (np.min or np.max) over the tokens, or for a density over the cells that
    carry mass (:math:`m_k > 0`): an empty cell is not in the support of the measure, as no
    token is where there is none."""
    m = getattr(c.field, "masses", None)
    if m is None:
        return reduce(a, axis=1)
    fill = np.inf if reduce is np.min else -np.inf
    out = reduce(np.where(np.broadcast_to(m, a.shape) > 0, a, fill), axis=1)
    return np.where(np.isfinite(out), out, np.nan)


def _mean_v2(c):
    return _avg(c, np.sum(c.field.velocity**2, axis=-1))


# ---------------------------------------------------------------------------- the table
_T = "energy/time"
for _n, _d, _u, _fn in (
    ("energy", "energy E(X_k; D_k)", "energy", lambda c: c.field.energy),
    ("dissipation", "dissipation (1/n) sum <g_i, v_i>", _T, lambda c: c.field.dissipation),
    ("G2", "G^2 = (1/n) sum |v_i|^2 / m_bar(x_i) (reference simulation)", _T,
     lambda c: c.field.G2),
    ("G2_hm", "G^2_hm = (1/n) sum |v_i|^2 / b_hat(x_i)", _T, lambda c: c.field.G2_hm),
    ("v2_mean", "mean squared speed (1/n) sum |v_i|^2", "1/time^2", _mean_v2),
    ("b_hat_mean", "mean effective mobility b_hat = 1/Z_bar", "dimensionless",
     lambda c: _avg(c, c.field.b_hat)),
    ("b_hat_min", "minimum effective mobility (over the support)", "dimensionless",
     lambda c: _over_support(c, c.field.b_hat, np.min)),
    ("b_hat_max", "maximum effective mobility (over the support)", "dimensionless",
     lambda c: _over_support(c, c.field.b_hat, np.max)),
    ("Zbar_mean", "mean partition function Z_h(x_i) over heads and tokens", "dimensionless",
     lambda c: (c.field.partition.mean(axis=(1, 2)) if getattr(c.field, "masses", None) is None
                else _avg(c, c.field.partition.mean(axis=1)))),
    ("dEdt_drift", "<dE/dD, f(D, t)>: energy rate of the weight drift", _T,
     lambda c: np.einsum("phab,phab->p", c.field.dE_dD, c.drift)),
    ("ito_expected", "expected Ito correction rate", _T,
     lambda c: c.process.ito_rate(c.model.beta, c.field.ito_sum)),
):
    add_series(_n, "point", _d, _u, group="core", fn=_fn)

for _n, _d, _g in (
    ("int_dissipation", "cumulative sum dt * dissipation", "core"),
    ("int_G2", "cumulative sum dt * G2", "core"),
    ("int_dEdt_drift", "cumulative sum dt * dEdt_drift", "core"),
    ("int_ito_expected", "cumulative sum dt * ito_expected", "core"),
    ("paper_martingale", "cumulative martingale of the paper's balance", "core"),
    ("paper_residual", "residual of the paper's energy balance (docs/model.md §6)", "core"),
    ("weight_work", "cumulative weight part of the exact ledger", "ledger"),
    ("token_work", "cumulative token part of the exact ledger", "ledger"),
    ("drift_work", "cumulative drift part of the weight work", "ledger"),
    ("martingale", "cumulative martingale part of the weight work", "ledger"),
    ("ito_realised", "cumulative realised Ito part of the weight work", "ledger"),
    ("ledger_residual", "residual of the exact ledger (docs/model.md §6)", "ledger"),
    ("ledger_telescoping", "E - E0 - weight_work - token_work (rounding check)", "ledger"),
):
    add_series(_n, "cumulative", _d, "energy", group=_g)
for _n, _d in (
    ("token_martingale", "cumulative token-noise martingale sum_k (1/n) sum_i <g_i, "
                         "sqrt(2 nu dt) P xi_i> (docs/model.md §6b)"),
    ("token_ito_realised", "cumulative realised token Ito term: ledger_residual - "
                           "token_martingale (docs/model.md §6b)"),
):
    add_series(_n, "cumulative", _d, "energy", group="token_noise")

for _n, _d in (
    ("step_weight_part", "per step: E(X_{k+1}; D_{k+1}) - E(X_{k+1}; D_k)"),
    ("step_token_part", "per step: E(X_{k+1}; D_k) - E(X_k; D_k)"),
    ("step_drift", "per step: <dE/dD(X_{k+1}; D_k), f(D_k, t_k) dt>"),
    ("step_martingale", "per step: <dE/dD(X_{k+1}; D_k), xi_k>"),
    ("step_ito_realised", "per step: weight part - drift - martingale"),
    ("step_ledger_residual", "per step: token part - sigma dt (D_k + D'_k)/2"),
):
    add_series(_n, "per_step", _d, "energy", group="step_ledger")

for _n, _d, _u in (
    ("order_parameter", "order parameter |mean x_i|", "dimensionless"),
    ("min_cosine", "smallest pairwise cosine", "dimensionless"),
    ("n_clusters", "number of clusters at diagnostics.cluster_angle", "count"),
    ("variance", "within-sequence variance 1 - |mean x_i|^2", "dimensionless"),
    ("spectral_rank", "spectral rank of the token Gram matrix", "count"),
):
    add_series(_n, "point", _d, _u, group="clustering")
add_series("merged_fraction", "point",
           "fraction of ordered pairs i != j with <x_i, x_j> > diagnostics.merge_cosine",
           "dimensionless", group="clustering")

add_series("w2_step", "point", "W2 between successive records (geodesic cost)", "dimensionless",
           group="w2")
add_series("metric_speed", "point", "w2_step / record interval (metric speed)", "1/time",
           group="w2")

for _n, (_d, _u) in STEPPER_SERIES.items():  # declared beside their steppers
    add_series(_n, "point", _d, _u, group="stepper")
for _n, _d, _u in (
    ("mass", "density: total mass sum_k rho_k h (conserved to round-off)", "dimensionless"),
    ("dissipation_cells", "density: cell quadrature sum_k m_k <g_k, v_k> of the dissipation",
     _T),
):
    add_series(_n, "point", _d, _u, group="density")
for _n, _d, _u in (  # density runs with model.diffusion > 0 [model §5b]
    ("free_energy", "density: free energy F = -sigma E + nu sum_k m_k log rho_k", "energy"),
    ("entropy", "density: entropy S = sum_k m_k log rho_k", "dimensionless"),
    ("free_energy_rate", "density: dF/dt = sum over faces of flux * difference of "
     "-sigma Phi + nu log rho", _T),
):
    add_series(_n, "point", _d, _u, group="free_energy")
add_series("free_energy_residual", "cumulative",
           "density: residual of the free-energy ledger, sum of F(rho_{k+1}; D_k) - F(rho_k; D_k) "
           "- dt (dF/dt_k + dF/dt'_k)/2 (docs/model.md §5b)", "energy", group="free_energy")

for _n, _d, _u in (  # runs with the spectral summation [model §2s]
    ("spectral_flagged", "spectral summation: fraction of the targets recomputed by the direct "
     "sums, in the field evaluation at (X_k; D_k) (the one of the record's point series and "
     "of the step's first stage; docs/model.md §2s)", "dimensionless"),
    ("spectral_degree", "spectral summation: degree L of the tail rule in the field evaluation "
     "at (X_k; D_k)", "dimensionless"),
    ("spectral_indicator", "spectral summation: largest error indicator among the targets kept "
     "(<= solver.summation_tol) in the field evaluation at (X_k; D_k)", "dimensionless"),
):
    add_series(_n, "point", _d, _u, group="spectral")

add_series("t", "time", "model time of each record", "time", group="time")
add_series("X", "snapshot", "token snapshots x_i on the sphere", "dimensionless", group="tokens",
           dims=("record", "path", "token", "coord"))
add_series("rho", "snapshot", "density: cell averages rho_k on the circle grid", "1/radian",
           group="tokens", dims=("record", "path", "cell"))
add_series("D", "snapshot", "weight matrices D_h", "dimensionless", group="weights",
           dims=("record", "path", "head", "coord", "coord2"))
add_series("harmonic_power", "snapshot", "harmonic power per degree l = 1..L of the tokens, "
           "P_l = sum_m |(1/n) sum_j Y_lm(x_j)|^2 (S^1: |(1/n) sum_j exp(i l theta_j)|^2), "
           "L = diagnostics.harmonic_degree (docs/model.md §8)", "dimensionless",
           group="harmonics", dims=("record", "path", "degree"))
add_series("radius", "snapshot", "radii r_i = |z_i| of the residual stream under the pre-, peri- "
           "and mix-LN placements (docs/model.md §1c)", "dimensionless", group="radius",
           dims=("record", "path", "token"))
