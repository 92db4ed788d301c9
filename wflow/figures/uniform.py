r"""Figures of the ``uniform`` study: growth rates λ_k of the uniform state's modes (measured
and derived), the zero crossing ν_c, the stationary order parameter across ν_c, the
continuation sweeps up and down through ν_c, the S² ν_c against the mesh size, and the
selection of a degree by particles from a uniform draw (:func:`plot_selection`)."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from wflow.figures._figbase import DPI, _save

__all__ = ["plot_uniform", "plot_selection"]

FIGSIZE = (13.0, 3.8)
_COL = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")


def plot_uniform(ms, curves, branches, critical, outdir, formats=("png",), critical_s2=None):
    r"""``uniform.<fmt>``: panels 1–3; ``uniform_continuation.<fmt>`` (with continuation
    sweeps or S² ν_c): panels 4–6.

    1. :math:`\lambda_k` against k at ν = 0 (markers: measured, ± SE; lines: derived), one
       colour per (normalisation, β), rates divided by :math:`\max_k\lambda_k` (derived);
    2. the mode-1 rate against :math:`\nu/\nu_c` (derived ν_c) with the fitted lines;
    3. the order parameter r at T against :math:`\nu/\nu_c` from the near-uniform (filled)
       and clustered (open) starts, particle runs (crosses), and the derived stationary
       branches (lines);
    4. the continuation sweeps (``hyst`` records) at ``none`` β = 1 and ``head`` β ≥ 8: r at
       the end of each link against ν/ν_c, up (filled, solid) and down (open, dashed), faded
       where not stationary (the record's ``stationary``), the derived stable branch (grey);
    5. the same for ``none`` β > β_* (every N run; S¹ and S²), with the S¹ derived branch
       including its unstable part (dotted), the S² derived stable r (crosses): the
       hysteresis window between ν_c and the turning point;
    6. S²: measured ν_c / derived − 1 against 1/N, ± SE, the Δt/2 value (open), and the
       extrapolation to 1/N → 0 (p = 1, dashed), plus the Δt bias (star).

    Parameters
    ----------
    ms : dict task -> record (:meth:`wflow.studies.uniform.Uniform.measure`).
    curves : dict (norm, β) -> (k, λ_k) derived.
    branches : dict (norm, β) -> (r, ν(r), ν_c) derived stationary branches.
    critical : dict (norm, β) -> {"nu_c", "se", "slope", "derived"}.
    critical_s2 : dict (norm, β) -> :meth:`wflow.studies.uniform.Uniform.critical_s2`.
    """
    hyst = {n: r for n, r in ms.items() if n.startswith("hyst")}
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    for i, (key, (ks, lam)) in enumerate(sorted(curves.items())):
        pts = [r for n, r in ms.items() if n.startswith("growth") and not n.endswith(
            ("halfN", "halfdt")) and (r["norm"], r["beta"]) == key]
        if not pts:
            continue
        c = _COL[i % len(_COL)]
        scale = float(np.max(lam))
        ax1.plot(ks, lam / scale, "-" if key[0] == "head" else "--", color=c, lw=1,
                 label=f"{key[0]}, β = {key[1]:g}")
        kk = np.array([r["k"] for r in pts])
        ax1.errorbar(kk, np.array([r["rate"] for r in pts]) / scale,
                     yerr=np.array([r["se"] for r in pts]) / scale, fmt="o", color=c, ms=4)
    ax1.set_xlabel("mode k")
    ax1.set_ylabel(r"$\lambda_k / \max_k \lambda_k$ (derived)")
    ax1.set_title("rates at ν = 0: dots measured, lines derived", fontsize=9)
    if ax1.get_legend_handles_labels()[0]:
        ax1.legend(fontsize=7)
    for i, (key, cr) in enumerate(sorted(critical.items())):
        c = _COL[i % len(_COL)]
        pts = sorted((r["nu"], r["rate"], r["se"]) for n, r in ms.items()
                     if n.startswith("critical") and (r["norm"], r["beta"]) == key)
        nu, lam, se = (np.array(x) for x in zip(*pts))
        x = nu / cr["derived"]
        ax2.errorbar(x, lam / cr["derived"], yerr=se / cr["derived"], fmt="o", color=c, ms=4,
                     label=f"{key[0]}, β = {key[1]:g}: ν_c {cr['nu_c']:.4f} "
                           f"({cr['derived']:.4f})")
        xx = np.linspace(x.min(), x.max(), 20)
        ax2.plot(xx, cr["slope"] * (xx - cr["nu_c"] / cr["derived"]), "-", color=c, lw=1)
    ax2.axhline(0, color="0.5", lw=0.5)
    ax2.axvline(1, color="0.5", lw=0.5, ls=":")
    ax2.set_xlabel(r"$\nu/\nu_c$ (derived $\nu_c$)")
    ax2.set_ylabel(r"mode-1 rate $/\nu_c$")
    ax2.set_title("ν_c: zero of the mode-1 rate (legend: measured (derived))", fontsize=8)
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=7)
    swept = {(r["norm"], r["beta"]) for n, r in ms.items() if n.startswith("sweep")}
    for i, (key, (rv, nub, nuc)) in enumerate(sorted(branches.items())):
        if key not in swept:  # (a continuation sweep's branch: panels 4 and 5)
            continue
        c = _COL[i % len(_COL)]
        ax3.plot(nub / nuc, rv, "-", color=c, lw=1, label=f"{key[0]}, β = {key[1]:g}")
        ax3.plot([0, 1.3], [0, 0], "-", color="0.6", lw=0.5)
        for start, mk in (("uniform", "o"), ("clustered", "s")):
            pts = sorted((r["nu"], r["r"]) for n, r in ms.items() if n.startswith("sweep")
                         and (r["norm"], r["beta"]) == key and r["start"] == start)
            if pts:
                nu, r = (np.array(x) for x in zip(*pts))
                ax3.plot(nu / nuc, r, mk, color=c, ms=5,
                         mfc=c if start == "uniform" else "none")
        pts = sorted((r["nu"], float(np.mean(r["r"]))) for n, r in ms.items()
                     if n.startswith("particles") and (r["norm"], r["beta"]) == key)
        if pts:
            nu, r = (np.array(x) for x in zip(*pts))
            ax3.plot(nu / nuc, r, "x", color=c, ms=6)
    ax3.set_xlabel(r"$\nu/\nu_c$")
    ax3.set_ylabel(r"$r = |\langle e^{i\theta}\rangle|$ at T")
    ax3.set_title("r at T: ● uniform start, □ clustered,\n× particles, — derived branch",
                  fontsize=8)
    if ax3.get_legend_handles_labels()[0]:
        ax3.legend(fontsize=7)
    files = list(_save(fig, outdir, "uniform", formats) or [])
    if hyst or critical_s2:
        fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
        ax4, ax5, ax6 = fig.subplots(1, 3)
        _plot_sweeps(ax4, ax5, hyst, branches)
        _plot_s2(ax6, critical_s2 or {})
        files += list(_save(fig, outdir, "uniform_continuation", formats) or [])
    return files


def _plot_sweeps(ax4, ax5, hyst, branches):
    chains = {}
    for r in hyst.values():
        chains.setdefault(r["chain"], []).append(r)
    i4 = i5 = 0
    lo, hi = {}, {}
    curves = []
    s2_drawn = set()
    for rs in chains.values():
        key = (rs[0]["norm"], rs[0]["beta"])
        d = rs[0]["d"]
        # subcritical (none above β_*: 2.4469 on S¹, 1.8162 on S²): the hysteresis panel
        sub = key[0] == "none" and key[1] > (2.4469 if d == 2 else 1.8162)
        ax = ax5 if sub else ax4
        i = i5 if sub else i4
        c = _COL[(i + (2 if sub else 0)) % len(_COL)]
        nuc = rs[0]["nu_c"]
        if d == 2 and key in branches and (i == 0 or not sub):  # the derived branch, once
            rv, nub, _ = branches[key]
            ok = np.isfinite(nub)
            curves.append((ax, nub[ok] / nuc, rv[ok]))
        if d == 3 and key not in s2_drawn:  # no S² branch curve: the derived r at the swept ν
            s2_drawn.add(key)
            pts = sorted({(r["nu"] / nuc, r["derived"]) for r in rs})
            ax.plot(*zip(*pts), "x", color="0.3", ms=7,
                    label=f"S², {key[0]}, β = {key[1]:g}: derived stable r")
        for way, mk, ls in (("up", "o", "-"), ("down", "s", "--")):
            pts = sorted((r["step"], r["nu"], r["r"], r["stationary"])
                         for r in rs if r["way"] == way)
            if not pts:
                continue
            _, nu, rr, ok = (np.array(v) for v in zip(*pts))
            x = nu / nuc
            ax.plot(x, rr, ls, color=c, lw=0.8,
                    label=f"{'S², ' if d == 3 else ''}{key[0]}, β = {key[1]:g}, "
                          f"N = {rs[0]['N']}, {way}")
            ms = 5 if way == "up" else 8
            ax.plot(x[ok], rr[ok], mk, color=c, ms=ms, mfc=c if way == "up" else "none")
            ax.plot(x[~ok], rr[~ok], mk, color=c, ms=ms, alpha=0.35,
                    mfc=c if way == "up" else "none")
            lo[ax] = min(lo.get(ax, 1.0), x.min())
            hi[ax] = max(hi.get(ax, 1.0), x.max())
        if sub:
            i5 += 1
        else:
            i4 += 1
    for ax, x, rb in curves:  # within the swept range (the branch continues to ν → 0)
        a, b = lo.get(ax, 0.0), hi.get(ax, 2.0)
        pad = 0.03 * (b - a)
        top = int(np.argmax(x))
        for sl, ls in ((slice(top, None), "-"), (slice(0, top + 1), ":")):
            xs, rs_ = x[sl], rb[sl]
            keep = (xs >= a - pad) & (xs <= b + pad)
            if keep.sum() > 1:
                ax.plot(xs[keep], rs_[keep], ls, color="0.4", lw=0.8)
    for ax, title in ((ax4, "sweeps up (●, —) and down (□, --); faded: not stationary"),
                      (ax5, "hysteresis: derived branch, dotted unstable")):
        ax.axvline(1, color="0.5", lw=0.5, ls=":")
        if ax in lo:
            pad = 0.03 * (hi[ax] - lo[ax])
            ax.set_xlim(lo[ax] - pad, hi[ax] + pad)
        ax.set_xlabel(r"$\nu/\nu_c$")
        ax.set_ylabel("r at the end of the link")
        ax.set_title(title, fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
        else:
            _empty(ax)


def _plot_s2(ax, critical_s2):
    for i, ((nm, b), c) in enumerate(sorted(critical_s2.items())):
        col = _COL[i % len(_COL)]
        Ns = sorted(c["by_N"])
        der = c["derived"]
        x = np.array([1.0 / N for N in Ns])
        y = np.array([c["by_N"][N]["nu_c"] / der - 1 for N in Ns])
        e = np.array([c["by_N"][N]["se"] / der for N in Ns])
        ax.errorbar(x, y, yerr=e, fmt="o-", color=col, ms=4, lw=0.8,
                    label=f"{nm}, β = {b:g}" + (f": order p = {c['order']:.2f}"
                                               if "order" in c else ""))
        for N in Ns:
            h = c["by_N"][N].get("nu_c_halfdt")
            if h is not None:
                ax.plot(1.0 / N, h / der - 1, "o", color=col, mfc="none", ms=8)
        if "extrap1" in c:
            ax.plot([0, x[-1]], [c["extrap1"] / der - 1, y[-1]], "--", color=col, lw=0.8)
        if "extrap1_dt" in c:
            ax.plot(0, c["extrap1_dt"] / der - 1, "*", color=col, ms=9, clip_on=False)
    ax.axhline(0, color="0.5", lw=0.5)
    ax.set_xlim(left=0)
    ax.set_xlabel("1/N (Voronoi cells)")
    ax.set_ylabel(r"S²: $\nu_c$ measured / derived − 1")
    ax.set_title("S² ν_c against the mesh (○ Δt/2; -- to 1/N → 0;\n★ plus the Δt bias)",
                 fontsize=8)
    if critical_s2:
        ax.legend(fontsize=7)
    else:
        _empty(ax)


def _empty(ax):
    ax.text(0.5, 0.5, "not run at this scale", ha="center", va="center", color="0.5",
            transform=ax.transAxes)


def plot_selection(sel, ms, outdir, formats=("png",)):
    r"""``uniform_selection.<fmt>``: the selection runs [model §6c].

    1. S¹, 2. S²: the measured rate of each degree (mean over the draws, 95% interval)
       against ℓ ≤ 8, one colour per β, divided by :math:`\max_\ell\lambda_\ell`; lines:
       derived :math:`\lambda_\ell`; the largest n of each (d, β) only;
    3. the harmonic power per component :math:`q_\ell(t)` (mean over the draws) of the run of
       largest β and d, degrees 1..8, and the derived linear growth
       :math:`q_\ell(0)e^{2\lambda_\ell t}` (dashed) up to the end of the linear phase (the
       vertical line).

    Parameters
    ----------
    sel : dict task -> :meth:`wflow.studies.uniform.Uniform.selection` record.
    ms : dict task -> record (:meth:`wflow.studies.uniform.Uniform.measure`), for q(t).
    """
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, d in zip(axes[:2], (2, 3)):
        runs = {}
        for name, r in sel.items():
            if r["d"] == d and not name.endswith("halfdt"):
                key = r["beta"]
                if key not in runs or r["n"] > runs[key][1]["n"]:
                    runs[key] = (name, r)
        if not runs:
            _empty(ax)
            continue
        ns = [r["n"] for _, r in runs.values()]
        n = max(set(ns), key=ns.count)  # the common n; another is named in the legend
        for i, (b, (_, r)) in enumerate(sorted(runs.items())):
            c = _COL[i] if i < len(_COL) else f"C{i}"
            m = min(8, r["derived"].size)
            lam = r["derived"][:m]
            top = float(np.max(r["derived"]))
            ell = np.arange(1, m + 1)
            label = f"β = {b:g}" + ("" if r["n"] == n else f" (n = {r['n']:g})")
            ax.plot(ell, lam / top, "-", color=c, lw=0.8, label=label)
            est = np.array([iv.estimate for iv in r["intervals"][:m]]) / top
            # (a log-scale interval of a degree whose rates straddle 0 can miss its mean)
            err = np.clip(np.array([iv.errorbar() for iv in r["intervals"][:m]]).T / top, 0, 1)
            ax.errorbar(ell + 0.06 * (i - len(runs) / 2), est, yerr=err, fmt="o", color=c,
                        ms=3, lw=0.8)
        ax.set_xlabel("degree ℓ" if d == 3 else "mode k")
        ax.set_ylabel(r"rate $/ \max_\ell\lambda_\ell$")
        ax.set_title(f"S{d - 1}, n = {n:g}: dots measured (95% CI), lines derived",
                     fontsize=8)
        ax.legend(fontsize=6, ncol=2)
    ax = axes[2]
    pick = max(sel.items(), key=lambda kv: (kv[1]["d"], kv[1]["beta"], kv[1]["n"]), default=None)
    if pick is None:
        _empty(ax)
    else:
        name, r = pick
        rec = ms[name]
        t, q = rec["t"], rec["q"].mean(axis=1)
        t_end = float(np.mean(r["t_end"]))
        for ell in range(1, min(8, q.shape[1]) + 1):
            c = f"C{ell - 1}"
            ax.semilogy(t, q[:, ell - 1], "-", color=c, lw=1, label=f"ℓ = {ell}")
            tt = t[t <= t_end]
            ax.semilogy(tt, q[0, ell - 1] * np.exp(2 * r["derived"][ell - 1] * tt), "--",
                        color=c, lw=0.7)
        ax.axvline(t_end, color="0.5", lw=0.5, ls=":")
        ax.set_xlabel("t")
        ax.set_ylabel(r"$q_\ell = 4\pi P_\ell/(2\ell+1)$" if r["d"] == 3 else r"$q_k = P_k$")
        ax.set_title(f"S{r['d'] - 1}, β = {r['beta']:g}, n = {r['n']:g}: mean of {r['draws']} "
                     "draws;\ndashed: derived linear growth", fontsize=8)
        ax.legend(fontsize=6, ncol=2)
    return list(_save(fig, outdir, "uniform_selection", formats) or [])
