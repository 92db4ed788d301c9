r"""The attention field from spectrally summed kernel sums, with an accuracy contract [model §2s].

.. math::
    Z_h(x_i) = \tfrac1n S^0_{hi},\qquad
    \bar x_h(x_i) = S^X_{hi}/S^0_{hi},\qquad a_h(x_i) = V_h\bar x_h(x_i),\qquad
    g_i = P_{x_i}\tfrac{1}{Hn}\textstyle\sum_h D_h S^X_{hi},

and every other quantity of §2–4 from the same sums (:func:`combine`). With point masses
:math:`w_j` [model §5b] the sums carry the relative masses :math:`u_j = n w_j` (the direct
pass's convention: every :math:`\frac1n\sum_j` becomes :math:`\sum_j w_j`, over columns and
rows). The sums come from
:func:`wflow.kernels.spectral.sums` at the degree of the tail rule; a target whose indicator
exceeds the tolerance is recomputed by the direct sums over its row
(:func:`wflow.kernels.spectral.direct_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wflow.errors import NumericalError
from wflow.kernels import spectral as _sp
from wflow.params import Choice, Interval, Param, When, bad, declare

__all__ = ["SUMMATIONS", "TOL", "MAX_FLAGGED", "SpectralReport", "check", "combine", "kernel_sums",
           "spectral_pass", "run_summation", "AUTO_MIN_N", "AUTO_MIN_CELLS", "effective_count",
           "rule_degree"]

#: how the kernel sums are computed: every pair, or the spectral summation of §2s
SUMMATIONS = ("direct", "spectral")
#: default relative tolerance on Z and on the attention average at every target
TOL = 1e-10
_U = np.finfo(float).eps
#: default largest fraction of targets recomputed directly before the pass stops
MAX_FLAGGED = 0.1


@dataclass(frozen=True)
class SpectralReport:
    """What the spectral summation did, per path.

    Attributes
    ----------
    degree : (P,) the degree L of the tail rule.
    flagged : (P,) the fraction of targets recomputed by the direct sums.
    indicator : (P,) the largest error indicator among the targets kept (≤ the tolerance).
    tol : the tolerance.
    """

    degree: np.ndarray
    flagged: np.ndarray
    indicator: np.ndarray
    tol: float

    def paths(self, sl) -> "SpectralReport":
        """The report of the paths ``sl`` (a slice or an index array; copies)."""
        return SpectralReport(self.degree[sl].copy(), self.flagged[sl].copy(),
                              self.indicator[sl].copy(), self.tol)


def check(d, causal=False, precision="float64", backend="numba", weights=None, key_bias=None):
    """Refuse, in one line, what the spectral summation does not do [model §2s]."""
    why = None
    if d not in (2, 3):
        why = f"needs tokens on S¹ or S² (d = 2 or 3; got d = {d})"
    elif causal:
        why = "needs unmasked attention (mask = 'causal' sums over j ≤ i)"
    elif precision != "float64":
        why = f"runs in float64 (got precision = {precision!r})"
    elif backend != "numba":
        why = f"needs backend = 'numba' (got {backend!r}; the NumPy backend is the dense reference)"
    elif weights is not None and not (np.all(np.isfinite(weights)) and np.all(np.asarray(weights) >= 0)):
        why = "weights: every mass must be finite and >= 0"
    elif key_bias is not None:
        why = "takes no per-key biases (key_bias=)"
    if why:
        raise ValueError(f"summation = 'spectral': {why}")


def combine(X, D, V, S0, SX, ito, beta, normalization, lap, general, head_combine, u=None):
    r"""Every quantity of [model §2–4] of one path from the kernel sums.

    Parameters
    ----------
    X : (n, d) tokens; D, V : (H, d, d) interaction and value matrices.
    S0 : (H, n) :math:`\sum_j u_j e^{s_{ij}}`; SX : (H, n, d) :math:`\sum_j u_j e^{s_{ij}} x_j`.
    ito : (H,) :math:`\sum_i u_i S^I_{hi}`, :math:`S^I_{hi} = \sum_j u_j e^{s_{ij}}(1 + \langle
        x_i, x_j\rangle^2)` (None with ``general``).
    beta, normalization, lap ((H,) bool), general (bool), head_combine : as the direct pass.
    u : (n,) the relative masses :math:`u_j = n w_j` of the sums, or None (:math:`u_j = 1`):
        the row means :math:`\frac1n\sum_i u_i(\cdot)` (E, 𝒟, G², G²_hm, ∂_D E).

    Returns
    -------
    dict of the :class:`wflow.model.attention.Field` quantities (one path).
    """
    n, d = X.shape
    H = D.shape[0]
    v, g = np.empty((n, d)), np.empty((n, d))
    zbar, mbar = np.empty(n), np.empty(n)
    _sp.combine(X, D, V, S0, SX, lap, ("head", "joint", "none").index(normalization), general,
                head_combine == "sum", v, g, zbar, mbar)
    v2 = np.sum(v * v, axis=1)
    rmean = np.mean if u is None else (lambda a: np.sum(a * u) / n)  # (1/n) Σ_i u_i (·)
    rsum = np.sum if u is None else (lambda a: np.sum(a * u))  # Σ_i u_i (·), a (..., n)
    out = dict(velocity=v, partition=S0 / n, b_hat=1.0 / zbar, G2=rmean(v2 / mbar),
               G2_hm=rmean(v2 * zbar))
    nan = float("nan")
    if general:
        out.update(energy=nan, gradient=np.full_like(X, nan), dissipation=nan,
                   dE_dD=np.full((H, d, d), nan), ito_sum=nan)
        return out
    # Σ_i u_i x_i S^X_iᵀ by columns (pairwise sums over i, no BLAS reduction)
    dE = np.array([[[rsum(X[:, a] * SX[h, :, b]) for b in range(d)] for a in range(d)] for h in range(H)])
    out.update(energy=rsum(S0) / (2 * beta * H * n * n), gradient=g,
               dissipation=rmean(np.sum(g * v, axis=1)), dE_dD=dE / (2 * H * n * n),
               ito_sum=float(np.sum(ito)) / (2 * H * n * n))
    return out


def _refuse(beta, D, n, d, tol):
    c = beta * float(np.max(_sp.head_norms(D)))
    raise ValueError(f"summation = 'spectral': β‖D‖ = {c:.4g} at n = {n} and tolerance {tol:g} needs "
                     f"a degree above L_max = {_sp.L_MAX[d]} on S^{d - 1}: use summation = 'direct'")


def effective_count(u, n):
    r"""The count of the degree rule [model §2s]: :math:`n_{\rm eff} = U/\max_j u_j`,
    :math:`U = \sum_j u_j` (n without masses, and for equal masses), so that the target of
    the heaviest point, whose sum is at least its own term :math:`u_{\max}e^{c}` (D = I), meets
    the tolerance at :math:`\tau_L \le \mathrm{tol}/(4n_{\rm eff})`."""
    if u is None:
        return n, n
    U = float(np.sum(u))
    top = float(np.max(u)) if n else 0.0
    return U, (U / top if top > 0 else float(n))


def rule_degree(beta, D, d, neff, tol=TOL):
    """The degree of the rule [model §2s] and its tails (:func:`wflow.kernels.spectral.degree`
    at the target tol/(4 n_eff), :func:`effective_count`): the first pass's degree."""
    return _sp.degree(beta, D, d, tol / (4.0 * neff))


def kernel_sums(X, D, beta, tol=TOL, max_flagged=MAX_FLAGGED, u=None, ito=True):
    """The kernel sums S0 (H, n), SX (H, n, d) and the totals Σ_i u_i S^I_hi (H,) (None without
    ``ito``) of one path (X (n, d), D (H, d, d), masses u (n,) or None) with the fallback, and
    (degree, flagged fraction, largest indicator kept). The flagged rows' terms of the totals
    are the direct ones.

    The degree of the rule (tail ≤ tol/(4 n_eff) relative to e^{β‖D‖}, :func:`effective_count`);
    where the truncation term of the indicator then exceeds tol/2 at targets whose other terms
    are below it (sums far below U e^{β‖D‖}, as for indefinite D), once more at the degree
    those targets need."""
    n, d = X.shape
    c = beta * _sp.head_norms(D)
    k = 1.0 + np.sqrt(d)
    U, neff = effective_count(u, n)
    count = None if u is None else U
    L, tails = rule_degree(beta, D, d, neff, tol)
    if L > _sp.L_MAX[d]:
        _refuse(beta, D, n, d, tol)
    res = _sp.sums(X, D, beta, L, u, ito, tol)
    S0 = res.S0
    eta = _sp.indicator(S0, c, tails, d, L, res.mag, res.fmax, count, res.lib)
    with np.errstate(divide="ignore", invalid="ignore"):
        tmax = k * U * np.exp(c + np.log(np.maximum(tails, 1e-300))) / np.min(np.abs(S0), axis=1)
        # the truncation term at every target, where it may exceed tol/2 somewhere
        trunc = (k * U * np.exp(c + np.log(np.maximum(tails, 1e-300)))[:, None] / np.abs(S0)
                 if np.any(~(tmax <= tol / 2)) else None)
    fixable = None if trunc is None else (eta - trunc <= tol / 2) & (trunc > tol / 2)
    if fixable is not None and np.any(fixable):
        with np.errstate(divide="ignore"):
            need = np.where(fixable, tol / 2 * np.abs(S0) / (k * U * np.exp(c)[:, None]), np.inf)
        L2, tails2 = _sp.degree(beta, D, d, np.minimum(np.min(need, axis=1), tol / (4.0 * neff)),
                                start=L)
        if L < L2 <= _sp.L_MAX[d]:
            L, tails = L2, tails2
            res = _sp.sums(X, D, beta, L, u, ito, tol)
            S0 = res.S0
            eta = _sp.indicator(S0, c, tails, d, L, res.mag, res.fmax, count, res.lib)
    bad = ~(np.max(eta, axis=0) <= tol)  # NaN or over the tolerance
    frac = float(np.mean(bad))
    if frac > max_flagged:
        raise NumericalError(f"summation = 'spectral': {100 * frac:.3g}% of the targets exceed the "
                             f"tolerance {tol:g} (limit {100 * max_flagged:.3g}%; β‖D‖ = "
                             f"{float(np.max(c)):.4g}, L = {L}): use summation = 'direct' or raise "
                             "max_flagged")
    rows = np.flatnonzero(bad)
    SX, tot = res.SX, res.ito
    uw = np.ones(n) if u is None else np.asarray(u, dtype=float)
    if tot is not None:
        # the totals' error: the kept rows' (within η), the flagged rows' synthesis (the library's
        # terms) and the round-off of the coefficient sums; beyond tol/4 the totals are summed
        # row by row (a cancellation: sums far below the terms of the coefficient sums)
        with np.errstate(invalid="ignore", over="ignore"):
            err = (2 / k * np.sum(np.where(bad, 0.0, eta * np.abs(S0)) * uw, axis=1)
                   + 2 * (_sp.RHO2[d] * res.fmax + res.lib) * np.sum(uw[rows])
                   + 4 * _U * (L + 3) * res.ito_size)
        if not np.all(err <= tol / 4 * np.abs(tot)):
            tot = None
    if rows.size:
        S0[:, rows], SX[:, rows], SI = _sp.direct_rows(X, D, beta, rows, u)
        if tot is not None:  # the flagged rows' terms of the totals: the direct ones
            tot = tot + np.sum((SI - res.ito_at(rows)) * uw[rows], axis=1)
    if tot is None and res.ito is not None:
        every = res.ito_at(np.arange(n))
        if rows.size:
            every[:, rows] = SI
        tot = np.sum(every * uw, axis=1)
    kept = np.max(eta[:, ~bad]) if rows.size < n else 0.0
    return S0, SX, tot, L, frac, float(kept)


def spectral_pass(X, D, V, beta, normalization, lap, interaction="symmetric", head_combine="mean",
                  tol=TOL, max_flagged=MAX_FLAGGED, weights=None):
    r"""The field of a batch by spectral summation [model §2s].

    Parameters
    ----------
    X : (P, n, d) tokens on :math:`S^{d-1}`, d = 2 or 3.
    D, V : (P, H, d, d) interaction and value matrices.
    beta, normalization, lap ((H,) bool), interaction, head_combine : as the direct pass.
    tol : relative tolerance on Z and on the attention average at every target.
    max_flagged : the largest fraction of targets recomputed directly; beyond it the pass
        stops with a :class:`~wflow.errors.NumericalError`.
    weights : (P, n) point masses :math:`w_j \ge 0` [model §5b], or None (1/n): every
        :math:`\frac1n\sum_j` becomes :math:`\sum_j w_j` (the sums carry
        :math:`u_j = n w_j`).

    Returns
    -------
    (dict of the batched Field arrays, :class:`SpectralReport`).
    """
    X = np.ascontiguousarray(X, dtype=float)
    D = np.ascontiguousarray(D, dtype=float)
    P = X.shape[0]
    if not (0 < tol < 1):
        raise ValueError(f"tol = {tol!r}: must be in (0, 1)")
    res, deg, frac, kept = [], [], [], []
    n = X.shape[1]
    U = None if weights is None else n * np.asarray(weights, dtype=float).reshape(P, n)
    for p in range(P):
        u = None if U is None else U[p]
        S0, SX, ito, L, f, k = kernel_sums(X[p], D[p], float(beta), float(tol), float(max_flagged), u,
                                           interaction != "general")
        res.append(combine(X[p], D[p], V[p], S0, SX, ito, float(beta), normalization,
                           np.asarray(lap, dtype=bool), interaction == "general", head_combine, u))
        deg.append(L)
        frac.append(f)
        kept.append(k)
    out = {k: np.stack([np.asarray(r[k], dtype=float) for r in res]) for k in res[0]}
    return out, SpectralReport(np.array(deg), np.array(frac), np.array(kept), float(tol))


# ------------------------------------------------------------------ configuration keys
#: the smallest n at which ``solver.summation = "auto"`` takes the spectral route, per d: the
#: measured crossover with the direct pass ([model §2s]; the ``scale`` benchmark suite)
AUTO_MIN_N = {2: 10_000, 3: 10_000}
#: the same for a density (``solver.representation = "density"``), in cells (``density.cells``):
#: the measured crossover of a density step against the direct weighted pass ([model §5b]; the
#: ``density`` benchmark suite)
AUTO_MIN_CELLS = {2: 2048, 3: 4096}
#: under adaptive steps the spectral tolerance is at most this fraction of ``solver.atol``
ADAPTIVE_MARGIN = 1e-2


def _why_not(cfg) -> str | None:
    """Why the spectral summation cannot run ``cfg``, or None."""
    m, s = cfg["model"], cfg["solver"]
    if m["d"] not in (2, 3):
        return f"needs model.d = 2 or 3 (S¹ or S², got {m['d']})"
    if m["mask"] != "none":
        return "needs model.mask = 'none' (a causal mask sums over j ≤ i)"
    if s["backend"] != "numba":
        return "needs solver.backend = 'numba' (the NumPy backend is the dense reference)"
    if s.get("precision", "float64") != "float64":
        return "runs in float64 (solver.precision = 'float64')"
    if cfg["weights"]["process"] == "imported":
        return "takes no per-key biases (weights.process = 'imported')"
    if m.get("layernorm", "post") != "post":
        return "takes the post-LN flow only (model.layernorm = 'post')"
    if (s.get("representation", "particles") == "density"
            and cfg.get("density", {}).get("representation", "fv") == "spectral"):
        return ("sums point masses; density.representation = 'spectral' takes its field from "
                "its own quadrature grid [model §5b]")
    return None


def run_summation(cfg) -> str:
    """The summation a validated configuration runs with: ``solver.summation``, with
    ``"auto"`` resolved to "spectral" where it applies and n ≥ :data:`AUTO_MIN_N` (a density:
    ``density.cells`` ≥ :data:`AUTO_MIN_CELLS`), else "direct"."""
    want = cfg["solver"].get("summation", "direct")
    if want != "auto":
        return want
    m = cfg["model"]
    if cfg["solver"].get("representation", "particles") == "density":
        n, least = int(cfg["density"]["cells"]), AUTO_MIN_CELLS.get(m["d"], np.inf)
    else:
        n, least = m["n"], AUTO_MIN_N.get(m["d"], np.inf)
    if _why_not(cfg) is None and n >= least:
        return "spectral"
    return "direct"


def _summation_rule(cfg):
    """``solver.summation = "spectral"`` [model §2s]: where it applies, and under adaptive
    steps a tolerance far below the controller's."""
    s = cfg["solver"]
    if s["summation"] == "direct":
        return
    if s["summation"] == "spectral":
        why = _why_not(cfg)
        if why is not None:
            raise bad("solver.summation", "spectral", why)
    if s.get("adaptive") and run_summation(cfg) == "spectral":
        if s["summation_tol"] > ADAPTIVE_MARGIN * s["atol"]:
            raise bad("solver.summation_tol", s["summation_tol"],
                      f"must be <= {ADAPTIVE_MARGIN:g} solver.atol = "
                      f"{ADAPTIVE_MARGIN * s['atol']:.3g} with solver.adaptive = true (the "
                      "field's error must stay far below the controller's)")


declare(
    Param("solver.summation", "direct", Choice(("direct", "spectral", "auto")),
          "the field's kernel sums: direct (every pair); spectral (S^1, S^2: O(n) to "
          "solver.summation_tol); auto (spectral where it applies and n >= 10^4, a density's "
          "density.cells >= 2048 on S^1 and 4096 on S^2, else direct) [model §2s, §5b]",
          rule=_summation_rule),
    Param("solver.summation_tol", TOL, Interval(0, 1e-3, "right"),
          "spectral: relative tolerance on Z and the attention average at every target",
          applies=When("solver.summation", ("spectral", "auto"))),
    Param("solver.max_flagged", MAX_FLAGGED, Interval(0, 1, "right"),
          "spectral: the largest fraction of targets recomputed directly before the run stops",
          applies=When("solver.summation", ("spectral", "auto"))),
    after="solver.exp")
