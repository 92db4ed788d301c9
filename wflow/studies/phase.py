r"""The (β, t) phase diagram of clustering: the pooled fraction of merged token pairs.

Many independent small systems [model §2, §8]: n = 32 tokens i.i.d. uniform on
:math:`S^{d-1}`, d ∈ {2, 3}, one head with frozen :math:`D = I` and identity values,
ascent, head normalisation, so each system runs

.. math:: \dot x_i = P_{x_i} \sum_j \frac{e^{\beta\langle x_i, x_j\rangle}}
                     {\sum_k e^{\beta\langle x_i, x_k\rangle}}\, x_j ,

the self-attention dynamics of the clustering literature. The P systems are the Monte Carlo
paths of one run per (d, β) (``init.per_path_tokens``: system p draws its tokens from
(seed, p) alone). The statistic is the pooled fraction of merged ordered pairs

.. math:: F(t) = \frac{\sum_p \#\{i \ne j : \langle x^p_i(t), x^p_j(t)\rangle > c\}}
                      {P\, n(n-1)} = \frac1P \sum_p f_p(t),\qquad c = 0.999,

(every system has n(n − 1) ordered pairs, so pooling the pairs is averaging the per-system
fractions :math:`f_p`, the series ``merged_fraction``), with the standard error
:math:`\mathrm{SE}(t) = s_p(f_p(t))/\sqrt P` over the i.i.d. systems, and the half-merge
time :math:`t_{1/2} = \inf\{t : F(t) \ge 1/2\}` (linear interpolation between records;
censored, ``> T``, when F stays below 1/2) with a 95% percentile bootstrap interval over
systems.

Resolution check: the tasks of ``resolution_betas`` run again with Δt/2 (same seeds, so the
same initial tokens); the summary reports :math:`|t_{1/2}(\Delta t) - t_{1/2}(\Delta t/2)|`
against the half-width of the interval and :math:`\max_t |F_{\Delta t} - F_{\Delta t/2}|`
against :math:`2\,\mathrm{SE}`.

Quick: d = 2, β ∈ {1, 3, 6}, 64 systems, T = 15 (Δt/2 at β = 1); its claim (``tests/test_study_phase.py``):
:math:`t_{1/2}` grows with β for β ≥ 1 (a censored value counts as larger than T).

Adaptive mode (``--set solver.adaptive=true``, [model §6d]): the extended diagram to long
times. The same systems and β grid, P = 256 systems per (d, β), censored at T = 10³,
Dormand–Prince 5(4) per path at rtol = 1e-6, atol = 1e-8, records at 400 geometric times
from t = 0.05 to T shared by all systems (each system's dense output there), so F is the
pooled fraction of the dense outputs and :math:`t_{1/2}` its crossing (linear interpolation
between the records). No Δt/2 runs: the tolerance controls the error (a tolerance check is
``--set solver.rtol=…``). Quick: d = 2, β ∈ {1, 3, 6}, 32 systems, T = 100. The default
(fixed-step, GLPR-matched) mode is unchanged by this one.
"""

from __future__ import annotations

import copy

import numpy as np

from wflow.analysis.intervals import curve_bootstrap_interval
from wflow.analysis.results import load_source
from wflow.studies._base import Study, StudyOptions, register_study
from wflow.sweeps.sweep import expand_grid

__all__ = ["Phase", "pooled_fraction", "half_time", "half_time_interval", "PHASE_BASE",
           "ADAPTIVE"]

PHASE_BASE = {
    "model": {"d": 2, "n": 32, "beta": 1.0, "heads": 1, "normalization": "head",
              "sign": "ascent", "values": "identity"},
    "init": {"tokens": "uniform", "weights": "identity", "per_path_tokens": True, "seed": 0},
    "weights": {"process": "frozen"},
    "solver": {"method": "euler", "dt": 0.05, "T": 30.0, "record_every": 4, "paths": 1024},
    "diagnostics": {"ledger": False, "clustering": True, "merge_cosine": 0.999},
    "output": {"store_tokens": False},
}
#: the adaptive mode's settings [model §6d] (``--set solver.adaptive=true``), by scale
ADAPTIVE = {
    "full": {"method": "dopri5", "adaptive": True, "rtol": 1e-6, "atol": 1e-8, "dt": 0.05,
             "T": 1000.0, "paths": 256, "record_times": "geometric", "records": 400,
             "first_record": 0.05},
    "quick": {"method": "dopri5", "adaptive": True, "rtol": 1e-6, "atol": 1e-8, "dt": 0.05,
              "T": 100.0, "paths": 32, "record_times": "geometric", "records": 100,
              "first_record": 0.05},
}
#: rounds of the adaptive loop between checkpoints (a checkpoint carries the records filled
#: so far, [model §6d, "Checkpoints"])
ADAPTIVE_CHECKPOINT_EVERY = 1000
#: bootstrap resamples of the systems for the interval of t_1/2
N_BOOT = 1000
LEVEL = 0.5


def pooled_fraction(f):
    r"""Pooled merged fraction and its standard error over systems.

    .. math:: F(t) = \frac1P\sum_p f_p(t), \qquad
              \mathrm{SE}(t) = \frac{1}{\sqrt P}\Big(\frac{1}{P-1}\sum_p (f_p(t) - F(t))^2\Big)^{1/2}

    Parameters
    ----------
    f : (records, P) array, the per-system fractions ``merged_fraction``.

    Returns
    -------
    F, se : (records,) arrays (se is NaN with one system).
    """
    f = np.asarray(f, dtype=float)
    P = f.shape[1]
    F = f.mean(axis=1)
    se = f.std(axis=1, ddof=1) / np.sqrt(P) if P > 1 else np.full_like(F, np.nan)
    return F, se


def half_time(t, F, level=LEVEL):
    r"""First time :math:`F(t) \ge` ``level``, linearly interpolated between records; NaN if
    never (censored at the last record). ``F`` may be (records,) or (B, records)."""
    t = np.asarray(t, dtype=float)
    F = np.atleast_2d(np.asarray(F, dtype=float))
    hit = F >= level
    k = np.argmax(hit, axis=1)
    out = np.full(F.shape[0], np.nan)
    ok = hit[np.arange(F.shape[0]), k]
    first = ok & (k == 0)
    out[first] = t[0]
    mid = ok & (k > 0)
    if np.any(mid):
        km = k[mid]
        rows = np.flatnonzero(mid)
        f0, f1 = F[rows, km - 1], F[rows, km]
        out[mid] = t[km - 1] + (level - f0) / (f1 - f0) * (t[km] - t[km - 1])
    return out


def half_time_interval(t, f, rng, n_boot=N_BOOT, level=LEVEL, conf=0.95):
    r"""The :math:`t_{1/2}` of the pooled fraction with its 95% percentile bootstrap interval
    over systems (:func:`wflow.analysis.intervals.curve_bootstrap_interval`: resample b draws
    multinomial counts of the P systems; a censored resample counts as :math:`+\infty`, so an
    upper end ``inf`` means "beyond T"). The percentile method (not BCa) because of that
    censoring.

    Returns
    -------
    Interval
        ``estimate`` :math:`t_{1/2}` (NaN: not reached), ``low``, ``high``, and its label.
    """
    t = np.asarray(t, dtype=float)
    return curve_bootstrap_interval(f, lambda F: half_time(t, F, level), rng=rng, level=conf,
                                    n_resamples=n_boot, unit="systems",
                                    censored_at=float(np.max(t)))


def _fmt_t(x, T):
    return f"> {T:g}" if not np.isfinite(x) else f"{x:.3f}"


@register_study
class Phase(Study):
    """The (β, t) phase diagram: one task per (d, β) of P = 1024 systems (quick: d = 2,
    β ∈ {1, 3, 6}, 64 systems, T = 15), plus the Δt/2 runs of ``resolution_betas``."""

    name = "phase"
    question = ("how fast do tokens merge (fraction of pairs with <x_i, x_j> > 0.999) "
                "as a function of β and t?")
    quick = ("d = 2, β ∈ {1, 3, 6}, 64 systems, T = 15, Δt/2 at β = 1: the half-merge time "
             "grows with β")
    betas = (0.1, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)
    dims = (2, 3)
    resolution_betas = (1.0, 9.0)
    quick_betas = (1.0, 3.0, 6.0)
    quick_resolution_betas = (1.0,)
    summary_columns = (("merged_final", "merged_fraction", "final"),)

    def base(self, scale):
        cfg = copy.deepcopy(PHASE_BASE)
        if scale == "quick":
            cfg["solver"].update(T=15.0, paths=64)
        return cfg

    def tasks(self, options=None):
        """The grid of :meth:`variants`; a ``--set model.beta=…`` or ``model.d=…`` override
        replaces that axis of the grid by its one value (the Δt/2 check then runs there).
        ``--set solver.adaptive=true`` selects the adaptive mode (:data:`ADAPTIVE`, the other
        overrides applied over it)."""
        options = options or StudyOptions()
        fixed = {o.split("=", 1)[0].strip() for o in options.overrides}
        base = self.base(options.scale)
        if options.configure(base)["solver"].get("adaptive", False) is True:
            base["solver"].update(ADAPTIVE[options.scale])
            base["output"]["checkpoint_every"] = ADAPTIVE_CHECKPOINT_EVERY
        return self.variants(options.configure(base), options.scale, fixed=fixed)

    def variants(self, base, scale, fixed=()):
        quick = scale == "quick"
        betas = list(self.quick_betas if quick else self.betas)
        dims = [int(base["model"]["d"])] if quick else list(self.dims)
        rb = list(self.quick_resolution_betas if quick else self.resolution_betas)
        if "model.d" in fixed:
            dims = [int(base["model"]["d"])]
        if "model.beta" in fixed:
            betas = rb = [float(base["model"]["beta"])]
        tasks = expand_grid(base, {"model.d": dims, "model.beta": betas}, name="phase")
        if base["solver"].get("adaptive", False):  # error control, no Δt/2 runs
            return tasks
        half = copy.deepcopy(base)
        half["solver"]["dt"] = base["solver"]["dt"] / 2
        half["solver"]["record_every"] = 2 * base["solver"]["record_every"]
        tasks += expand_grid(half, {"model.d": dims, "model.beta": rb}, name="phase-halfdt")
        return tasks

    # ------------------------------------------------------------------ data
    @staticmethod
    def curves(data):
        """``{(d, β, Δt): {"t", "F", "se", "f", "P", "T", "halved"}}`` from the result files."""
        out = {}
        for path, (point, _) in zip(data.paths, data.tasks):
            cfg, arr = load_source(path)
            f = np.asarray(arr["merged_fraction"], dtype=float)
            F, se = pooled_fraction(f)
            key = (int(cfg["model"]["d"]), float(cfg["model"]["beta"]), float(cfg["solver"]["dt"]))
            out[key] = {"t": np.asarray(arr["t"], dtype=float), "F": F, "se": se, "f": f,
                        "P": f.shape[1], "T": float(cfg["solver"]["T"]),
                        "halved": point.startswith("phase-halfdt"),
                        "adaptive": bool(cfg["solver"].get("adaptive", False)),
                        "rtol": float(cfg["solver"].get("rtol", np.nan)),
                        "method": cfg["solver"]["method"]}
        return out

    def half_times(self, data, curves=None):
        """``{(d, β, Δt): Interval}``: t_1/2 with its bootstrap interval (seeded from
        ``init.seed``, d and β: reproducible)."""
        curves = curves if curves is not None else self.curves(data)
        seed = int(data.config(data.tasks[0][0])["init"]["seed"])
        out = {}
        for key, c in curves.items():
            d, beta, _ = key
            rng = np.random.default_rng([seed, d, int(round(100 * beta))])
            out[key] = half_time_interval(c["t"], c["f"], rng)
        return out

    # ------------------------------------------------------------------ summary
    def summarize(self, data):
        """Per (d, β): t_1/2 with its 95% bootstrap interval, F at a few times ± SE; then the
        Δt/2 resolution check."""
        curves = self.curves(data)
        th = self.half_times(data, curves)
        main = sorted(k for k, c in curves.items() if not c["halved"])
        table = {k: [] for k in ("d", "beta", "dt", "systems", "t_half", "t_half_lo",
                                 "t_half_hi", "F_T", "F_T_se", "halved_dt")}
        lines = [f"Pooled fraction F(t) of merged ordered pairs (<x_i, x_j> > "
                 f"{data.config(data.tasks[0][0])['diagnostics']['merge_cosine']}) over "
                 "independent systems; ± one standard error over systems; t_1/2 = first time "
                 f"F >= 1/2 [{next(iter(th.values())).label}] ('> T': not reached)."]
        for d in sorted({k[0] for k in main}):
            keys = [k for k in main if k[0] == d]
            c0 = curves[keys[0]]
            T = c0["T"]
            probe = [x for x in (2.0, 5.0, 10.0, 20.0) if x < T] + [T]
            lines.append("")
            if c0["adaptive"]:
                probe = [x for x in (5.0, 10.0, 30.0, 100.0, 300.0) if x < T] + [T]
                lines.append(f"d = {d}  (n = 32, {c0['P']} systems, {c0['method']} at rtol = "
                             f"{c0['rtol']:g}, {c0['t'].size} records, T = {T:g})")
            else:
                lines.append(f"d = {d}  (n = 32, {c0['P']} systems, dt = {keys[0][2]:g}, "
                             f"T = {T:g})")
            lines.append(f"{'beta':>6}{'t_1/2':>9}{'95% interval':>20}"
                         + "".join(f"{'F(' + format(x, 'g') + ')':>16}" for x in probe))
            for k in keys:
                c = curves[k]
                t, lo, hi = th[k].as_tuple()
                idx = [int(np.argmin(np.abs(c["t"] - x))) for x in probe]
                lines.append(f"{k[1]:>6g}{_fmt_t(t, T):>9}"
                             f"{'[' + _fmt_t(lo, T) + ', ' + _fmt_t(hi, T) + ']':>20}"
                             + "".join(f"{c['F'][i]:>9.3f}±{c['se'][i]:<6.3f}" for i in idx))
        for k in sorted(curves):
            c = curves[k]
            t, lo, hi = th[k].as_tuple()
            for col, v in zip(table, (k[0], k[1], k[2], c["P"], t, lo, hi, float(c["F"][-1]),
                                      float(c["se"][-1]), c["halved"])):
                table[col].append(v)
        lines.append("")
        lines += self.resolution_lines(curves, th)
        return "\n".join(lines), table

    @staticmethod
    def resolution_pairs(curves):
        """``[(key, key_half)]``: each Δt/2 run with its Δt partner."""
        out = []
        for kh, c in sorted(curves.items()):
            if not c["halved"]:
                continue
            k = next((k for k, cc in curves.items() if not cc["halved"] and k[:2] == kh[:2]
                      and np.isclose(k[2], 2 * kh[2])), None)
            if k is not None:
                out.append((k, kh))
        return out

    def resolution_lines(self, curves, th):
        """The Δt-halving check as text lines."""
        pairs = self.resolution_pairs(curves)
        if not pairs and any(c["adaptive"] for c in curves.values()):
            return ["resolution: adaptive steps under error control (per path, [model §6d]); "
                    "no Δt/2 runs"]
        if not pairs:
            return ["resolution check: no Δt/2 runs"]
        lines = ["Resolution check (Δt halved, same systems): |Δt_1/2| against the half-width "
                 "of its 95% interval; max_t |ΔF| against 2 SE at that t",
                 f"{'d':>3}{'beta':>6}{'t_1/2(dt)':>11}{'t_1/2(dt/2)':>13}{'|diff|':>9}"
                 f"{'half-width':>12}{'max|dF|':>10}{'2 SE there':>12}  verdict"]
        for k, kh in pairs:
            a, b = curves[k], curves[kh]
            t1, lo, hi = th[k].as_tuple()
            t2 = th[kh].estimate
            T = a["T"]
            Fb = np.interp(a["t"], b["t"], b["F"])
            dF = np.abs(a["F"] - Fb)
            i = int(np.argmax(dF))
            if np.isfinite(t1) and np.isfinite(t2):
                diff = abs(t1 - t2)
                hw = 0.5 * (hi - lo)
                ok = diff < hw and dF[i] < 2 * a["se"][i]
                ds, hs = f"{diff:.3f}", f"{hw:.3f}"
            else:
                ok = (not np.isfinite(t1)) and (not np.isfinite(t2)) and dF[i] < 2 * a["se"][i]
                ds, hs = "-", "-"
            lines.append(f"{k[0]:>3}{k[1]:>6g}{_fmt_t(t1, T):>11}{_fmt_t(t2, T):>13}{ds:>9}"
                         f"{hs:>12}{dF[i]:>10.4f}{2 * a['se'][i]:>12.4f}  "
                         f"{'pass' if ok else 'FAIL'}")
        return lines

    def figures(self, data, outdir, formats):
        from wflow.figures import phase as _fig

        curves = self.curves(data)
        return _fig.plot_phase(curves, self.half_times(data, curves), outdir, formats)
