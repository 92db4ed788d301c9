r"""JKO steps against explicit Runge–Kutta steps on exact gradient flows [model §7].

Two frozen-weight cases where the flow is exactly a Wasserstein gradient flow (so JKO
converges to it), descent (σ = −1, the energy E is the Lyapunov functional), uniform tokens:

- ``clustering``: ``joint`` normalisation, H = 4 frozen symmetric Gaussian weights
  (:math:`D_h = \Xi_h + \Xi_h^T`, seed 2): the cloud collapses into a few clusters
  (:func:`wflow.model.diagnostics.n_clusters`, angle 0.1, at T);
- ``spreading`` (non-clustering): one head, D = I: the tokens repel and spread over the sphere
  (every token its own cluster at T).

For each case and each of Euler, Heun, RK4 and JKO over Δt, the error at T

.. math:: e(\Delta t) = \max_i d_S\big(x_i(T), x_i^{\mathrm{ref}}(T)\big)

against RK4 at :math:`\Delta t_{\mathrm{ref}}` (:attr:`Jko.ref_dt`), its fitted order
(least-squares slope of log e on log Δt over the asymptotic errors, below :data:`ASYMPTOTIC`),
the time of each run's stepping loop (the file's ``elapsed_last_invocation``), and the
Lyapunov curves :math:`E(X_k)` at the largest Δt, where Euler's energy may rise and JKO's
cannot (the JKO inequality :math:`E(X_{k+1}) + \mathrm{cost}/(2\tau) \le E(X_k)`).
The resolution check of the reference: RK4 at :math:`2\Delta t_{\mathrm{ref}}` against it.
Every run records clustering off and skips the per-step W₂ coupling check of JKO
(``diagnostics.max_pairwise_n = 2``), so the wall times compare the steppers.
"""

from __future__ import annotations

import copy

import numpy as np

from wflow.studies._base import Study, register_study
from wflow.sweeps.sweep import expand_grid

__all__ = ["Jko", "jko_data"]

JKO_BASE = {
    "model": {"d": 3, "n": 32, "beta": 1.0, "heads": 4, "normalization": "joint",
              "sign": "descent"},
    "init": {"tokens": "uniform", "weights": "symmetric_gaussian", "seed": 2},
    "weights": {"process": "frozen"},
    "solver": {"method": "euler", "dt": 0.1, "T": 4.0, "record_every": 1, "paths": 1},
    "diagnostics": {"ledger": False, "clustering": False, "max_pairwise_n": 2},
    "output": {"store_tokens": True},
}

CASES = {
    "clustering": {},
    "spreading": {"model": {"heads": 1, "normalization": "head"},
                  "init": {"weights": "identity"}},
}
METHODS = ("euler", "heun", "rk4", "jko")
#: errors (rad) below which a run counts as asymptotic for the fitted order
ASYMPTOTIC = 0.2


def _merge(base, over):
    cfg = copy.deepcopy(base)
    for sec, vals in over.items():
        cfg.setdefault(sec, {}).update(vals)
    return cfg


@register_study
class Jko(Study):
    """Euler, Heun, RK4 and JKO over Δt on a clustering and a spreading exact gradient flow.

    Full: n = 32, T = 4, Δt ∈ {1, 1/2, …, 1/32}, reference RK4 Δt = 1/1024 (check 1/512).
    Quick: n = 12, T = 2, Δt ∈ {1, 1/2}, reference RK4 Δt = 1/64 (no check).
    """

    name = "jko"
    question = ("how do JKO steps compare with Euler, Heun and RK4 (error at T per Δt and per "
                "wall-second; energy at large steps) on exact gradient flows?")

    quick = ("n = 12, T = 2, Δt ∈ {1, 1/2}, reference RK4 Δt = 1/64, no reference check "
             "(JKO's energy never rises; first order)")

    def base(self, scale):
        cfg = copy.deepcopy(JKO_BASE)
        if scale == "quick":
            cfg["model"]["n"] = 12
            cfg["solver"]["T"] = 2.0
        return cfg

    @staticmethod
    def dts(scale):
        return (1.0, 0.5) if scale == "quick" else tuple(2.0 ** -k for k in range(6))

    @staticmethod
    def ref_dt(scale):
        return 2.0 ** -6 if scale == "quick" else 2.0 ** -10

    def variants(self, base, scale):
        T = base["solver"]["T"]
        tasks = []
        for case, over in CASES.items():
            cfg0 = _merge(base, over)
            runs = [("ref", "rk4", self.ref_dt(scale))]
            if scale == "full":
                runs.append(("refcheck", "rk4", 2 * self.ref_dt(scale)))
            runs += [(m, m, dt) for dt in self.dts(scale) for m in METHODS]
            for tag, method, dt in runs:
                cfg = copy.deepcopy(cfg0)
                steps = int(round(T / dt))
                # the energy curves: every step for Δt ≥ 1/2; else t = 0 and T only (records
                # cost file writes that would swamp the explicit steps' loop times); the
                # reference 64 records
                every = 1 if dt >= 0.5 else (max(1, steps // 64) if tag == "ref" else steps)
                cfg["solver"].update(method=method, dt=dt, record_every=every)
                tasks += expand_grid(cfg, {}, name=f"{case}-{tag}-dt={dt:g}")
        return tasks

    def summarize(self, data):
        return jko_summary(jko_data(data))

    def figures(self, data, outdir, formats):
        from wflow.figures import jko as figs

        return figs.draw(jko_data(data), outdir, formats)


# ---------------------------------------------------------------------------------- analysis
def jko_data(data):
    r"""``{case: {"ref": (t, X, E), "refcheck": error, "clusters_0", "clusters_T", "runs": {method:
    [(dt, error, wall, t, E, clusters_T)]}}}`` from the result files; ``wall`` is the time in
    the stepping loop (the file's ``elapsed_last_invocation``: steps and records, not the set-up
    or the file; else the sweep summary's ``wall_time``); X (records, n, d) of path 0, E the
    energy (records,), clusters_T the
    number of clusters (angle 0.1) at T."""
    from wflow.model.diagnostics import geodesic, n_clusters
    from wflow.storage.io import read

    if getattr(data, "_jko_data", None) is not None:
        return data._jko_data
    loaded = {}
    for path, (name, _) in zip(data.paths, data.tasks):
        cfg, arr, attrs = read(path)
        # the time in the stepping loop (steps and records; not the set-up, not the file)
        wall = attrs.get("elapsed_last_invocation")
        if wall is None and "wall_time" in data.summary:
            wall = np.sum(data.column("wall_time", name))
        case, tag, _ = name.split("-", 2)
        loaded[(case, tag, float(cfg["solver"]["dt"]))] = (
            np.asarray(arr["t"], float), np.asarray(arr["X"], float)[:, 0],
            np.asarray(arr["energy"], float)[:, 0], float(np.nan if wall is None else wall))
    out = {}
    for case in CASES:
        refs = {k: v for k, v in loaded.items() if k[0] == case and k[1] == "ref"}
        if not refs:
            continue
        (_, _, rdt), (t, X, E, _) = next(iter(refs.items()))
        XT = X[-1]
        chk = [v for k, v in loaded.items() if k[0] == case and k[1] == "refcheck"]
        res = {"ref": (t, X, E), "ref_dt": rdt,
               "refcheck": float(np.max(geodesic(chk[0][1][-1], XT))) if chk else np.nan,
               "clusters_T": float(n_clusters(XT[None])[0]),
               "clusters_0": float(n_clusters(X[:1])[0]), "runs": {}}
        for (c, tag, dt), (tt, XX, EE, wall) in sorted(loaded.items()):
            if c != case or tag not in METHODS:
                continue
            err = float(np.max(geodesic(XX[-1], XT)))
            res["runs"].setdefault(tag, []).append(
                (dt, err, wall, tt, EE, float(n_clusters(XX[-1:])[0])))
        for m in res["runs"]:
            res["runs"][m].sort(key=lambda r: -r[0])
        out[case] = res
    data._jko_data = out
    return out


def observed_order(dts, errs):
    """Least-squares slope of log e on log Δt and its standard error."""
    x, y = np.log(np.asarray(dts)), np.log(np.asarray(errs))
    A = np.vstack([x, np.ones_like(x)]).T
    coef, rss, *_ = np.linalg.lstsq(A, y, rcond=None)
    dof = len(x) - 2
    se = float(np.sqrt(rss[0] / dof / np.sum((x - x.mean()) ** 2))) if dof > 0 and rss.size else np.nan
    return float(coef[0]), se


def max_rise(E):
    """The largest step-to-step increase of the energy, :math:`\\max_k (E_{k+1} - E_k)`."""
    return float(np.max(np.diff(E)))


def jko_summary(d):
    """``(text, table)``: errors at T per case, method and Δt, wall time, the fitted orders,
    the energy's largest rise per step at the largest Δt, and the reference's check."""
    table = {k: [] for k in ("case", "method", "dt", "error_T", "wall_time", "order",
                             "order_se", "max_energy_rise", "clusters_T")}
    lines = []
    for case, res in d.items():
        lines.append(f"{case}: error at T = max_i d_S(x_i(T), x_i^ref(T)); reference RK4 "
                     f"Δt = {res['ref_dt']:g}, its check (RK4 at 2Δt_ref) {res['refcheck']:.2e}; "
                     f"clusters (angle 0.1) {res['clusters_0']:.0f} at t = 0, "
                     f"{res['clusters_T']:.0f} at T (n = {res['ref'][1].shape[1]})")
        dts = [r[0] for r in next(iter(res["runs"].values()))]
        lines.append(f"{'method':<8}" + "".join(f"{'Δt=' + format(x, 'g'):>11}" for x in dts)
                     + f"{'order':>13}{'max rise E, Δt=' + format(max(dts), 'g'):>20}")
        for m, runs in res["runs"].items():
            errs = [r[1] for r in runs]
            floor = 10 * res["refcheck"] if np.isfinite(res["refcheck"]) else 0.0
            ok = [r for r in runs if floor < r[1] < ASYMPTOTIC]
            order, se = observed_order([r[0] for r in ok], [r[1] for r in ok]) \
                if len(ok) >= 2 else (np.nan, np.nan)
            rise = max_rise(runs[0][4])
            lines.append(f"{m:<8}" + "".join(f"{e:>11.2e}" for e in errs)
                         + f"{order:>8.2f}±{se:<4.2f}{rise:>20.2e}")
            for dt, err, wall, _, E, op in runs:
                for k, v in zip(table, (case, m, dt, err, wall, order, se,
                                        max_rise(E), op)):
                    table[k].append(v)
        lines.append(f"{'wall s':<8}" + "".join(" " * 11 for _ in dts))
        for m, runs in res["runs"].items():
            lines.append(f"{m:<8}" + "".join(f"{r[2]:>11.3g}" for r in runs))
        lines.append("")
    lines.append("order: slope of log e on log Δt over the Δt whose error lies between 10× the "
                 f"reference check and {ASYMPTOTIC} rad (asymptotic), ± its standard error; "
                 "wall s: time in the stepping loop; max rise: max_k E_{k+1} − E_k "
                 "(> 0: the energy rose at some step)")
    return "\n".join(lines), table
