r"""Particles against a large-n particle reference on :math:`S^2`.

The same initial law as the S¹ study, the von Mises–Fisher density
:math:`\rho_0(x) = \kappa e^{\kappa x_3}/(4\pi\sinh\kappa)` about :math:`e_3`
(``init.tokens = "vmf"``, d = 3), is moved by the clustering flow (D = I frozen, β = 1, σ = +1)

- as R independent reference systems of :math:`n_{\rm ref}` particles, :math:`\mu^{\rm ref,r}_t`
  (one Monte Carlo path each), and
- as n particles, :math:`n \in \{100, \dots, n_{\rm ref}/8\}`, P independent samples per n
  (``init.per_path_tokens``; n number k takes the paths after the references' and the previous
  n's, so no two samples share a draw).

**W₂ by POT on subsamples.** The exact :math:`W_2` between two discrete measures on the sphere
with the geodesic cost :math:`c(x, y) = \arccos(x\cdot y)^2` is a linear program
(``ot.emd2``, network simplex), :math:`O(nm)` memory. The reference is therefore used through
uniform subsamples :math:`\nu_m` of size m, drawn without replacement from reference
:math:`r = p \bmod R` for sample p. To first order (the linearised, :math:`\dot H^{-1}`
picture of :math:`W_2` between nearby measures) the squared distances of independent
fluctuations add:

.. math::
    \mathbb E W_2^2(\mu^n, \nu_m) \approx \mathbb E W_2^2(\mu^n, \rho)
        + \mathbb E W_2^2(\nu_m, \mu^{\rm ref}) + W_2^2(\mu^{\rm ref}, \rho),

so the subsample's own error is measured by two disjoint subsamples of one reference,
:math:`F(m) = \tfrac12\,\mathbb E W_2^2(\nu_m, \nu_m')`, and removed:
:math:`\widehat{W_2^2}(\mu^n) = W_2^2(\mu^n, \nu_m) - F(m)`. The reference's own error is
measured by subsamples of two different references,
:math:`G = \tfrac12\big(\mathbb E W_2^2(\nu^{r}_m, \nu^{r'}_m) - \mathbb E W_2^2(\nu_m, \nu'_m)\big)
\approx W_2^2(\mu^{\rm ref}, \rho)` (reported, not removed).

**Expected rates.** For i.i.d. samples of a smooth density bounded below on a 2-dimensional
manifold, :math:`\mathbb E W_2^2(\mu^n, \rho) \sim c \log n / n` (Ajtai–Komlós–Tusnády;
Ambrosio–Stra–Trevisan), i.e. :math:`W_2 \sim \sqrt{\log n / n}`, whose local log–log slope
:math:`-\tfrac12 + 1/(2\log n)` is −0.39 at n = 100 and −0.44 at n = 3200: a pure power fit
over this range gives a ≈ −0.42, and the fit of :math:`W_2/\sqrt{\log n} \approx C n^{a}` gives
a = −1/2. Both fits are made (jackknife Student-t intervals,
:func:`wflow.analysis.intervals.power_law_interval` with ``paired=False``). The energy error
:math:`\Delta E = E[\mu^n_t] - \bar E_{\rm ref}(t)`
(against the mean of the R references' energies; their spread is the reference's own error)
has the CLT rate :math:`n^{-1/2}` (non-degenerate first Hoeffding projection for a non-uniform
law), no logarithm.

**Choices (full scale).** d = 3, H = 1, D = I frozen, β = 1, σ = +1, κ = 1, T = 2 (records at
0, 1, 2), RK4 with Δt = 0.5 (checked against Δt/2 on the same samples at the largest n);
:math:`n_{\rm ref} = 25\,600`, R = 4; n ∈ {100, …, 3200}, 8 samples each; m = 6400
(:math:`W_2` of a 3200 × 6400 problem ≈ 6 s).
"""

from __future__ import annotations

import copy

import numpy as np

from wflow.analysis.intervals import jackknife_interval, power_law_interval
from wflow.analysis.results import load_source, mean_ci
from wflow.studies._base import Study, register_study
from wflow.studies.meanfield import MEANFIELD_BASE
from wflow.sweeps.sweep import expand_grid

__all__ = ["MeanFieldS2", "w2_sphere", "meanfield_s2_errors", "meanfield_s2_fits",
           "meanfield_s2_summary"]

#: the S¹ study's base on S² (d = 3; records every second step)
MEANFIELD_S2_BASE = copy.deepcopy(MEANFIELD_BASE)
MEANFIELD_S2_BASE["model"]["d"] = 3
MEANFIELD_S2_BASE["solver"]["record_every"] = 2

#: particle counts and seeds, the reference (size, count), the subsample size m, the
#: number of disjoint-subsample pairs per reference (floor) and of cross-reference pairs,
#: the n of the Δt/2 check and its paths
S2_GRID = {
    "quick": {"n": (50, 100, 200, 400), "seeds": 8, "n_ref": 3200, "refs": 2, "m": 800,
              "T": 0.5, "record_every": 1, "floor_pairs": 2, "dt_check": 400,
              "dt_check_paths": 2},
    "full": {"n": (100, 200, 400, 800, 1600, 3200), "seeds": 8, "n_ref": 25600, "refs": 4,
             "m": 6400, "T": 2.0, "record_every": 2, "floor_pairs": 1, "dt_check": 3200,
             "dt_check_paths": 2},
}


def w2_sphere(X, Y, a=None, b=None):
    r"""The exact quadratic Wasserstein distance on the unit sphere (geodesic cost),

    .. math:: W_2(\mu, \nu)^2 = \min_{\pi\in\Pi(a, b)} \sum_{ij} \pi_{ij}
        \arccos(x_i\cdot y_j)^2,

    by ``ot.emd2`` (network simplex, exact up to round-off), uniform weights by default.
    Raises ``RuntimeError`` when the solver reports a problem (iteration limit, infeasible).
    """
    from wflow.model.diagnostics import transport_cost

    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float)
    a = np.full(len(X), 1.0 / len(X)) if a is None else np.asarray(a, float) / np.sum(a)
    b = np.full(len(Y), 1.0 / len(Y)) if b is None else np.asarray(b, float) / np.sum(b)
    C = np.arccos(np.clip(X @ Y.T, -1.0, 1.0)) ** 2
    try:
        cost = transport_cost(a, b, C)
    except RuntimeError as e:
        raise RuntimeError(f"w2_sphere: {e}") from None
    return float(np.sqrt(max(cost, 0.0)))


def _pname(n, half=False):
    return f"{'half-' if half else ''}particles-n={n}"


@register_study
class MeanFieldS2(Study):
    """n particles against a large-n particle reference on S²: W₂ (POT on subsamples, the
    subsample floor removed) and energy error in n; power and √(log n/n) fits.

    Full: n ∈ {100, …, 3200} × 8 seeds, 4 references of 25 600, m = 6400, T = 2. Quick:
    n ∈ {50, …, 400}, 2 references of 3200, m = 800, T = 0.5.
    """

    name = "meanfield_s2"
    question = ("how fast do n particles converge to the mean-field limit on S² (W₂ by POT and "
                "energy error against a large-n particle reference; n^(-1/2) or √(log n/n))?")
    quick = ("n ∈ {50, …, 400} × 8 seeds, 2 references of 3200, subsamples m = 800, T = 0.5")

    def base(self, scale):
        cfg = copy.deepcopy(MEANFIELD_S2_BASE)
        g = S2_GRID[scale]
        cfg["solver"].update(T=g["T"], paths=g["seeds"], record_every=g["record_every"])
        return cfg

    def variants(self, base, scale):
        g = S2_GRID[scale]
        P = int(base["solver"]["paths"])
        first = int(base["init"].get("first_path", 0))
        c = copy.deepcopy(base)
        c["model"]["n"] = int(g["n_ref"])
        c["solver"]["paths"] = int(g["refs"])
        c["init"]["first_path"] = first
        first += int(g["refs"])
        tasks = expand_grid(c, {}, name=f"reference-n={g['n_ref']}")
        for n in g["n"]:
            c = copy.deepcopy(base)
            c["model"]["n"] = int(n)
            c["init"]["first_path"] = first
            first += P
            tasks += expand_grid(c, {}, name=_pname(n))
            if n == g["dt_check"]:  # the same samples at Δt/2 (the first paths)
                h = copy.deepcopy(c)
                h["solver"]["dt"] = c["solver"]["dt"] / 2
                h["solver"]["record_every"] = 2 * c["solver"]["record_every"]
                h["solver"]["paths"] = min(P, int(g["dt_check_paths"]))
                tasks += expand_grid(h, {}, name=_pname(n, half=True))
        return tasks

    def summarize(self, data):
        res = meanfield_s2_errors(data, _scale_of(data))
        return meanfield_s2_summary(res, meanfield_s2_fits(res))

    def figures(self, data, outdir, formats):
        from wflow.figures import meanfield_s2 as figs

        res = meanfield_s2_errors(data, _scale_of(data))
        return figs.draw(res, meanfield_s2_fits(res), outdir, formats)


def _scale_of(data):
    """The grid the tasks were made from, recognised by the reference size."""
    for name, _ in data.tasks:
        if name.startswith("reference-n="):
            n_ref = int(name.split("=")[1])
            for g in S2_GRID.values():
                if g["n_ref"] == n_ref:
                    return g
    raise ValueError("meanfield_s2: no reference task with a known size among the tasks")


# ---------------------------------------------------------------------------------- analysis
def meanfield_s2_errors(data, grid, seed=0):
    r"""Every measured error, from the result files.

    Per record r and sample p of each n: :math:`W_2^2(\mu^n, \nu_m)` against a fresh subsample
    of reference p mod R (``w2sq_raw[n]`` (records, P)), the floor
    :math:`F = \tfrac12 W_2^2(\nu_m, \nu'_m)` (disjoint subsamples of one reference,
    ``floor`` (records, R·floor_pairs)), the cross-reference
    :math:`\tfrac12 W_2^2(\nu^r_m, \nu^{r'}_m)` (``cross`` (records, R/2)), the energy error
    against the mean reference energy ``dE[n]`` (records, P), the reference energies
    ``E_ref`` (records, R), the Δt/2 check and the mean resultant length of the reference.
    Subsamples from ``numpy.random.default_rng(seed)``.
    """
    if getattr(data, "_meanfield_s2", None) is not None:
        return data._meanfield_s2
    rng = np.random.default_rng(seed)
    m = int(grid["m"])
    parts, half, ref = {}, {}, None
    cfg0 = None
    for path, (name, _) in zip(data.paths, data.tasks):
        cfg, arr = load_source(path)
        t = np.asarray(arr["t"], float)
        X = np.asarray(arr["X"], float)
        E = np.asarray(arr["energy"], float)
        if name.startswith("reference-"):
            ref = (t, X, E)
        elif name.startswith("half-"):
            half[int(cfg["model"]["n"])] = X
        else:
            parts[int(cfg["model"]["n"])] = (t, X, E)
            cfg0 = cfg
    t, Xr, Er = ref
    R, n_ref = Xr.shape[1], Xr.shape[2]
    if 2 * m > n_ref:
        raise ValueError(f"meanfield_s2: two disjoint subsamples of m = {m} need n_ref >= {2 * m}")

    def sub(r_rec, r, k=1):
        idx = rng.permutation(n_ref)[: k * m]
        return [Xr[r_rec, r, idx[j * m:(j + 1) * m]] for j in range(k)]

    out = {"t": t, "n": np.array(sorted(parts)), "m": m, "n_ref": n_ref, "R": R,
           "w2sq_raw": {}, "dE": {}, "E_ref": Er, "config": cfg0}
    for n, (tn, X, E) in sorted(parts.items()):
        if not np.allclose(tn, t):
            raise ValueError(f"meanfield_s2: the records of n = {n} and of the reference differ")
        P = X.shape[1]
        out["w2sq_raw"][n] = np.array([[w2_sphere(X[r, p], sub(r, p % R)[0]) ** 2
                                        for p in range(P)] for r in range(len(t))])
        out["dE"][n] = E - Er.mean(axis=1)[:, None]
    fp = int(grid.get("floor_pairs", 1))
    out["floor"] = np.array([[0.5 * w2_sphere(*sub(r, q, 2)) ** 2
                              for q in range(R) for _ in range(fp)] for r in range(len(t))])
    out["cross"] = np.array([[0.5 * w2_sphere(sub(r, q)[0], sub(r, q + 1)[0]) ** 2
                              for q in range(0, R - 1, 2)] for r in range(len(t))])
    Fm = out["floor"].mean(axis=1)
    out["w2sq"] = {n: w - Fm[:, None] for n, w in out["w2sq_raw"].items()}
    out["resultant"] = np.linalg.norm(Xr.mean(axis=2), axis=-1)  # (records, R)
    for n, Xh in half.items():
        X = parts[n][1][:, : Xh.shape[1]]
        dot = np.clip(np.sum(X * Xh, axis=-1), -1.0, 1.0)
        out["dt_check"] = {"n": n, "max_disp": np.arccos(dot).max(axis=(1, 2)),
                           "w2": np.array([w2_sphere(X[-1, 0], Xh[-1, 0])])}
    data._meanfield_s2 = out
    return out


def _fit(n, samples, log_corrected=False, seed=0):
    """(a, C, (lo, hi)) of mean(samples) ≈ C n^a [· √log n], 95% jackknife Student-t over
    seeds, each n independent (:func:`wflow.analysis.intervals.power_law_interval`)."""
    n = np.asarray(n, dtype=float)
    s = [np.asarray(v, float) / (np.sqrt(np.log(k)) if log_corrected else 1.0)
         for k, v in zip(n, samples)]
    f = power_law_interval(n, s, paired=False, unit="seeds")
    return f.estimate, f.extra["a"], (f.low, f.high)


def _fit_floor(n, raw, floor, log_corrected=False, level=0.95, seed=0):
    r"""The exponent of :math:`W_2` from the floor-corrected squares,

    .. math:: \log\big(\overline{W_2^2}(n) - \bar F\big)\,[-\log\log n]
        \approx \log C + 2a \log n,

    least squares on the K values of n; the interval: the grouped jackknife Student-t
    (:func:`wflow.analysis.intervals.jackknife_interval`) over each n's seeds and the floor
    values F, independent groups, so the floor's own uncertainty is in it. Returns
    ``(a, √C, (lo, hi))`` (halved exponents), or ``None`` when some corrected mean is not
    positive. ``seed`` is unused (no resampling).
    """
    x = np.log(np.asarray(n, dtype=float))
    shift = np.log(x) if log_corrected else np.zeros_like(x)
    cols = [np.asarray(c, float).ravel() for c in raw] + [np.asarray(floor, float).ravel()]
    xc = x - x.mean()

    def slope(means):
        y = np.log(means[:-1] - means[-1]) - shift
        return 0.5 * np.sum(xc * (y - y.mean())) / np.sum(xc ** 2)

    with np.errstate(invalid="ignore", divide="ignore"):
        b = float(slope(np.array([c.mean() for c in cols])))
    if not np.isfinite(b):
        return None
    F = cols[-1].mean()
    y = np.log(np.array([c.mean() for c in cols[:-1]]) - F) - shift
    C = float(np.exp(0.5 * (y.mean() - 2 * b * x.mean())))
    iv = jackknife_interval(cols, slope, level, unit="seeds")
    return b, C, (iv.low, iv.high)


def meanfield_s2_fits(res):
    r"""Per record time, the exponents of

    - ``w2``: :math:`\overline{W_2}(\mu^n,\nu_m)` (raw, the floor included) ≈ :math:`Cn^a`;
    - ``w2sq``: the floor-corrected :math:`\overline{W_2^2} - \bar F \approx C^2n^{2a}`
      (:func:`_fit_floor`; a is the exponent of :math:`W_2`), and ``w2sq_log``: the same
      for :math:`(\overline{W_2^2} - \bar F)/\log n` (the √(log n/n) law gives −1/2 here);
    - ``dE``: :math:`\overline{|\Delta E|} \approx Cn^a`.

    ``None`` for a corrected fit whose means are not all positive (the floor above the signal).
    """
    n = res["n"]
    out = {}
    for r, t in enumerate(res["t"]):
        f = {"w2": _fit(n, [np.sqrt(res["w2sq_raw"][k][r]) for k in n]),
             "dE": _fit(n, [np.abs(res["dE"][k][r]) for k in n])}
        raw = [res["w2sq_raw"][k][r] for k in n]
        for key, lc in (("w2sq", False), ("w2sq_log", True)):
            f[key] = _fit_floor(n, raw, res["floor"][r], log_corrected=lc)
        out[float(t)] = f
    return out


def meanfield_s2_summary(res, fits):
    """``(text, table)``: per n and t the raw and floor-corrected W₂, |ΔE|, with 95% t-intervals
    over seeds; the floor, the reference's error, the fits, the Δt check."""
    t = res["t"]
    table = {k: [] for k in ("n", "t", "seeds", "w2_raw_mean", "w2_raw_ci95", "w2_cor",
                             "w2sq_cor_mean", "w2sq_cor_ci95", "absdE_mean", "absdE_ci95")}
    cfg = res["config"] or {}
    m_, ini = cfg.get("model", {}), cfg.get("init", {})
    Fm = res["floor"].mean(axis=1)
    Gm = res["cross"].mean(axis=1) - Fm
    lines = [f"particles (n, {res['w2sq_raw'][res['n'][0]].shape[1]} seeds per n) against "
             f"{res['R']} particle references of n_ref = {res['n_ref']} on S^2; beta = "
             f"{m_.get('beta')}, H = {m_.get('heads')}, D = I frozen, sign = {m_.get('sign')}, "
             f"vMF kappa = {ini.get('kappa')}",
             f"W2: ot.emd2, geodesic^2 cost, against subsamples of m = {res['m']} of reference "
             "p mod R; W2c = sqrt(mean W2^2 - F), F = the subsample floor; ± : 95% t-interval "
             "over seeds",
             "",
             f"{'n':>6}{'t':>6}{'W2 raw':>11}{'± 95%':>10}{'W2c':>11}{'W2^2-F':>11}{'± 95%':>10}"
             f"{'|dE|':>11}{'± 95%':>10}{'W2c·sqrt(n/log n)':>19}"]
    for n in res["n"]:
        for r, tt in enumerate(t):
            raw = np.sqrt(res["w2sq_raw"][n][r])
            c = res["w2sq"][n][r]
            a = np.abs(res["dE"][n][r])
            wc = float(np.sqrt(max(c.mean(), 0.0)))
            row = dict(n=int(n), t=float(tt), seeds=raw.size, w2_raw_mean=float(raw.mean()),
                       w2_raw_ci95=mean_ci(raw), w2_cor=wc, w2sq_cor_mean=float(c.mean()),
                       w2sq_cor_ci95=mean_ci(c), absdE_mean=float(a.mean()),
                       absdE_ci95=mean_ci(a))
            for k, v in row.items():
                table[k].append(v)
            lines.append(f"{n:>6d}{tt:>6.2f}{row['w2_raw_mean']:>11.4e}{row['w2_raw_ci95']:>10.2e}"
                         f"{wc:>11.4e}{row['w2sq_cor_mean']:>11.3e}{row['w2sq_cor_ci95']:>10.2e}"
                         f"{row['absdE_mean']:>11.3e}{row['absdE_ci95']:>10.2e}"
                         f"{wc * np.sqrt(n / np.log(n)):>19.4f}")
    lines += ["", "the reference: subsample floor F = W2^2(nu_m, nu_m')/2 (disjoint subsamples of "
                  "one reference), its error G = W2^2(nu^r_m, nu^r'_m)/2 - F (two references), "
                  "energy spread over references, mean resultant length |mean x|",
              f"{'t':>6}{'F':>11}{'sqrt F':>10}{'G':>11}{'sqrt|G|':>10}{'E_ref':>11}"
              f"{'sd(E_ref)':>11}{'|mean x|':>10}"]
    for r, tt in enumerate(t):
        lines.append(f"{tt:>6.2f}{Fm[r]:>11.3e}{np.sqrt(Fm[r]):>10.4f}{Gm[r]:>11.2e}"
                     f"{np.sqrt(abs(Gm[r])):>10.4f}{res['E_ref'][r].mean():>11.6f}"
                     f"{res['E_ref'][r].std(ddof=1) if res['R'] > 1 else np.nan:>11.2e}"
                     f"{res['resultant'][r].mean():>10.4f}")
    lines += ["", f"fitted exponents (mean over seeds ≈ C n^a, n = {int(res['n'][0])} … "
                  f"{int(res['n'][-1])}; 95% CI, jackknife Student-t over seeds, each n independent; "
                  "W2c: from the floor-corrected mean W2^2, halved; W2c/sqrt(log n): the "
                  "sqrt(log n / n) law gives -1/2, a pure power fit of sqrt(log n/n) over this "
                  "range gives about -0.42)",
              f"{'t':>6}{'a(W2 raw)':>22}{'a(W2c)':>22}{'a(W2c/sqrt log n)':>22}{'a(|dE|)':>22}"]

    def fmt(f):
        return " " * 22 if f is None else f"{f[0]:>7.3f} [{f[2][0]:>6.3f},{f[2][1]:>6.3f}]"

    for tt, f in fits.items():
        lines.append(f"{tt:>6.2f}{fmt(f['w2']):>22}{fmt(f['w2sq']):>22}{fmt(f['w2sq_log']):>22}"
                     f"{fmt(f['dE']):>22}")
    if "dt_check" in res:
        dc = res["dt_check"]
        lines += ["", f"particle time step: Δt against Δt/2, same samples, n = {dc['n']}: max "
                      f"token displacement {float(dc['max_disp'].max()):.2e} rad, W2 at T "
                      f"{float(dc['w2'].max()):.2e}"]
    return "\n".join(lines), table
