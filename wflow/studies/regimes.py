r"""Clustering regimes on S²: a map over β × weight process × sign.

Every cell is one configuration (n tokens on S², H heads, per-path uniform tokens and per-path
initial weights), run for P Monte Carlo paths to time T. Per path the sweep summary holds

- the time to one cluster :math:`\tau_1 = \inf\{t : N_{\mathrm{cl}}(t) = 1\}` (``NaN``:
  censored at T). For a cell with deterministic weights (frozen, oscillating) it is an exact
  per-path event time: a companion run of the cell (task name ending ``-event``; the same
  tokens and initial weights) under adaptive steps, Dormand–Prince 5(4) at rtol = 1e-8,
  atol = 1e-10, with the event ``n_clusters ≤ 1`` located on each path's dense output to
  1e-6 and the path stopped there [model §6d]. For an OU cell (noise: adaptive runs refuse
  it) it is the first record with one cluster, :func:`time_to_one_cluster` (resolution δ).
  The column ``tau_source`` says which (``event`` or ``records``);
- the final cluster count and order parameter :math:`|\bar x|` (standard columns);
- the late-window (t ≥ T/2) mean of G² (standard column) and its decay rate
  :math:`\lambda = -\,\mathrm{d}\log G^2/\mathrm{d}t`, the least-squares slope over the late
  window, :func:`g2_decay_rate`;
- the late-window mean of the W₂ metric speed :math:`W_2(\mu_{t_k}, \mu_{t_{k-1}})/(t_k - t_{k-1})`
  (``diagnostics.w2``, POT).

Per cell the summary reports the fraction of paths with one cluster by T (Clopper–Pearson 95%
interval), the Kaplan–Meier median of :math:`\tau_1` (``scipy.stats.ecdf`` on
``CensoredData``; its 95% interval from the log-log band of the survival function;
"> T" when the survival does not fall to ½), and the means of the other numbers with their
95% Student-t intervals over paths, on the log scale for positive quantities
(:func:`wflow.analysis.intervals.mean_interval`).

Time step per cell. With :math:`\|D\|` an estimate of the spectral norm of the weights
(:func:`weight_norm`), the step is the largest :math:`\Delta t = \delta/m`, m an integer,
with :math:`\beta\|D\|\Delta t \le c` and :math:`\Delta t \le \Delta t_{\max}` (δ the record
interval); the records fall at the multiples of δ whatever Δt. A subset of cells is run
again with Δt/2 (the halving check, task names ending ``-halfdt``).
"""

from __future__ import annotations

import copy
import math

import numpy as np

from wflow.analysis.intervals import km_median_interval, mean_interval, proportion_interval
from wflow.analysis.results import mean_ci
from wflow.studies._base import Study, register_study
from wflow.sweeps.sweep import expand_grid

__all__ = ["Regimes", "time_to_one_cluster", "g2_decay_rate", "km_median", "one_cluster_fraction",
           "weight_norm", "cell_dt", "WEIGHTS", "G2_FLOOR", "EVENT_SOLVER", "is_event",
           "has_event_run"]

#: the weight families of the map: name → (weights section, init.weights)
WEIGHTS = {
    "frozen_identity": ({"process": "frozen"}, "identity"),
    "frozen_random": ({"process": "frozen"}, "symmetric_gaussian"),
    "ou0.5": ({"process": "ou", "rate": 1.0, "mean": 1.0, "noise_var": 0.5}, "identity"),
    "ou2": ({"process": "ou", "rate": 1.0, "mean": 1.0, "noise_var": 2.0}, "identity"),
    "ou8": ({"process": "ou", "rate": 1.0, "mean": 1.0, "noise_var": 8.0}, "identity"),
    "osc_shared": ({"process": "oscillating", "phase": "shared"}, "identity"),
    "osc_spread": ({"process": "oscillating", "phase": "spread"}, "identity"),
}
#: labels of the weight families in tables and figures
WEIGHT_LABELS = {"frozen_identity": "frozen I", "frozen_random": "frozen random",
                 "ou0.5": "OU g²=0.5", "ou2": "OU g²=2", "ou8": "OU g²=8",
                 "osc_shared": "osc. shared", "osc_spread": "osc. spread"}
#: G² below this is rounding (a collapsed cluster); the decay-rate fit ignores it
G2_FLOOR = 1e-20

#: the solver of the companion run that locates τ₁ as an event [model §6d]
EVENT_SOLVER = {"method": "dopri5", "adaptive": True, "rtol": 1e-8, "atol": 1e-10,
                "record_times": "geometric", "records": 20, "event": "n_clusters",
                "event_threshold": 1.0, "event_direction": "down", "event_stop": True,
                "event_tol": 1e-6}

#: (normalization, sign, β, weights) of the cells run again with Δt/2 (full mode)
HALVING_CELLS = (
    ("head", "ascent", 16.0, "frozen_identity"),
    ("head", "ascent", 1.0, "frozen_random"),
    ("head", "descent", 4.0, "frozen_identity"),
    ("head", "ascent", 4.0, "ou2"),
    ("head", "descent", 4.0, "ou8"),
    ("head", "ascent", 4.0, "osc_shared"),
    ("head", "descent", 1.0, "osc_spread"),
    ("joint", "ascent", 4.0, "frozen_random"),
)


# ---------------------------------------------------------------------------------- per path
def time_to_one_cluster(t, a, T):
    r"""Per path, :math:`\tau_1 = \min\{t_k : N_{\mathrm{cl}}(t_k) = 1\}`; ``NaN`` if no
    record has one cluster (the time is then censored at T).

    Parameters
    ----------
    t : (records,) record times.
    a : (records, P) the ``n_clusters`` series.
    T : float, the final time (unused: censoring is at T by convention).

    Returns
    -------
    (P,) float array.
    """
    t = np.asarray(t, dtype=float)
    a = np.asarray(a, dtype=float)
    if a.ndim == 1:
        a = a[:, None]
    hit = a == 1
    first = np.argmax(hit, axis=0)
    return np.where(hit.any(axis=0), t[first], np.nan)


def g2_decay_rate(t, a, T):
    r"""Per path, the decay rate of G² over the late window :math:`t \ge T/2`:

    .. math:: \lambda = -\hat b, \qquad \log G^2(t_k) \approx \hat a + \hat b\, t_k
              \quad (\text{least squares over } t_k \ge T/2,\ G^2(t_k) > G^2_{\mathrm{floor}}),

    positive when G² decays exponentially, ≈ 0 when it neither decays nor grows. ``NaN``
    with fewer than three late records above the floor :data:`G2_FLOOR` (rounding).
    """
    t = np.asarray(t, dtype=float)
    a = np.asarray(a, dtype=float)
    if a.ndim == 1:
        a = a[:, None]
    late = t >= T / 2
    out = np.full(a.shape[1], np.nan)
    for p in range(a.shape[1]):
        g = a[late, p]
        ok = np.isfinite(g) & (g > G2_FLOOR)
        if ok.sum() >= 3:
            out[p] = -np.polyfit(t[late][ok], np.log(g[ok]), 1)[0]
    return out


# ---------------------------------------------------------------------------------- per cell
def km_median(times, T, level=0.95):
    r"""Kaplan–Meier median of :math:`\tau_1` with censoring at T (``NaN`` times are censored)
    and its interval: :func:`wflow.analysis.intervals.km_median_interval` (the log-log band of
    :math:`\hat S` crossing ½; no interval below 5 paths). ``inf`` means "> T".

    Returns
    -------
    (median, low, high) floats.
    """
    return km_median_interval(times, T, level).as_tuple()


def one_cluster_fraction(times, level=0.95):
    """(fraction of paths with one cluster by T, Clopper–Pearson low, high):
    :func:`wflow.analysis.intervals.proportion_interval`."""
    times = np.asarray(times, dtype=float)
    return proportion_interval(int(np.isfinite(times).sum()), times.size, level).as_tuple()


# ---------------------------------------------------------------------------------- time step
def weight_norm(wname, d=3, H=4) -> float:
    r"""An estimate of :math:`\|D\|` (the largest spectral norm over heads) of a family.

    frozen identity: 1. frozen random (:math:`\Xi + \Xi^T`): the mean over 4000 draws
    (fixed seed) of the largest head norm. OU: :math:`|M| + \sqrt{2d}\,\sigma`,
    :math:`\sigma^2 = g^2/(2\lambda)` the stationary variance of a diagonal entry
    (:math:`\sqrt{2d}\,\sigma` the semicircle edge). Oscillating: :math:`\max_t \|P(t)\|`
    of the periodic solution (the weights start at I and relax to it).
    """
    spec, _ = WEIGHTS[wname]
    if wname == "frozen_identity":
        return 1.0
    if wname == "frozen_random":
        X = np.random.default_rng(12345).standard_normal((4000, H, d, d))
        S = X + np.swapaxes(X, -1, -2)
        return float(np.abs(np.linalg.eigvalsh(S)).max(axis=(-1, -2)).mean())
    if spec["process"] == "ou":
        sigma = math.sqrt(spec["noise_var"] / (2 * spec["rate"]))
        return abs(spec["mean"]) + math.sqrt(2 * d) * sigma
    from wflow.model.processes import Oscillating

    osc = Oscillating(d, H, spec["phase"])
    ts = np.linspace(0.0, 4 * np.pi, 800)
    return max(1.0, max(float(np.abs(np.linalg.eigvalsh(osc.periodic_solution(s))).max())
                        for s in ts))


def cell_dt(beta, norm, c, record_dt, dt_max):
    r"""``(dt, steps per record)``: :math:`\Delta t = \delta/m`, the smallest integer m with
    :math:`\beta\|D\|\Delta t \le c` and :math:`\Delta t \le \Delta t_{\max}`."""
    m = max(math.ceil(record_dt * beta * norm / c - 1e-9), math.ceil(record_dt / dt_max - 1e-9), 1)
    return record_dt / m, m


# ---------------------------------------------------------------------------------- the study
_SCALES = {
    # n, H, paths, T, betas, weights, signs, joint β slice, halving cells
    "full": dict(n=32, H=4, paths=8, T=20.0, betas=(0.25, 1.0, 4.0, 16.0), weights=tuple(WEIGHTS),
                 signs=("descent", "ascent"), joint_beta=4.0, halving=HALVING_CELLS),
    "quick": dict(n=16, H=1, paths=4, T=8.0, betas=(0.25,), weights=("frozen_identity",),
                  signs=("descent", "ascent"), joint_beta=None,
                  halving=(("head", "ascent", 0.25, "frozen_identity"),)),
}
#: β‖D‖Δt ≤ C_STEP, Δt ≤ DT_MAX, records every RECORD_DT
C_STEP, DT_MAX, RECORD_DT = 0.25, 0.02, 0.2


def cell_name(norm, sign, beta, wname, half=False, refined=False, event=False):
    return (f"regimes-{norm}-{sign}-b{beta:g}-{wname}" + ("-halfdt" if half else "")
            + ("-refdt" if refined else "") + ("-event" if event else ""))


def parse_name(name):
    """``(norm, sign, β, weights, check)`` from a task name of :func:`cell_name`; ``check`` is
    True for the runs of the halving check (``-halfdt``, and the ``-refdt`` partner of an OU
    cell), which are not cells of the map."""
    parts = name.split("-")
    return parts[1], parts[2], float(parts[3][1:]), parts[4], parts[-1] in ("halfdt", "refdt")


def is_event(name):
    """Whether the task is the adaptive companion run of a cell that locates τ₁ as an event."""
    return name.endswith("-event")


def has_event_run(wname):
    """Whether cells of weight family ``wname`` get the companion event run (deterministic
    weights: adaptive runs refuse a process with noise)."""
    return WEIGHTS[wname][0]["process"] != "ou"


def _final(t, a, T):
    a = np.asarray(a, dtype=float)
    return a[-1] if a.ndim > 1 else a[-1:]


def is_refined(name):
    """Whether the task is the Δt run with ``weights.noise_refine = 2`` of an OU halving cell:
    driven by the Brownian path of its ``-halfdt`` partner (a pathwise check)."""
    return name.endswith("-refdt")


@register_study
class Regimes(Study):
    """The regime map on S²: β × weights × sign, head normalisation (joint on one β slice).

    Full: n = 32, H = 4, 8 paths, T = 20, β ∈ {0.25, 1, 4, 16}, seven weight families, both
    signs, plus the joint slice at β = 4 and eight cells again with Δt/2. Quick: n = 16,
    H = 2, 4 paths, T = 6, β = 1, frozen identity and OU g² = 2, both signs, one halving cell.
    """

    name = "regimes"
    question = ("which clustering regimes (one cluster, metastable, mixing, periodic) does the "
                "flow on S² show over β × weights × sign?")
    quick = ("n = 16, H = 1, 4 paths, T = 8, one cell (β = 0.25, frozen D = I) in both signs and "
             "its Δt/2 rerun: ascent reaches one cluster, descent does not")
    summary_columns = (
        ("t_one_cluster", "n_clusters", time_to_one_cluster),
        ("t_event", "event_time", _final),
        ("G2_decay", "G2", g2_decay_rate),
        ("w2_speed", "metric_speed", "late"),
    )
    stats = ("frac_one", "km_median", "n_clusters", "order_parameter", "G2", "G2_decay",
             "w2_speed")

    def base(self, scale):
        s = _SCALES[scale]
        return {"model": {"d": 3, "n": s["n"], "heads": s["H"], "beta": 1.0,
                          "normalization": "head", "sign": "descent"},
                "init": {"tokens": "uniform", "per_path_tokens": True, "per_path_weights": True,
                         "seed": 7},
                "weights": {"process": "frozen"},
                "solver": {"method": "euler", "T": s["T"], "paths": s["paths"], "dt": 0.01,
                           "record_every": 10},
                "diagnostics": {"ledger": False, "clustering": True, "cluster_angle": 0.1,
                                "w2": True},
                "output": {"store_tokens": False, "checkpoint_every": 100000}}

    def cell(self, base, norm, sign, beta, wname, half=False, refined=False, event=False):
        """The configuration of one cell (Δt from :func:`cell_dt`, halved when ``half``;
        ``refined``: Δt with ``weights.noise_refine = 2``, the same Brownian path as the
        Δt/2 run of an OU cell; ``event``: the adaptive companion run of :data:`EVENT_SOLVER`,
        first step Δt, no W₂)."""
        cfg = copy.deepcopy(base)
        spec, init_w = WEIGHTS[wname]
        cfg["weights"] = dict(spec)
        cfg["init"]["weights"] = init_w
        cfg["model"].update(normalization=norm, sign=sign, beta=float(beta))
        d, H = cfg["model"]["d"], cfg["model"]["heads"]
        dt, m = cell_dt(beta, weight_norm(wname, d, H), C_STEP, RECORD_DT, DT_MAX)
        if half:
            dt, m = dt / 2, 2 * m
        cfg["solver"].update(dt=dt, record_every=m)
        if refined:
            cfg["weights"]["noise_refine"] = 2
        if event:
            cfg["solver"].update(EVENT_SOLVER)
            cfg["solver"].pop("record_every", None)
            cfg["diagnostics"]["w2"] = False
        return expand_grid(cfg, {}, name=cell_name(norm, sign, beta, wname, half, refined,
                                                   event))

    def _with_event(self, base, norm, sign, beta, w):
        tasks = self.cell(base, norm, sign, beta, w)
        if has_event_run(w):
            tasks += self.cell(base, norm, sign, beta, w, event=True)
        return tasks

    def variants(self, base, scale):
        s = _SCALES[scale]
        tasks = []
        for sign in s["signs"]:
            for beta in s["betas"]:
                for w in s["weights"]:
                    tasks += self._with_event(base, "head", sign, beta, w)
        if s["joint_beta"] is not None:
            for sign in s["signs"]:
                for w in s["weights"]:
                    tasks += self._with_event(base, "joint", sign, s["joint_beta"], w)
        for norm, sign, beta, w in s["halving"]:
            tasks += self.cell(base, norm, sign, beta, w, half=True)
            if WEIGHTS[w][0].get("process") == "ou":  # the pathwise partner of the Δt/2 run
                tasks += self.cell(base, norm, sign, beta, w, refined=True)
        return tasks

    # ------------------------------------------------------------------------- summary
    def cell_stats(self, data, point, records=False):
        """The numbers of one cell: ``{stat: (value, low, high)}`` (95% intervals); τ₁ from
        :meth:`tau` (``records``: from the records whatever the cell)."""
        T = float(data.config(point)["solver"]["T"])
        tau = self.tau(data, point, records)[0]
        out = {"frac_one": one_cluster_fraction(tau), "km_median": km_median(tau, T)}
        for k in ("n_clusters", "order_parameter", "G2", "G2_decay", "w2_speed"):
            iv = mean_interval(data.column(k, point).astype(float))  # log-scale t if > 0
            out[k] = (iv.estimate, iv.low, iv.high)
        return out

    @staticmethod
    def tau(data, point, records=False):
        """``(τ₁ per path, source)``: the event times of the cell's ``-event`` companion run
        when it has one (``"event"``), else (or with ``records``) the first record with one
        cluster (``"records"``); NaN: censored at T."""
        names = {n for n, _ in data.tasks}
        if point + "-event" in names and not records:
            tau = data.column("t_event", point + "-event").astype(float)
            T = float(data.config(point)["solver"]["T"])
            return np.where(tau <= T, tau, np.nan), "event"
        return data.column("t_one_cluster", point).astype(float), "records"

    def table(self, data):
        """One row per task: the cell, Δt, β‖D‖Δt and every statistic with its interval."""
        cols = ["point", "normalization", "sign", "beta", "weights", "halved", "refined", "dt",
                "c_step", "paths", "T", "tau_source"]
        for s in self.stats:
            cols += [s, f"{s}_lo", f"{s}_hi"]
        table = {c: [] for c in cols}
        for point, cfg in data.tasks:
            if is_event(point):  # read by its cell (tau)
                continue
            norm, sign, beta, w, half = parse_name(point)
            st = self.cell_stats(data, point)
            dt = float(cfg["solver"]["dt"])
            row = [point, norm, sign, beta, w, half, is_refined(point), dt,
                   beta * weight_norm(w, cfg["model"]["d"], cfg["model"]["heads"]) * dt,
                   int(cfg["solver"]["paths"]), float(cfg["solver"]["T"]),
                   self.tau(data, point)[1]]
            for s in self.stats:
                row += list(st[s])
            for c, v in zip(cols, row):
                table[c].append(v)
        return table

    def summarize(self, data):
        """The map (one line per cell) and the halving check, as text and a column table."""
        table = self.table(data)
        fmt = _fmt_stat
        lines = ["Regime map on S² (95% intervals: fraction Clopper–Pearson, KM median "
                 "log-log band, others Student-t over paths, log scale where positive); "
                 "τ₁ from: e = the exact event time of the cell's adaptive companion run "
                 "(dopri5, rtol 1e-8), r = the first record with one cluster (OU cells)",
                 f"{'norm':<6}{'sign':<8}{'beta':>6} {'weights':<15}{'dt':>9}{'bDdt':>6}"
                 f"{'frac one':>18}{'KM median':>22}{'clusters':>18}{'order':>20}"
                 f"{'G2':>26}{'G2 decay':>22}{'W2 speed':>22}"]
        rows = range(len(table["point"]))
        for i in rows:
            if table["halved"][i]:
                continue
            lines.append(f"{table['normalization'][i]:<6}{table['sign'][i]:<8}"
                         f"{table['beta'][i]:>6g} {WEIGHT_LABELS[table['weights'][i]]:<15}"
                         f"{table['dt'][i]:>9.2g}{table['c_step'][i]:>6.2f}"
                         + "".join(fmt(table, s, i) for s in self.stats)
                         + f"  τ₁: {table['tau_source'][i][0]}")
        lines += ["", "Halving check: the same number with dt/2 (|change| vs the interval "
                      "half-width of the dt run)"]
        for i in rows:
            if not table["halved"][i] or table["refined"][i]:
                continue
            key = table["point"][i][:-len("-halfdt")]
            j = table["point"].index(key) if key in table["point"] else None
            if j is None:
                continue
            lines.append(f"{key}:")
            # τ₁ of both runs from their records (the Δt/2 run has no event companion)
            rec = (self.cell_stats(data, key, records=True)
                   if table["tau_source"][j] == "event" else {})
            for s in self.stats:
                a, b = table[s][j], table[s][i]
                hw = (table[f"{s}_hi"][j] - table[f"{s}_lo"][j]) / 2
                if s in rec and s in ("frac_one", "km_median"):
                    a, hw = rec[s][0], (rec[s][2] - rec[s][1]) / 2
                ok = _within(a, b, hw)
                lines.append(f"    {s:<16}{a:>12.4g} -> {b:>12.4g}   change {b - a:>11.3g}   "
                             f"interval half-width {hw:>10.3g}   {ok}")
            ref = key + "-refdt"
            if ref in table["point"]:
                lines += self.pathwise_lines(data, ref, table["point"][i], table,
                                             table["point"].index(ref))
        return "\n".join(lines), table

    #: per-path columns compared path by path in the pathwise check
    PATHWISE = ("n_clusters", "order_parameter", "G2", "G2_decay", "w2_speed")

    def pathwise_lines(self, data, ref, half, table, k):
        r"""The pathwise halving check of an OU cell: the Δt run with ``noise_refine = 2`` and
        the Δt/2 run share every Brownian increment, so per path
        :math:`\delta_p = y_p(\Delta t/2) - y_p(\Delta t)` is the time-step error alone; its mean
        ± 95% t-interval, against the half-width of the Δt run's interval over paths."""
        out = [f"  pathwise (same Brownian path: {ref} vs the dt/2 run; mean paired change "
               "± 95% interval, vs the interval half-width of the dt run)"]
        for s in self.PATHWISE:
            a = data.column(s, ref).astype(float)
            b = data.column(s, half).astype(float)
            diff = b - a
            m = float(np.nanmean(diff)) if np.isfinite(diff).any() else math.nan
            h = mean_ci(diff)
            hw = (table[f"{s}_hi"][k] - table[f"{s}_lo"][k]) / 2
            ok = _within(0.0, m, hw)
            out.append(f"    {s:<16}{m:>12.3g} ± {h:<10.2g}  max |change| "
                       f"{np.nanmax(np.abs(diff)) if np.isfinite(diff).any() else math.nan:>10.3g}"
                       f"   interval half-width {hw:>10.3g}   {ok}")
        return out

    def figures(self, data, outdir, formats):
        from wflow.figures import regimes as fig

        return fig.draw(self.table(data), outdir, formats, labels=WEIGHT_LABELS)


def _within(a, b, hw):
    if not (np.isfinite(a) and np.isfinite(b)):
        return "same" if (a == b or (np.isnan(a) and np.isnan(b))) else "differs (not finite)"
    if not np.isfinite(hw):
        return "no interval"
    return "ok" if abs(b - a) < hw or a == b else "EXCEEDS"


def _fmt_stat(table, s, i):
    v, lo, hi = table[s][i], table[f"{s}_lo"][i], table[f"{s}_hi"][i]
    if s == "km_median":
        txt = "> T" if math.isinf(v) else f"{v:.3g}"
        if math.isnan(lo) or math.isnan(hi):
            return f"{txt + ' (no interval)':>22}"
        hi_t = "> T" if math.isinf(hi) else f"{hi:.3g}"
        lo_t = "> T" if math.isinf(lo) else f"{lo:.3g}"
        return f"{txt + ' [' + lo_t + ', ' + hi_t + ']':>22}"
    if s == "frac_one":
        return f"{f'{v:.2f} [{lo:.2f}, {hi:.2f}]':>18}"
    return f"{f'{v:.3g} ± {(hi - lo) / 2:.2g}':>22}"
