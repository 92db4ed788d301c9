r"""Metastability: the escape time of clustered tokens as a function of β, on S¹, S² and in
higher d, with its fitted growth law [model §6d, "Escape time"].

Per (d, β) one run of P independent systems (the paths; ``init.per_path_tokens``): n tokens
i.i.d. uniform on :math:`S^{d-1}`, one head, :math:`D = V = I`, head normalisation, ascent,

.. math:: \dot x_i = P_{x_i} \sum_j \frac{e^{\beta\langle x_i, x_j\rangle}}
                     {\sum_k e^{\beta\langle x_i, x_k\rangle}}\, x_j ,

stepped adaptively (``solver.adaptive``, Bogacki–Shampine 3(2)). The escape time of system p
is its half-merge time

.. math:: \tau_p = \inf\{t : f_p(t) \ge 1/2\}, \qquad
          f_p(t) = \frac{\#\{i \ne j : \langle x_i(t), x_j(t)\rangle > 0.999\}}{n(n-1)},

located per path by the event ``merged_fraction ≥ 1/2`` (``solver.event_stop``: the path
stops there) and right-censored at T. Per cell: the Kaplan–Meier median of τ with its 95%
log-log band (:func:`wflow.analysis.intervals.km_median_interval`) and the fraction escaped
by T (Clopper–Pearson). Per d: the growth law :math:`\log \tau_{\mathrm{med}} = a + b\beta`,
a weighted least-squares fit over the cells with β ≥ :data:`FIT_BETA_MIN` (the metastable
range) and a finite median and band (:func:`fit_growth`; the fit over every β is printed
beside it). The d → ∞ reference is GLPR's equiangular reduction
(:func:`equiangular_time`): orthogonal tokens stay equiangular, every pair merges at once when
ρ reaches 0.999, so :math:`\tau_\infty(\beta) = \int_0^{0.999} d\rho/\dot\rho`.

Far beyond T, the same systems' escape times come from :mod:`wflow.studies._collapse`
(converged clusters collapsed into weighted tokens; ``experiments/metastability_collapse.py``).
"""

from __future__ import annotations

import copy
import math

import numpy as np

from wflow.analysis.intervals import Interval, _tq, km_median_interval, proportion_interval
from wflow.studies._base import Study, register_study
from wflow.sweeps.sweep import expand_grid

__all__ = ["Metastability", "equiangular_rate", "equiangular_time", "fit_growth", "MERGE_COSINE",
           "FIT_BETA_MIN"]

#: the cosine above which a pair counts as merged (``diagnostics.merge_cosine``)
MERGE_COSINE = 0.999
#: the growth law is fitted over β ≥ FIT_BETA_MIN, the metastable range: below it the
#: half-merge time is the first gathering (τ of order 10, nearly flat in β, with narrow bands
#: that would pull a fit over all β), not an escape
FIT_BETA_MIN = 5.0

_SCALES = {
    # n, paths, T, dims, betas, rtol
    "full": dict(n=32, paths=32, T=2.0e4, dims=(2, 3, 8, 32),
                 betas=(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0), tol=1e-5),
    "quick": dict(n=16, paths=8, T=200.0, dims=(2, 16), betas=(1.0, 2.0, 3.0), tol=1e-4),
}


def equiangular_rate(rho, n, beta):
    r"""GLPR's equiangular reduction (H = 1, D = V = I, head normalisation, ascent):

    .. math:: \dot\rho = \frac{2 e^{\beta\rho}(1-\rho)(1+(n-1)\rho)}{e^\beta + (n-1)e^{\beta\rho}},

    ρ = ⟨x_i, x_j⟩ (i ≠ j) of n equiangular tokens in d ≥ n (they stay equiangular)."""
    rho = np.asarray(rho, dtype=float)
    return (2 * np.exp(beta * rho) * (1 - rho) * (1 + (n - 1) * rho)
            / (np.exp(beta) + (n - 1) * np.exp(beta * rho)))


def equiangular_time(n, beta, rho1=MERGE_COSINE, rho0=0.0):
    r""":math:`t = \int_{\rho_0}^{\rho_1} d\rho / \dot\rho(\rho)` (:func:`equiangular_rate`),
    the time the equiangular cosine takes from ρ₀ to ρ₁ (scipy ``quad``, relative
    tolerance 1e-12)."""
    from scipy.integrate import quad

    # the integrand is ~ e^{β(1-ρ)}: scale it out so quad sees O(1) values
    return float(quad(lambda r: 1.0 / equiangular_rate(r, n, beta), rho0, rho1,
                      epsabs=0.0, epsrel=1e-12, limit=200)[0])


def fit_growth(betas, medians, level=0.95, beta_min=-math.inf):
    r"""Growth law :math:`\log \tau = a + b\beta` through per-β medians with intervals:

    .. math::
        \hat b = \frac{\sum_k w_k (\beta_k - \bar\beta_w)\, y_k}{\sum_k w_k (\beta_k - \bar\beta_w)^2},
        \quad y_k = \log m_k,\quad w_k = s_k^{-2},\quad
        s_k = \frac{\log h_k - \log l_k}{2 z_{(1+\ell)/2}},

    :math:`[l_k, h_k]` the level-ℓ interval of median k (log scale, so a normal
    approximation of log m_k), :math:`\mathrm{se}(\hat b) = (\sum_k w_k (\beta_k - \bar\beta_w)^2)^{-1/2}`
    scaled by :math:`\max(1, \chi^2/(K-2))^{1/2}` (the reduced χ² of the residuals: model
    misfit widens it), Student-t with K − 2 degrees of freedom. Cells with a median or bound
    not finite (censored, ``> T``) are left out, and so are cells with β < ``beta_min`` (the
    fit over the metastable range only). No interval with fewer than 3 cells.

    Parameters
    ----------
    betas : (K,) floats
    medians : sequence of :class:`~wflow.analysis.intervals.Interval`
    beta_min : float, the smallest β fitted

    Returns
    -------
    Interval of b, with ``extra = {"a", "a_se", "betas", "chi2_red"}``.
    """
    from scipy.stats import norm

    bet = np.asarray(betas, dtype=float)
    m = np.array([iv.estimate for iv in medians], dtype=float)
    lo = np.array([iv.low for iv in medians], dtype=float)
    hi = np.array([iv.high for iv in medians], dtype=float)
    ok = (np.isfinite(m) & np.isfinite(lo) & np.isfinite(hi) & (lo > 0) & (hi > lo)
          & (bet >= beta_min))
    K = int(ok.sum())
    nan = float("nan")
    method = "weighted least squares on log KM medians, Student-t"
    if K < 2:
        return Interval(nan, nan, nan, level, method, K, "β values", extra={"a": nan})
    x, y = bet[ok], np.log(m[ok])
    s = (np.log(hi[ok]) - np.log(lo[ok])) / (2 * norm.ppf((1 + level) / 2))
    w = 1.0 / s ** 2
    xb = float(np.sum(w * x) / w.sum())
    sxx = float(np.sum(w * (x - xb) ** 2))
    b = float(np.sum(w * (x - xb) * y) / sxx)
    a = float(np.sum(w * y) / w.sum() - b * xb)
    extra = {"a": a, "betas": x, "chi2_red": nan, "a_se": nan}
    if K < 3:
        return Interval(b, nan, nan, level, method, K, "β values", extra=extra)
    chi2 = float(np.sum(w * (y - a - b * x) ** 2)) / (K - 2)
    infl = math.sqrt(max(1.0, chi2))
    se = infl / math.sqrt(sxx)
    extra.update(chi2_red=chi2, a_se=infl * math.sqrt(1 / w.sum() + xb ** 2 / sxx))
    half = _tq(level, K - 2) * se
    return Interval(b, b - half, b + half, level, method, K, "β values", se=se, extra=extra)


def _final(t, a, T):
    a = np.asarray(a, dtype=float)
    return a[-1] if a.ndim > 1 else a[-1:]


def cell_name(d, beta):
    return f"meta-d{d}-b{beta:g}"


def parse_name(name):
    _, d, b = name.split("-")
    return int(d[1:]), float(b[1:])


@register_study
class Metastability(Study):
    """Escape (half-merge) time against β per d, adaptive steps with per-path events.

    Full: n = 32, 32 systems per cell, T = 2·10⁴, d ∈ {2, 3, 8, 32}, β = 1 … 10, bs32 at
    rtol = atol = 1e-5. Quick: n = 16, 8 systems, T = 200, d ∈ {2, 16}, β ∈ {1, 2, 3}.
    """

    name = "metastability"
    question = ("how does the escape time from the metastable clustered state grow with β on "
                "S¹, S² and in higher d, and how close is d = 32 to the equiangular d → ∞ limit?")
    quick = ("n = 16, 8 systems, T = 200, d ∈ {2, 16}, β ∈ {1, 2, 3}: the escape time grows "
             "with β, the fit and the equiangular reference are written")
    summary_columns = (("t_escape", "event_time", _final),)

    def base(self, scale):
        s = _SCALES[scale]
        return {"model": {"d": 2, "n": s["n"], "beta": 1.0, "heads": 1, "normalization": "head",
                          "sign": "ascent", "values": "identity"},
                "init": {"tokens": "uniform", "weights": "identity", "per_path_tokens": True,
                         "seed": 38},
                "weights": {"process": "frozen"},
                "solver": {"method": "bs32", "adaptive": True, "rtol": s["tol"],
                           "atol": s["tol"], "T": s["T"], "paths": s["paths"], "dt": 0.01,
                           "record_times": "geometric", "event": "merged_fraction",
                           "event_threshold": 0.5, "event_direction": "up",
                           "event_stop": True, "event_tol": 1e-3},
                "diagnostics": {"ledger": False, "clustering": True,
                                "merge_cosine": MERGE_COSINE},
                "output": {"store_tokens": False}}

    def variants(self, base, scale):
        s = _SCALES[scale]
        tasks = []
        for d in s["dims"]:
            for beta in s["betas"]:
                cfg = copy.deepcopy(base)
                cfg["model"].update(d=int(d), beta=float(beta))
                tasks += expand_grid(cfg, {}, name=cell_name(d, beta))
        return tasks

    # ------------------------------------------------------------------------- summary
    def cells(self, data):
        """``{d: {"beta", "median" (Intervals), "escaped" (Intervals), "tau_inf", "fit", "n",
        "T"}}``."""
        out = {}
        for point, cfg in data.tasks:
            d, beta = parse_name(point)
            T = float(cfg["solver"]["T"])
            n = int(cfg["model"]["n"])
            tau = data.column("t_escape", point).astype(float)
            tau = np.where(tau <= T, tau, np.nan)
            c = out.setdefault(d, {"beta": [], "median": [], "escaped": [], "tau_inf": [],
                                   "n": n, "T": T})
            c["beta"].append(beta)
            c["median"].append(km_median_interval(tau, T, unit="systems"))
            c["escaped"].append(proportion_interval(int(np.isfinite(tau).sum()), tau.size,
                                                    unit="systems"))
            c["tau_inf"].append(equiangular_time(n, beta))
        for c in out.values():
            c["fit"] = fit_growth(c["beta"], c["median"], beta_min=FIT_BETA_MIN)
            c["fit_all"] = fit_growth(c["beta"], c["median"])
        return out

    def summarize(self, data):
        cells = self.cells(data)
        lines = ["Escape (half-merge) time τ: Kaplan–Meier median over systems [95% log-log "
                 "band], fraction escaped by T [Clopper–Pearson], equiangular d → ∞ time τ_∞",
                 f"{'d':>4}{'beta':>6}{'KM median [95%]':>32}{'escaped by T':>24}{'tau_inf':>12}"]
        table = {k: [] for k in ("d", "beta", "n", "T", "km_median", "km_lo", "km_hi",
                                 "escaped", "escaped_lo", "escaped_hi", "tau_inf")}
        for d in sorted(cells):
            c = cells[d]
            for k, beta in enumerate(c["beta"]):
                m, e = c["median"][k], c["escaped"][k]
                txt = _fmt_km(m)
                lines.append(f"{d:>4}{beta:>6g}{txt:>32}{e.fmt('.2f'):>24}"
                             f"{c['tau_inf'][k]:>12.4g}")
                for key, v in zip(table, (d, beta, c["n"], c["T"], *m.as_tuple(), *e.as_tuple(),
                                          c["tau_inf"][k])):
                    table[key].append(v)
        for title, key in ((f"over the metastable range β ≥ {FIT_BETA_MIN:g}", "fit"),
                           ("over every β (for comparison: the small-β cells are the first "
                            "gathering, not an escape)", "fit_all")):
            lines += ["", f"Growth law log τ_med = a + b β per d, {title} (cells with a finite "
                          "median and band; b's interval: weighted least squares, Student-t, "
                          "K − 2 dof)"]
            for d in sorted(cells):
                f = cells[d][key]
                bs = f.extra.get("betas", [])
                rng = f"β ∈ [{min(bs):g}, {max(bs):g}]" if len(bs) else "no cells"
                lines.append(f"  d = {d:>3}: b = {f.fmt('.3g')} ({f.label}; {rng}); "
                             f"a = {f.extra['a']:.3g} ± {f.extra.get('a_se', math.nan):.2g}; "
                             f"reduced χ² {f.extra.get('chi2_red', math.nan):.2g}")
        c0 = next(iter(cells.values()))
        bet = np.array(c0["beta"])
        ti = np.log(np.array(c0["tau_inf"]))
        for sel in (bet >= FIT_BETA_MIN, np.ones_like(bet, dtype=bool)):
            if sel.sum() > 1:
                slope = np.polyfit(bet[sel], ti[sel], 1)[0]
                lines.append(f"  d → ∞ (equiangular, n = {c0['n']}): log τ_∞ slope {slope:.3g} "
                             f"over β ∈ [{bet[sel].min():g}, {bet[sel].max():g}] (→ 1 as "
                             "β → ∞: τ_∞ ≈ e^β/(2β))")
        return "\n".join(lines), table

    def figures(self, data, outdir, formats):
        from wflow.figures import metastability as fig

        cells = self.cells(data)
        return fig.plot_escape(cells, outdir, formats,
                               labels={d: f"d = {d}" + (" (S¹)" if d == 2 else " (S²)" if d == 3
                                                        else "") for d in cells})


def _fmt_km(iv):
    def f(v):
        return "> T" if math.isinf(v) else f"{v:.3g}"
    if not iv.ok:
        return f"{f(iv.estimate)} (no interval)"
    return f"{f(iv.estimate)} [{f(iv.low)}, {f(iv.high)}]"
