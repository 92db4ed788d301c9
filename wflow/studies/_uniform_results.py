r"""The ``uniform`` study's results: the measured statistic of each task, the ν_c fits (S¹
and S²) and the summary text, described in :mod:`wflow.studies.uniform` [model §6c]."""

from __future__ import annotations

import numpy as np

from wflow.analysis.clusters import cluster_count
from wflow.analysis.intervals import mean_interval
from wflow.analysis.results import load_source
from wflow.model.harmonics import point_power
from wflow.model.uniform_state import (
    A_CAP,
    Q_CAP,
    critical_nu,
    derived_rate,
    fit_rate,
    landau_beta_none,
    mode_amplitude,
    order_parameter,
    other_amplitude,
    power_rates,
    stable_r,
    stationary_r_s2,
    winning_mode,
)
from wflow.studies._uniform_tasks import C_RELAX, KICK, T_MIN

#: the selection's cluster count also of the components of at least this fraction of the
#: tokens (the clusters that formed, without the tokens not yet joined to one at T)
BIG_CLUSTER = 0.01
#: a sweep point is stationary if |r(T) − r(0.8 T)| is below this and r does not grow by
#: more than ``GROWTH_TOL`` r(T) (a state leaving the uniform one from the kick)
DRIFT_TOL = 1e-3
GROWTH_TOL = 0.05


def measure(data):
    """Per task of a :class:`wflow.studies.StudyData`: the configuration keys and the measured
    statistic (the fitted rate of a growth or critical run, r at T of a sweep, a link or
    particles)."""
    out = {}
    meshes = {}
    refs = {name: path for path, (name, _) in zip(data.paths, data.tasks)
            if name.startswith(("sphereref", "s2critref"))}
    for path, (name, _) in zip(data.paths, data.tasks):
        if name in refs:
            continue
        cfg, arr = load_source(path)
        m, ini, s = cfg["model"], cfg["init"], cfg["solver"]
        t = np.asarray(arr["t"], dtype=float)
        rec = {"norm": m["normalization"], "beta": float(m["beta"]), "nu": float(m["diffusion"]),
               "d": int(m["d"]), "dt": float(s["dt"]), "T": float(s["T"])}
        if name.startswith("select"):
            rec.update(_select_record(cfg, arr, t))
        elif name.startswith(("growth", "critical", "sphere", "s2crit")):
            rho = np.asarray(arr["rho"], dtype=float)[:, 0]
            k = int(ini["mode"])
            mesh = ref = None
            if rec["d"] == 3:
                from wflow.geometry.sphere_mesh import voronoi_mesh

                N = rho.shape[-1]
                mesh = meshes.setdefault(N, voronoi_mesh(N))
                rpath = refs.get(name.replace("sphere-", "sphereref-", 1)
                                 .replace("s2crit-", "s2critref-", 1))
                if rpath is not None:
                    ref = np.asarray(load_source(rpath)[1]["rho"], dtype=float)[:, 0]
            A = mode_amplitude(rho, k, rec["d"], mesh, ref)
            rate, se, npts = fit_rate(t, A, other=other_amplitude(rho, k, rec["d"], mesh, ref))
            rec.update(k=k, N=rho.shape[-1], rate=rate, se=se, npts=npts, t=t, A=A,
                       derived=float(derived_rate(k, rec["beta"], rec["norm"], rec["nu"],
                                                  rec["d"])))
        elif name.startswith("sweep"):
            rho = np.asarray(arr["rho"], dtype=float)[:, 0]
            r = order_parameter(rho)
            i8 = int(np.argmin(np.abs(t - 0.8 * t[-1])))
            rec.update(start=name.rsplit("-", 1)[1], r=float(r[-1]), drift=float(r[-1] - r[i8]),
                       t=t, rt=r)
        elif name.startswith(("hyst", "s2dens")):
            rho = np.asarray(arr["rho"], dtype=float)[:, 0]
            mesh = None
            if rec["d"] == 3:
                from wflow.geometry.sphere_mesh import voronoi_mesh

                N = rho.shape[-1]
                mesh = meshes.setdefault(N, voronoi_mesh(N))
            r = order_parameter(rho, mesh)
            i8 = int(np.argmin(np.abs(t - 0.8 * t[-1])))
            drift = float(r[-1] - r[i8])
            rec.update(N=rho.shape[-1], r=float(r[-1]), drift=drift, t=t, rt=r,
                       stationary=bool(abs(drift) < DRIFT_TOL
                                       and drift <= GROWTH_TOL * float(r[-1])))
            if name.startswith("hyst"):
                nuc = critical_nu(rec["beta"], rec["norm"], rec["d"])
                rec.update(chain=name.rsplit("-", 2)[0], way=name.rsplit("-", 2)[1][2:],
                           step=int(name.rsplit("-", 2)[1][:2]), nu_c=nuc,
                           derived=(stable_r(rec["beta"], rec["norm"], rec["nu"])
                                    if rec["d"] == 2 else
                                    stationary_r_s2(rec["beta"], rec["norm"], rec["nu"])))
        else:  # particles
            op = np.asarray(arr["order_parameter"], dtype=float)
            nc = np.asarray(arr["n_clusters"], dtype=float)
            rec.update(r=op[-1], nclusters=nc[-1], t=t, rt=op.mean(axis=1),
                       nct=nc.mean(axis=1))
        out[name] = rec
    return out


def _select_record(cfg, arr, t, cap=Q_CAP):
    r"""A selection run: per path the rate of every degree (:func:`power_rates` of
    :math:`q_\ell = P_\ell/P^{\rm point}_\ell`), the degree of largest :math:`q_\ell` at the
    last record of the linear phase, and the cluster count at T: on all n tokens of the
    stored last record (:func:`wflow.analysis.clusters.cluster_count`), else the
    ``n_clusters`` series (the first ``diagnostics.max_pairwise_n`` tokens), else NaN."""
    d, n = int(cfg["model"]["d"]), int(cfg["model"]["n"])
    hp = np.asarray(arr["harmonic_power"], dtype=float)  # (R, P, L)
    L = hp.shape[-1]
    q = hp / point_power(L, d)
    fits = [power_rates(t, q[:, p], cap) for p in range(q.shape[1])]
    rates = np.array([f[0] for f in fits])
    ends = np.array([max(f[2] - 1, 0) for f in fits])
    dominant = np.array([int(np.argmax(q[e, p])) + 1 for p, e in enumerate(ends)])
    dg = cfg["diagnostics"]
    big = np.full(hp.shape[1], np.nan)
    if "X" in arr:
        XT = np.asarray(arr["X"][-1], dtype=float)
        nclusters = cluster_count(XT, dg["cluster_angle"])
        big = cluster_count(XT, dg["cluster_angle"], min_fraction=BIG_CLUSTER)
        counted = n
    elif "n_clusters" in arr:
        nclusters = np.asarray(arr["n_clusters"], dtype=float)[-1]
        counted = min(n, int(dg["max_pairwise_n"]))
    else:
        nclusters, counted = np.full(hp.shape[1], np.nan), 0
    return dict(n=n, L=L, rates=rates, se=np.array([f[1] for f in fits]),
                npts=np.array([f[2] for f in fits]), t_end=t[ends], dominant=dominant,
                nclusters=nclusters, nbig=big, counted=counted, t=t, q=q,
                derived=derived_rate(np.arange(1, L + 1), float(cfg["model"]["beta"]),
                                     cfg["model"]["normalization"], 0.0, d))


def selection(ms, top=3):
    r"""``{task: {...}}`` of the selection runs [model §6c]: per degree the mean rate over
    the draws with its 95% Student-t interval (:func:`wflow.analysis.intervals.mean_interval`),
    the derived :math:`\lambda_\ell`, the ``top`` degrees of largest derived rate, ``lstar``
    the derived argmax, ``measured`` the degree of largest mean measured rate or ``"tie"``
    where its interval overlaps the runner-up's, ``dominant`` the degree of largest
    :math:`q_\ell` at the end of the linear phase per draw, and the cluster count at T."""
    out = {}
    for name, r in ms.items():
        if not name.startswith("select"):
            continue
        ivs = [mean_interval(r["rates"][:, i], unit="draws") for i in range(r["L"])]
        mean = np.array([iv.estimate for iv in ivs])
        order = np.argsort(mean)[::-1]
        a, b = ivs[order[0]], ivs[order[1]]
        tie = not (np.isfinite(a.low) and np.isfinite(b.high)) or a.low <= b.high
        lam = r["derived"]
        out[name] = dict(d=r["d"], n=r["n"], beta=r["beta"], dt=r["dt"], draws=len(r["rates"]),
                         intervals=ivs, derived=lam, top=list(np.argsort(lam)[::-1][:top] + 1),
                         lstar=int(np.argmax(lam)) + 1,
                         measured="tie" if tie else int(order[0]) + 1,
                         runner_up=int(order[1]) + 1, dominant=r["dominant"],
                         t_end=r["t_end"], npts=r["npts"], T=r["T"],
                         clusters=mean_interval(r["nclusters"], unit="draws"),
                         nclusters=r["nclusters"], nbig=r["nbig"], counted=r["counted"])
    return out


def _summary_select(ms):
    sel = selection(ms)
    if not sel:
        return []
    lines = ["", "selection: n uniform tokens, head, nu = 0, particles (spectral summation, Heun); "
             "the rate of each degree from log q_l = log(4 pi P_l/(2l+1)) (S1: P_k), half the "
             f"least-squares slope from t = 0 until any q_l > {Q_CAP:g}; mean over the draws "
             "[95% CI]; l* measured: the largest mean rate, 'tie' where its interval overlaps "
             "the runner-up's; dominant: argmax q_l at the end of the linear phase per draw; "
             "clusters at T (cluster_angle 0.1) per draw, on all n tokens (cluster_count; "
             "'of m tokens': the n_clusters series on the first m), and those of at least "
             f"{BIG_CLUSTER:.0%} of the tokens"]
    for name, r in sel.items():
        lines.append(f"  {name}: d = {r['d']} n = {r['n']} beta = {r['beta']:g} dt = {r['dt']:g}"
                     f" draws = {r['draws']} T = {r['T']:.3g} (linear phase to t = "
                     f"{np.mean(r['t_end']):.3g}, {int(np.min(r['npts']))} records)")
        for ell in r["top"]:
            iv = r["intervals"][ell - 1]
            lam = r["derived"][ell - 1]
            lines.append(f"      l = {ell:>2}: measured {iv.fmt('.4f')}, derived {lam:.4f} "
                         f"(rel. diff {(iv.estimate - lam) / lam:+.1e})")
        cl = ""
        if np.all(np.isfinite(r["nclusters"])):
            cl = (f"; clusters at T {list(map(int, r['nclusters']))}, mean "
                  f"{r['clusters'].fmt('.3g')}"
                  + ("" if r["counted"] == r["n"] else f" (of {r['counted']} tokens)"))
        if np.all(np.isfinite(r["nbig"])):
            cl += f", of >= {BIG_CLUSTER:.0%} of the tokens {list(map(int, r['nbig']))}"
        lines.append(f"      l* derived {r['lstar']}, measured {r['measured']} (runner-up "
                     f"{r['runner_up']}); dominant at the end of the linear phase "
                     f"{list(map(int, r['dominant']))}{cl}")
    return lines


def zero_crossing(rs):
    r"""``{"nu_c", "se", "slope"}``: the least-squares line rate = a + b ν through the records
    ``rs``; :math:`\nu_c = -a/b`, its SE by the delta method from the fit's covariance."""
    nu = np.array([r["nu"] for r in rs])
    lam = np.array([r["rate"] for r in rs])
    X = np.stack([np.ones_like(nu), nu], axis=1)
    coef, res, *_ = np.linalg.lstsq(X, lam, rcond=None)
    dof = max(len(nu) - 2, 1)
    s2 = float(res[0]) / dof if len(res) else 0.0
    cov = s2 * np.linalg.inv(X.T @ X)
    a, b = coef
    g = np.array([-1 / b, a / b**2])
    return {"nu_c": float(-a / b), "se": float(np.sqrt(max(g @ cov @ g, 0.0))),
            "slope": float(b)}


def critical(ms):
    r"""``{(norm, β): {"nu_c", "se", "slope", "derived"}}``: the least-squares line
    rate = a + b ν through the critical runs; :math:`\nu_c = -a/b`, SE by the delta
    method from the fit's covariance."""
    groups = {}
    for n, r in ms.items():
        if n.startswith("critical"):
            key = (r["norm"], r["beta"]) + (("halfdt",) if n.endswith("halfdt") else ())
            groups.setdefault(key, []).append(r)
    out = {}
    for key, rs in groups.items():
        out[key] = {**zero_crossing(rs), "derived": critical_nu(key[1], key[0])}
    for key in [k for k in out if len(k) == 2 and k + ("halfdt",) in out]:
        # Heun: the rate's error is O(Δt²); Richardson from Δt and Δt/2
        a, h = out[key]["nu_c"], out[key + ("halfdt",)]["nu_c"]
        out[key]["nu_c_halfdt"] = h
        out[key]["nu_c_richardson"] = h + (h - a) / 3
    return {k: v for k, v in out.items() if len(k) == 2}


def critical_s2(ms):
    r"""``{(norm, β): {"by_N": {N: {"nu_c", "se", "slope"[, "nu_c_halfdt"]}}, "derived",
    "order", "extrap", "extrap1"}}`` of the S² critical runs; with three N in ratio 2,
    the observed order :math:`p = \log_2\frac{\nu(N_1) - \nu(N_2)}{\nu(N_2) -
    \nu(N_3)}` in 1/N and the Richardson values
    :math:`\nu(N_3) + (\nu(N_3) - \nu(N_2))/(2^p - 1)` (p observed, and p = 1);
    with the Δt/2 runs at :math:`N_2`, ``dt_bias`` = 4/3 (ν(Δt/2) − ν(Δt)) (order 2) and
    ``extrap1_dt`` = the p = 1 value plus it (the Δt error taken as independent of N)."""
    groups = {}
    for n, r in ms.items():
        if n.startswith("s2crit"):
            key = (r["norm"], r["beta"], r["N"], n.endswith("halfdt"))
            groups.setdefault(key, []).append(r)
    out = {}
    for (nm, b, N, half), rs in sorted(groups.items()):
        z = zero_crossing(rs)
        c = out.setdefault((nm, b), {"by_N": {}, "derived": critical_nu(b, nm, 3)})
        if half:
            c["by_N"].setdefault(N, {})["nu_c_halfdt"] = z["nu_c"]
        else:
            c["by_N"].setdefault(N, {}).update(z)
    for c in out.values():
        Ns = sorted(c["by_N"])
        if len(Ns) == 3 and Ns[1] == 2 * Ns[0] and Ns[2] == 2 * Ns[1]:
            v = [c["by_N"][N]["nu_c"] for N in Ns]
            q = (v[0] - v[1]) / (v[1] - v[2])
            p = float(np.log2(q)) if q > 0 else float("nan")
            c.update(order=p, extrap=v[2] + (v[2] - v[1]) / (2**p - 1),
                     extrap1=v[2] + (v[2] - v[1]))
            half = c["by_N"][Ns[1]].get("nu_c_halfdt")
            if half is not None:  # the Δt bias at the middle N, order 2, taken as N-free
                c["dt_bias"] = 4.0 / 3.0 * (half - v[1])
                c["extrap1_dt"] = c["extrap1"] + c["dt_bias"]
    return out


def summary(ms):
    """The summary text and its column table (task -> row) from the records ``ms``
    (:func:`measure`): growth rates (measured ± SE vs derived, discretisation check), ν_c,
    the sweep's branches, particles, S² and the continuation sweeps."""
    lines = ["Uniform state [model §6c]: frozen D = V = I, H = 1, ascent. Rates from the "
             f"linear phase (A_k <= {A_CAP:g}), ± one standard error of the slope."]
    table = {k: [] for k in ("task", "norm", "d", "beta", "nu", "k", "N", "dt", "measured",
                             "se", "derived", "r", "drift")}

    def row(name, rec):
        for col, v in zip(table, (name, rec["norm"], rec["d"], rec["beta"], rec["nu"],
                                  rec.get("k", 0), rec.get("N", 0), rec["dt"],
                                  rec.get("rate", np.nan), rec.get("se", np.nan),
                                  rec.get("derived", np.nan), np.mean(rec.get("r", np.nan)),
                                  rec.get("drift", np.nan))):
            table[col].append(v)

    for name, rec in ms.items():
        row(name, rec)
    g = {n: r for n, r in ms.items() if n.startswith("growth")}
    lines += ["", "(a) growth rates without noise, S1",
              f"{'norm':>5}{'beta':>6}{'k':>3}{'N':>5}{'measured':>12}{'se':>10}"
              f"{'derived':>12}{'rel.diff':>10}"]
    for n, r in g.items():
        if n.endswith(("halfN", "halfdt")):
            continue
        lines.append(f"{r['norm']:>5}{r['beta']:>6g}{r['k']:>3}{r['N']:>5}{r['rate']:>12.5f}"
                     f"{r['se']:>10.1e}{r['derived']:>12.5f}"
                     f"{(r['rate'] - r['derived']) / r['derived']:>10.1e}")
    lines += ["", "winning mode k* = argmax_k lambda_k (derived; measured among the k run)"]
    for nm in sorted({r["norm"] for r in g.values()}):
        for b in sorted({r["beta"] for r in g.values() if r["norm"] == nm}):
            rs = [r for n, r in g.items() if r["norm"] == nm and r["beta"] == b
                  and not n.endswith(("halfN", "halfdt"))]
            km = max(rs, key=lambda r: r["rate"])["k"]
            lines.append(f"  {nm:>5} beta = {b:g}: derived k* = {winning_mode(b, nm)}, "
                         f"measured k* = {km}")
    lines += ["", "discretisation check: rate(N) - rate(N/2), rate(dt) - rate(dt/2)"]
    for n, r in g.items():
        for tag in ("halfN", "halfdt"):
            if n.endswith(tag):
                r0 = g[n[: -len(tag) - 1]]
                lines.append(f"  {r0['norm']} beta = {r0['beta']:g} k = {r0['k']}: {tag}: "
                             f"{r0['rate'] - r['rate']:+.2e}  (rate {r0['rate']:.5f}, "
                             f"derived - measured {r0['derived'] - r0['rate']:+.2e})")
    crit = critical(ms)
    lines += ["", "(b) critical noise nu_c (mode 1: rates at nu_c(1+delta), linear fit, "
              "zero crossing ± delta-method SE)"]
    for (nm, b), c in crit.items():
        lines.append(f"  {nm:>5} beta = {b:g}: measured {c['nu_c']:.5f} ± {c['se']:.1e}, "
                     f"derived {c['derived']:.5f}, slope {c['slope']:.4f} (derived -1)")
        if "nu_c_halfdt" in c:
            lines.append(f"        dt/2: {c['nu_c_halfdt']:.5f}, Richardson (order 2): "
                         f"{c['nu_c_richardson']:.5f} (derived - Richardson "
                         f"{c['derived'] - c['nu_c_richardson']:+.1e})")
    sw = {n: r for n, r in ms.items() if n.startswith("sweep")}
    if sw:
        lines += ["", "sweep: stationary r = |<e^{i theta}>| at T from a near-uniform and a "
                  "clustered start (drift: r(T) - r(0.8 T)); derived branch r(nu)"]
        for key in sorted({(r["norm"], r["beta"]) for r in sw.values()}):
            nuc = critical_nu(key[1], key[0])
            lines.append(f"  {key[0]} beta = {key[1]:g} (nu_c = {nuc:.4f})")
            for nu in sorted({r["nu"] for r in sw.values() if (r["norm"], r["beta"]) == key}):
                pair = {r["start"]: r for r in sw.values()
                        if (r["norm"], r["beta"], r["nu"]) == (*key, nu)}
                lines.append(f"    nu/nu_c = {nu / nuc:5.3f}: " + ", ".join(
                    f"r {st} start {pair[st]['r']:.4f} (drift {pair[st]['drift']:+.1e})"
                    for st in ("uniform", "clustered") if st in pair))
        lines.append(f"  none: continuous for beta < {landau_beta_none():.4f} "
                     "(I_2 = I_1/2), discontinuous above")
    pa = {n: r for n, r in ms.items() if n.startswith("particles")}
    if pa:
        lines += ["", "particles n = 512 (4 paths), r at T/2 of the density sweep, mean "
                  "[95% CI over paths]"]
        for n, r in pa.items():
            iv = mean_interval(r["r"], unit="paths")
            lines.append(f"  {n}: r = {iv.fmt('.4f')}")
    cl = {n: r for n, r in ms.items() if n.startswith("clusters")}
    if cl:
        lines += ["", "particles n = 512, nu = 0, head: clusters at t = 12/lambda_max "
                  "(cluster_angle 0.1) against k*"]
        for r in cl.values():
            iv = mean_interval(r["nclusters"], unit="paths")
            lines.append(f"  beta = {r['beta']:g}: clusters {iv.fmt('.3g')}, "
                         f"k* = {winning_mode(r['beta'], 'head')}")
    sp = {n: r for n, r in ms.items() if n.startswith("sphere")}
    if sp:
        lines += ["", "S2 coarse (Voronoi N cells, first-order upwind), head: rate of degree l"]
        for r in sp.values():
            lines.append(f"  beta = {r['beta']:g} l = {r['k']} N = {r['N']}: measured "
                         f"{r['rate']:.5f} ± {r['se']:.1e}, derived {r['derived']:.5f} "
                         f"(rel. diff {(r['rate'] - r['derived']) / r['derived']:+.1e})")
    lines += _summary_s2(ms) + _summary_hysteresis(ms) + _summary_select(ms)
    return "\n".join(lines), table


def _summary_s2(ms):
    lines = []
    cr = critical_s2(ms)
    if cr:
        lines += ["", "S2 nu_c (head, degree 1, Voronoi N cells; rates at nu_c(1+delta), "
                  "zero crossing ± delta-method SE; derived i_1/(beta i_0))"]
        for (nm, b), c in cr.items():
            for N, v in c["by_N"].items():
                lines.append(f"  {nm} beta = {b:g} N = {N:>4}: {v['nu_c']:.5f} ± "
                             f"{v['se']:.1e} (slope {v['slope']:.4f}, derived -2), "
                             f"rel. diff {(v['nu_c'] - c['derived']) / c['derived']:+.2e}")
                if "nu_c_halfdt" in v:
                    lines.append(f"      dt/2: {v['nu_c_halfdt']:.5f} (change "
                                 f"{v['nu_c_halfdt'] - v['nu_c']:+.1e})")
            if "order" in c:
                lines.append(f"    observed order in 1/N: p = {c['order']:.2f}; "
                             f"extrapolated (p observed) {c['extrap']:.5f}, (p = 1) "
                             f"{c['extrap1']:.5f}; derived {c['derived']:.5f}")
            if "extrap1_dt" in c:
                lines.append(f"    Delta t bias at N = {sorted(c['by_N'])[1]} (4/3 of the "
                             f"dt/2 change): {c['dt_bias']:+.1e}; p = 1 extrapolation + it: "
                             f"{c['extrap1_dt']:.5f} (rel. diff "
                             f"{(c['extrap1_dt'] - c['derived']) / c['derived']:+.1e})")
    dens = {n: r for n, r in ms.items() if n.startswith("s2dens")}
    part = {n: r for n, r in ms.items() if n.startswith("s2part")}
    if part:
        lines += ["", "S2 particles (n = 512, 4 paths, |mean x| at T, mean [95% CI]) beside "
                  "the density (N = 500, clustered start, |sum m_j c_j| at T, drift)"]
        for n, r in part.items():
            dn = dens.get(n.replace("s2part", "s2dens", 1))
            nuc = critical_nu(r["beta"], r["norm"], 3)
            iv = mean_interval(r["r"], unit="paths")
            der = stationary_r_s2(r["beta"], r["norm"], r["nu"])
            lines.append(f"  {r['norm']} beta = {r['beta']:g} nu/nu_c = {r['nu'] / nuc:.2f} "
                         f"T = {r['T']:g}: derived {der:.4f}, particles {iv.fmt('.4f')}"
                         + (f", density N = 500 {dn['r']:.4f} (drift {dn['drift']:+.1e})"
                            if dn else ""))
            for Ns in (250, 1000):
                dN = dens.get(n.replace("s2part", "s2dens", 1) + f"-N{Ns}")
                if dN:
                    lines.append(f"      density N = {Ns}: {dN['r']:.4f} "
                                 f"(drift {dN['drift']:+.1e})")
    return lines


def _summary_hysteresis(ms):
    hy = {n: r for n, r in ms.items() if n.startswith("hyst")}
    if not hy:
        return []
    lines = ["", "continuation sweeps: nu up through nu_c and back down, each link from the "
             f"previous final density times (1 + {KICK:g} cos theta); T = min(T_max, max("
             f"{T_MIN:g}, c/|lambda_1|)), c = {C_RELAX:g}, down below nu_c "
             f"{C_RELAX + np.log(1 / KICK):.1f}; r at T ('*': not stationary, "
             f"|r(T) - r(0.8T)| >= {DRIFT_TOL:g} or a growth above {GROWTH_TOL:g} r(T)); "
             "derived: the stable stationary r"]
    for chain in dict.fromkeys(r["chain"] for r in hy.values()):
        rs = [r for r in hy.values() if r["chain"] == chain]
        r0 = rs[0]
        nuc = critical_nu(r0["beta"], r0["norm"], r0["d"])
        lines.append(f"  {chain} (nu_c = {nuc:.5f}, dt = {r0['dt']:g})")
        lines.append(f"    {'nu/nu_c':>8}{'T up':>8}{'r up':>10}{'T down':>8}{'r down':>10}"
                     f"{'derived':>10}")
        for f in sorted({round(r["nu"] / nuc, 6) for r in rs}):
            pair = {r["way"]: r for r in rs if abs(r["nu"] / nuc - f) < 1e-6}

            def cell(w, pair=pair):
                r = pair.get(w)
                if r is None:
                    return f"{'':>8}{'':>10}"
                star = " " if r["stationary"] else "*"
                return f"{r['T']:>8.0f}{r['r']:>9.4f}{star}"

            der = (stable_r(r0["beta"], r0["norm"], f * nuc) if r0["d"] == 2
                   else stationary_r_s2(r0["beta"], r0["norm"], f * nuc))
            lines.append(f"    {f:>8.3f}{cell('up')}{cell('down')}{der:>10.4f}")
    return lines
