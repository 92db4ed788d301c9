r"""Particles against the mean-field PDE on :math:`S^1`.

The same initial law, the von Mises density
:math:`\rho_0(\theta) = e^{\kappa\cos(\theta - \pi/2)}/(2\pi I_0(\kappa))` about :math:`e_2`
(``init.tokens = "vmf"``: :func:`wflow.model.density.initial_density` for the density, the
von Mises–Fisher sampler of :class:`wflow.engine.run.Simulation` for the particles, both about
the last axis), is moved

- as a density by the finite-volume solver [model §5b] at N and 2N cells (the reference
  :math:`\rho_h(t)` is the 2N solution; the N–2N difference is its error estimate), and
- as n i.i.d. particles, :math:`n \in \{100, 200, \dots\}`, one independent sample per Monte
  Carlo path (``init.per_path_tokens``; n number k takes paths kP … kP + P − 1 of the
  ensemble of ``init.seed`` through ``init.first_path``, so the samples of different n are
  independent too).

At each record t the study measures, per path,

.. math::
    W_2\big(\mu^n_t, \rho_h(t)\big)\quad(\text{the exact circle } W_2,\ \texttt{ot.wasserstein\_circle}),
    \qquad \Delta E = E[\mu^n_t] - E_h[\rho_h(t)],

and fits :math:`\overline{W_2}(n) \approx C n^{a}` by least squares on log–log axes, with a 95%
jackknife Student-t interval of a over the seeds (each n independent:
:func:`wflow.analysis.intervals.power_law_interval` with ``paired=False``). For i.i.d. samples of
a density bounded below on the circle, :math:`\mathbb E W_2(\mu^n_0, \rho_0) \asymp n^{-1/2}`;
stability of the flow with a smooth kernel carries the rate to t > 0 (before clustering).
The energy of a non-uniform law has a non-degenerate first Hoeffding projection, so
:math:`|\Delta E| \asymp n^{-1/2}` too, plus the :math:`O(1/n)` diagonal bias
:math:`(e^{\beta} - 2\beta E)/(2\beta n)` (D = I, H = 1) of the V-statistic.

**The density as a measure.** :math:`\rho_h` is taken piecewise constant on the cells and
represented by M equally spaced sub-points per cell with masses :math:`\rho_k h/M`
(:func:`density_points`). Moving each sub-cell's mass to its midpoint costs at most
:math:`h/(2M)` per unit mass, so this representation is within :math:`W_\infty \le h/(2M)`
(:math:`W_2 = h/(M\sqrt{12})` exactly for a constant density) of :math:`\rho_h`
(``MeanField.subpoints``, reported in the summary).

**Choices (full scale).** d = 2, H = 1, D = I frozen (``init.weights = "identity"``), β = 1,
σ = +1 (``sign = "ascent"``: the clustering direction of the transformer), κ = 1, T = 2: the
circular standard deviation of :math:`\rho_t` falls from 1.27 to 0.64 and
:math:`\max\rho` grows from 0.34 to 1.0, smooth on the scale of the mesh (h = 2π/2048) and
well before clustering (:math:`\max\rho \approx 6` at t = 4). Particles: n ∈ {100, …,
51 200} (doubling), 8 seeds per n but 4 at n = 51 200 (the particle kernel is
:math:`O(Pn^2)`: one path of 51 200 costs as much as 16 of 12 800), RK4 with Δt = 0.5
(checked against Δt/2 on the same sample at the largest n, one path); density: N ∈ {1024,
2048}, SSP-RK3 with CFL-limited substeps.
"""

from __future__ import annotations

import copy

import numpy as np

from wflow.analysis.intervals import power_law_interval
from wflow.analysis.results import load_source, mean_ci
from wflow.studies._base import Study, register_study
from wflow.sweeps.sweep import expand_grid

__all__ = ["MeanField", "circle_angles", "density_points", "w2_circle", "meanfield_errors",
           "fit_exponent", "meanfield_summary"]

MEANFIELD_BASE = {
    "model": {"d": 2, "n": 100, "beta": 1.0, "heads": 1, "normalization": "head",
              "sign": "ascent"},
    "init": {"tokens": "vmf", "kappa": 1.0, "weights": "identity", "seed": 0,
             "per_path_tokens": True},
    "weights": {"process": "frozen"},
    "solver": {"method": "rk4", "dt": 0.5, "T": 2.0, "record_every": 1, "paths": 8},
    "diagnostics": {"ledger": False, "clustering": False},
    "output": {"store_tokens": True},
}

#: the particle counts n and seeds (paths) per n (``seeds_at`` overrides ``seeds`` at some n),
#: the density meshes (N, 2N), the n of the Δt/2 check (on ``dt_check_paths`` of its samples)
SCALE_GRID = {
    "quick": {"n": (100, 200, 400, 800), "seeds": 8, "cells": (128, 256), "T": 0.5,
              "dt_check": 400, "dt_check_paths": 8, "seeds_at": {}},
    "full": {"n": (100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 51200), "seeds": 8,
             "seeds_at": {51200: 4}, "cells": (1024, 2048), "T": 2.0, "dt_check": 25600,
             "dt_check_paths": 1},
}


# ---------------------------------------------------------------------------------- W2 on S1
def circle_angles(X) -> np.ndarray:
    r""":math:`\theta = \operatorname{atan2}(x_2, x_1) \bmod 2\pi` of points (..., 2)."""
    X = np.asarray(X, dtype=float)
    return np.mod(np.arctan2(X[..., 1], X[..., 0]), 2 * np.pi)


def density_points(rho, M=8):
    r"""The piecewise-constant density of cell averages ``rho`` (N,) on the uniform circle grid
    as weighted points: M sub-points per cell at :math:`\theta = (k + (j + \tfrac12)/M)h`, mass
    :math:`\rho_k h/M` (normalised to total mass 1). Within :math:`W_\infty \le h/(2M)` of the
    piecewise-constant density.

    Returns
    -------
    theta : (N·M,) angles in [0, 2π)
    weights : (N·M,) masses summing to 1
    """
    rho = np.asarray(rho, dtype=float)
    N = rho.size
    h = 2 * np.pi / N
    theta = h * (np.arange(N)[:, None] + (np.arange(M)[None, :] + 0.5) / M)
    w = np.repeat(rho * h / M, M)
    return theta.ravel(), w / w.sum()


def w2_circle(theta_u, theta_v, w_u=None, w_v=None):
    r"""The exact quadratic Wasserstein distance on the unit circle (arc-length cost),

    .. math:: W_2(\mu, \nu)^2 = \inf_{\alpha\in\mathbb R}\int_0^1
        \big|F_\mu^{-1}(q) - (F_\nu - \alpha)^{-1}(q)\big|^2\,dq

    in radians, by ``ot.wasserstein_circle`` (p = 2, the binary search of Hundrieser, Klatt
    and Munk, stopped at 1e-9 in the shift α) on the coordinates :math:`\theta/2\pi \in [0, 1)`.

    ``theta_u`` (n,) gives a float; (B, n) gives B distances (B measures against the one
    ``theta_v`` (m,), or against B rows of a (B, m) ``theta_v``) in one batched call.
    """
    from wflow.model.diagnostics import circle_w2_squared

    tu = np.asarray(theta_u, dtype=float)
    tv = np.asarray(theta_v, dtype=float)
    batched = tu.ndim == 2
    if not batched:
        tu = tu[None]
    B = tu.shape[0]
    tv = np.broadcast_to(tv, (B, tv.shape[-1]))

    def weights(w, m):
        if w is None:
            return None
        w = np.broadcast_to(np.asarray(w, dtype=float), (B, m))
        return (w / w.sum(axis=1, keepdims=True)).T.copy()

    u = np.mod(tu / (2 * np.pi), 1.0).T.copy()  # POT: (n, B)
    v = np.mod(tv / (2 * np.pi), 1.0).T.copy()
    loss = circle_w2_squared(u, v, weights(w_u, tu.shape[1]), weights(w_v, tv.shape[1]))
    d = 2 * np.pi * np.sqrt(np.maximum(loss.reshape(B), 0.0))
    return d if batched else float(d[0])


# ---------------------------------------------------------------------------------- the study
def _pname(n, half=False):
    return f"{'half-' if half else ''}particles-n={n}"


@register_study
class MeanField(Study):
    """n particles against the S¹ density solver: W₂ and energy error in n, fitted rate.

    Full: n ∈ {100, …, 51 200} (8 seeds each, 4 at 51 200), T = 2, Δt = 0.5, density at
    N ∈ {1024, 2048}, the particle Δt/2 check at n = 51 200 (one path). Quick:
    n ∈ {100, …, 800}, T = 0.5, N ∈ {128, 256}, check at n = 400.
    """

    name = "meanfield"
    question = ("how fast do n particles converge to the mean-field PDE on S¹ (W₂ and energy "
                "error against the density solver, rate in n with its interval)?")
    quick = ("n ∈ {100, …, 800} × 8 seeds, T = 0.5, density N ∈ {128, 256} (the W₂ exponent is "
             "near −1/2 already)")
    #: sub-points per cell of the density as a measure (:func:`density_points`)
    subpoints = 8

    def base(self, scale):
        cfg = copy.deepcopy(MEANFIELD_BASE)
        g = SCALE_GRID[scale]
        cfg["solver"]["T"] = g["T"]
        cfg["solver"]["paths"] = g["seeds"]
        return cfg

    def variants(self, base, scale):
        g = SCALE_GRID[scale]
        P = int(base["solver"]["paths"])
        tasks = []
        for N in g["cells"]:
            c = copy.deepcopy(base)
            c["solver"].update(representation="density", method="ssprk3", paths=1)
            c["init"].pop("per_path_tokens", None)
            c["density"] = {"cells": int(N)}
            tasks += expand_grid(c, {}, name=f"density-N={N}")
        first = int(base["init"].get("first_path", 0))
        for n in g["n"]:
            c = copy.deepcopy(base)
            c["model"]["n"] = int(n)
            Pn = int(g.get("seeds_at", {}).get(n, P))
            c["solver"]["paths"] = Pn
            # independent across n: the next Pn Monte Carlo paths of the ensemble of
            # init.seed (each path its own X0 stream), so no two n share a sample
            c["init"]["first_path"] = first
            first += P  # the offsets do not depend on seeds_at (smaller n keep their samples)
            tasks += expand_grid(c, {}, name=_pname(n))
            if n == g["dt_check"]:  # the same samples at Δt/2: the particles' time error
                h = copy.deepcopy(c)
                h["solver"]["dt"] = c["solver"]["dt"] / 2
                h["solver"]["record_every"] = 2 * c["solver"]["record_every"]
                h["solver"]["paths"] = min(Pn, int(g.get("dt_check_paths", Pn)))
                tasks += expand_grid(h, {}, name=_pname(n, half=True))
        return tasks

    def summarize(self, data):
        return meanfield_summary(meanfield_errors(data, self.subpoints))

    def figures(self, data, outdir, formats):
        from wflow.figures import meanfield as figs

        res = meanfield_errors(data, self.subpoints)
        return figs.draw(res, fit_table(res), outdir, formats)


# ---------------------------------------------------------------------------------- analysis
def meanfield_errors(data, M=8):
    r"""Every measured error, from the result files.

    Returns
    -------
    dict with ``t`` (records,), ``n`` (K,) sorted, per n ``w2[n]``, ``dE[n]`` (records, P)
    (:math:`W_2(\mu^n_t, \rho_h(t))` and :math:`E[\mu^n_t] - E_h(t)` against the finest mesh),
    ``mesh`` {"N", "w2" (records,), "dE" (records,)} (coarse against fine mesh),
    ``dt_check`` {"n", "max_disp" (records,), "w2" (records, P)} (Δt against Δt/2, same
    samples), ``h_fine``, ``subpoints``, ``config``.
    """
    if getattr(data, "_meanfield", None) is not None and data._meanfield[0] == M:
        return data._meanfield[1]
    dens, parts, half = {}, {}, {}
    cfg0 = None
    for path, (name, _) in zip(data.paths, data.tasks):
        cfg, arr = load_source(path)
        t = np.asarray(arr["t"], float)
        E = np.asarray(arr["energy"], float)
        if name.startswith("density-"):
            dens[int(cfg["density"]["cells"])] = (t, np.asarray(arr["rho"], float)[:, 0], E[:, 0])
        elif name.startswith("half-"):
            half[int(cfg["model"]["n"])] = (t, np.asarray(arr["X"], float))
        else:
            parts[int(cfg["model"]["n"])] = (t, np.asarray(arr["X"], float), E)
            cfg0 = cfg
    Ns = sorted(dens)
    tf, rho_f, E_f = dens[Ns[-1]]
    ref = [density_points(rho_f[r], M) for r in range(len(tf))]
    out = {"t": tf, "n": np.array(sorted(parts)), "w2": {}, "dE": {}, "subpoints": M,
           "h_fine": 2 * np.pi / Ns[-1], "N_fine": Ns[-1], "config": cfg0}
    for n, (t, X, E) in sorted(parts.items()):
        if not np.allclose(t, tf):
            raise ValueError(f"meanfield: the records of n = {n} and of the density differ")
        R = X.shape[0]
        out["w2"][n] = np.array([w2_circle(circle_angles(X[r]), ref[r][0], None, ref[r][1])
                                 for r in range(R)])  # (R, P)
        out["dE"][n] = E - E_f[:, None]
    if len(Ns) >= 2:
        _, rho_c, E_c = dens[Ns[-2]]
        out["mesh"] = {"N": Ns[-2], "E": E_f,
                       "w2": np.array([w2_circle(c[0], ref[r][0], c[1], ref[r][1])
                                       for r, c in enumerate(density_points(x, M)
                                                             for x in rho_c)]),
                       "dE": np.abs(E_c - E_f)}
    for n, (_t, Xh) in half.items():
        X = parts[n][1][:, : Xh.shape[1]]  # the check's paths are the first of the run's
        cross = X[..., 0] * Xh[..., 1] - X[..., 1] * Xh[..., 0]
        disp = np.arctan2(np.abs(cross), np.sum(X * Xh, axis=-1))  # (R, P, n)
        out["dt_check"] = {"n": n, "max_disp": disp.max(axis=(1, 2)),
                           "w2": np.array([w2_circle(circle_angles(X[r]), circle_angles(Xh[r]))
                                           for r in range(X.shape[0])])}
    data._meanfield = (M, out)
    return out


def fit_exponent(n, samples, level=0.95, seed=0):
    r"""The exponent a of :math:`\bar y(n) \approx C n^{a}` (least squares of
    :math:`\log\bar y` on :math:`\log n`, :math:`\bar y` the mean over seeds) and its 95%
    jackknife Student-t interval, each n's seeds independent:
    :func:`wflow.analysis.intervals.power_law_interval` with ``paired=False`` (``seed`` is
    unused: no resampling).

    Parameters
    ----------
    n : (K,) particle counts
    samples : list of K arrays of positive values (one per seed)

    Returns
    -------
    a, C, (lo, hi)
    """
    fit = power_law_interval(n, [np.asarray(s, dtype=float) for s in samples], level,
                             paired=False, unit="seeds")
    return fit.estimate, fit.extra["a"], (fit.low, fit.high)


def fit_table(res, times=None):
    """Per record time: the W₂ and |ΔE| exponents ``{t: {"w2": (a, C, ci), "dE": (a, C, ci)}}``."""
    out = {}
    n = res["n"]
    for r, t in enumerate(res["t"]):
        if times is not None and not np.any(np.isclose(t, times)):
            continue
        out[float(t)] = {
            "w2": fit_exponent(n, [res["w2"][k][r] for k in n]),
            "dE": fit_exponent(n, [np.abs(res["dE"][k][r]) for k in n]),
        }
    return out


def meanfield_summary(res):
    """``(text, table)``: per n and t the mean W₂ and |ΔE| with 95% t-intervals over seeds, the
    signed mean ΔE, the fitted exponents with bootstrap intervals, the mesh and Δt checks."""
    fits = fit_table(res)
    t = res["t"]
    cfg = res["config"] or {}
    m, ini = cfg.get("model", {}), cfg.get("init", {})
    table = {k: [] for k in ("n", "t", "seeds", "w2_mean", "w2_ci95", "absdE_mean",
                             "absdE_ci95", "dE_mean")}
    lines = [f"particles (n, {len(res['w2'][res['n'][0]][0])} seeds per n) against the density "
             f"solver at N = {res['N_fine']} on S^1; beta = {m.get('beta')}, H = {m.get('heads')}, "
             f"D = I frozen, sign = {m.get('sign')}, von Mises kappa = {ini.get('kappa')}",
             "W2: exact circle W2 (ot.wasserstein_circle) to the piecewise-constant density "
             f"({res['subpoints']} sub-points per cell: representation error <= h/(2M) = "
             f"{res['h_fine'] / (2 * res['subpoints']):.2e} rad); dE = E[particles] - E_h; "
             "± : 95% t-interval over seeds",
             "",
             f"{'n':>7}{'t':>6}{'W2 mean':>12}{'± 95%':>10}{'|dE| mean':>12}{'± 95%':>10}"
             f"{'dE mean':>12}{'W2·sqrt(n)':>12}"]
    for n in res["n"]:
        W, dE = res["w2"][n], res["dE"][n]
        for r, tt in enumerate(t):
            w, a = W[r], np.abs(dE[r])
            row = dict(n=int(n), t=float(tt), seeds=w.size, w2_mean=float(w.mean()),
                       w2_ci95=mean_ci(w), absdE_mean=float(a.mean()), absdE_ci95=mean_ci(a),
                       dE_mean=float(dE[r].mean()))
            for k, v in row.items():
                table[k].append(v)
            lines.append(f"{n:>7d}{tt:>6.2f}{row['w2_mean']:>12.4e}{row['w2_ci95']:>10.2e}"
                         f"{row['absdE_mean']:>12.4e}{row['absdE_ci95']:>10.2e}"
                         f"{row['dE_mean']:>12.3e}{row['w2_mean'] * np.sqrt(n):>12.4f}")
    lines += ["", f"fitted exponents (mean over seeds ≈ C n^a, n = {int(res['n'][0])} … "
                  f"{int(res['n'][-1])}; 95% CI, jackknife Student-t over seeds, each n "
                  "independently; expected a = -1/2)",
              f"{'t':>6}{'a(W2)':>9}{'95% CI':>20}{'C(W2)':>9}{'a(|dE|)':>10}{'95% CI':>20}"]
    for tt, f in fits.items():
        aw, Cw, cw = f["w2"]
        ae, _, ce = f["dE"]
        lines.append(f"{tt:>6.2f}{aw:>9.3f}   [{cw[0]:>6.3f}, {cw[1]:>6.3f}]{Cw:>9.3f}"
                     f"{ae:>10.3f}   [{ce[0]:>6.3f}, {ce[1]:>6.3f}]")
    nmax = int(res["n"][-1])
    if "mesh" in res:
        me = res["mesh"]
        samp_w = np.array([res["w2"][nmax][r].mean() for r in range(len(t))])
        samp_e = np.array([np.abs(res["dE"][nmax][r]).mean() for r in range(len(t))])
        lines += ["", f"resolution of the PDE: N = {me['N']} against N = {res['N_fine']} "
                      f"(an upper estimate of the fine mesh's error), against the sampling "
                      f"error at n = {nmax}",
                  f"{'t':>6}{'W2(N,2N)':>12}{'W2 samp':>12}{'ratio':>8}{'|E_N-E_2N|':>12}"
                  f"{'|dE| samp':>12}{'ratio':>8}"]
        for r, tt in enumerate(t):
            lines.append(f"{tt:>6.2f}{me['w2'][r]:>12.3e}{samp_w[r]:>12.3e}"
                         f"{me['w2'][r] / samp_w[r]:>8.3f}{me['dE'][r]:>12.3e}{samp_e[r]:>12.3e}"
                         f"{me['dE'][r] / samp_e[r]:>8.3f}")
        ok = bool(np.all(me["w2"] < samp_w) and np.all(me["dE"] < samp_e))
        lines.append(f"mesh error below the sampling error at n = {nmax} at every t: "
                     f"{'yes' if ok else 'NO'}")
    if "dt_check" in res:
        dc = res["dt_check"]
        samp = np.array([res["w2"][dc["n"]][r].mean() for r in range(len(t))])
        lines += ["", f"particle time step: Δt against Δt/2, same samples, n = {dc['n']}: "
                      f"max token displacement {float(dc['max_disp'].max()):.2e} rad, "
                      f"max W2 {float(dc['w2'].max()):.2e} (sampling W2 at n = {nmax}: "
                      f"{float(np.array([res['w2'][nmax][r].mean() for r in range(len(t))]).min()):.2e}; "
                      f"at n = {dc['n']}: {float(samp.min()):.2e})"]
    return "\n".join(lines), table
