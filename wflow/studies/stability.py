r"""Stability of the flow under perturbed inputs and perturbed weights (seed 003).

Three families of runs against one reference run (same ``init.seed``, hence the same weight
noise path p for every run; only the perturbation differs):

- **tokens**: :math:`X_0^\varepsilon`, every token moved by :math:`\arctan\varepsilon` along a
  random tangent direction (``init.token_perturbation`` = ε); the Grönwall-type estimate
  :math:`\delta(t) \le \delta(0)\, e^{Lt}`, with
  :math:`\delta(t) = \max_i d_S(x_i(t), x_i^\varepsilon(t))`;
- **weights**: :math:`D_h^\varepsilon(0) = D_h(0) + \varepsilon S_h`, :math:`|S_h|_F = 1`
  (``init.weight_perturbation`` = ε): the Γ-convergence statement, trajectories converge as
  ε → 0, at the fitted rate :math:`\max_t\delta(t) \approx C\varepsilon^r`;
- **decay**: weight decay :math:`-\varepsilon D` added to the OU drift. Since
  :math:`\lambda(M - D) - \varepsilon D = (\lambda + \varepsilon)\big(\tfrac{\lambda M}{\lambda +
  \varepsilon} - D\big)`, this *is* the OU process with rate λ + ε and mean λM/(λ + ε); with
  Euler–Maruyama the noise increments :math:`g\sqrt{\Delta t}\,S` do not depend on the rate,
  so the noise path is the same draw for draw.

Measured per record and path: δ(t) (stable geodesic distance,
:func:`wflow.model.diagnostics.geodesic`) and :math:`W_2(\mu_t, \mu_t^\varepsilon)`
(POT, :func:`wflow.model.diagnostics.w2_geodesic`). Fitted per path:

.. math::
    L_G = \max_{t > 0} \frac1t \log\frac{\delta(t)}{\delta(0)} \quad(\text{the smallest } L
    \text{ with } \delta(t) \le \delta(0)e^{Lt} \text{ on the records}),\qquad
    L_{ls} = \text{least-squares slope of } \log\delta(t) \text{ on } t,

from the run with ε = :attr:`Stability.fit_eps`, and the exponent r of
:math:`\max_t \delta \approx C\varepsilon^r` for the weight and decay families; means with a
95% t-interval over the Monte Carlo paths. The **resolution check** repeats the reference, the
fit run and three ε of each weight family at Δt/2.
"""

from __future__ import annotations

import copy

import numpy as np

from wflow.analysis.results import load_source, mean_ci
from wflow.studies._base import Study, register_study
from wflow.sweeps.sweep import expand_grid

__all__ = ["Stability", "stability_curves", "fit_rates"]

STABILITY_BASE = {
    "model": {"d": 3, "n": 64, "beta": 1.0, "heads": 10, "normalization": "head",
              "sign": "descent"},
    "init": {"tokens": "octahedral", "token_noise": 0.05, "weights": "symmetric_gaussian",
             "seed": 0},
    "weights": {"process": "ou", "rate": 1.0, "mean": 1.0, "noise_var": 2.0,
                "scheme": "euler_maruyama"},
    "solver": {"method": "euler", "dt": 0.01, "T": 10.0, "record_every": 10, "paths": 4},
    "diagnostics": {"ledger": False, "clustering": False},
    "output": {"store_tokens": True},
}

FAMILIES = ("tokens", "weights", "decay")


def _label(eps):
    return f"{eps:.0e}".replace("e-0", "e-")


def _decay(cfg, eps):
    """OU with weight decay ε: rate λ + ε, mean λM/(λ + ε) (the same drift, see the module)."""
    w = cfg["weights"]
    lam, M = float(w["rate"]), float(w["mean"])
    w["rate"] = lam + eps
    w["mean"] = lam * M / (lam + eps)
    return cfg


def _thin(eps):
    """The ε of the Δt/2 check: every third (full), every other (quick), ends included."""
    return tuple(eps[:: 3 if len(eps) > 4 else 2])


def _perturbed(base, family, eps):
    cfg = copy.deepcopy(base)
    if family == "tokens":
        cfg["init"]["token_perturbation"] = eps
    elif family == "weights":
        cfg["init"]["weight_perturbation"] = eps
    else:
        _decay(cfg, eps)
    return cfg


@register_study
class Stability(Study):
    """Perturbed inputs (Grönwall rate L) and perturbed weights / weight decay (rate in ε).

    Full: n = 64, H = 10, OU weights (Section 6 parameters), 4 paths, Δt = 0.01, T = 10,
    ε ∈ {1e-8, …, 1e-2}, and the Δt/2 check. Quick: n = 24, H = 4, 2 paths, Δt = 0.02, T = 2,
    ε ∈ {1e-8, 1e-6, 1e-4} (tokens), {1e-6, 1e-2} (weights, decay), no Δt/2 check.
    """

    name = "stability"
    question = ("how fast do perturbed inputs separate (Grönwall rate L), and do trajectories "
                "converge as weight perturbations and weight decay ε → 0 (rate in ε)?")
    quick = ("n = 24, H = 4, 2 paths, T = 2, ε ∈ {1e-8, 1e-6, 1e-4} (tokens), {1e-6, 1e-2} "
             "(weights, decay), no Δt/2 check (δ/ε coincide; rate 1 in ε)")
    fit_eps = 1e-6

    def base(self, scale):
        cfg = copy.deepcopy(STABILITY_BASE)
        if scale == "quick":
            cfg["model"].update(n=24, heads=4)
            cfg["solver"].update(dt=0.02, T=2.0, record_every=5, paths=2)
        return cfg

    @staticmethod
    def epsilons(scale):
        if scale == "quick":
            return {"tokens": (1e-8, 1e-6, 1e-4), "weights": (1e-6, 1e-2),
                    "decay": (1e-6, 1e-2)}
        full = tuple(10.0 ** -k for k in range(8, 1, -1))
        return {f: full for f in FAMILIES}

    def variants(self, base, scale):
        eps = self.epsilons(scale)
        half = copy.deepcopy(base)
        half["solver"]["dt"] = base["solver"]["dt"] / 2
        half["solver"]["record_every"] = 2 * base["solver"]["record_every"]
        runs = [("", base, eps)]
        if scale == "full":  # the resolution check (quick mode has none)
            runs.append(("half-", half, {"tokens": (self.fit_eps,),
                                         "weights": _thin(eps["weights"]),
                                         "decay": _thin(eps["decay"])}))
        tasks = []
        for tag, cfg, sets in runs:
            tasks += expand_grid(cfg, {}, name=f"{tag}ref")
            for fam in FAMILIES:
                for e in sets[fam]:
                    tasks += expand_grid(_perturbed(cfg, fam, e), {},
                                         name=f"{tag}{fam}-eps={_label(e)}")
        return tasks

    def summarize(self, data):
        return stability_summary(data, self.fit_eps)

    def figures(self, data, outdir, formats):
        from wflow.figures import stability as figs

        return figs.draw(stability_curves(data), fit_rates(stability_curves(data), self.fit_eps),
                         outdir, formats)


# ---------------------------------------------------------------------------------- analysis
def _parse(name):
    """``(half, family, eps)`` of a task name (family "ref" with eps 0)."""
    half = name.startswith("half-")
    rest = name[5:] if half else name
    if rest == "ref":
        return half, "ref", 0.0
    fam, e = rest.split("-eps=")
    return half, fam, float(e)


def stability_curves(data, w2=True):
    r"""Per task: ``{(half, family, eps): {"t", "delta" (records, P), "w2" (records, P)}}``.

    ``delta`` is :math:`\max_i d_S(x_i, x_i^\varepsilon)` against the reference of the same
    Δt, ``w2`` is :math:`W_2(\mu_t, \mu_t^\varepsilon)` (NaN if ``w2`` is False)."""
    from wflow.model.diagnostics import geodesic, w2_geodesic

    if getattr(data, "_stability_curves", None) is not None:
        return data._stability_curves
    loaded = {}
    for path, (name, _) in zip(data.paths, data.tasks):
        cfg, arr = load_source(path)
        loaded[_parse(name)] = (np.asarray(arr["t"], float), np.asarray(arr["X"], float), cfg)
    out = {}
    for key, (t, X, cfg) in loaded.items():
        half, fam, eps = key
        if fam == "ref":
            continue
        _, Xr, _ = loaded[(half, "ref", 0.0)]
        delta = geodesic(X, Xr).max(axis=-1)  # (records, P)
        W = np.full(delta.shape, np.nan)
        if w2:
            for r in range(X.shape[0]):
                for p in range(X.shape[1]):
                    W[r, p] = w2_geodesic(X[r, p], Xr[r, p])
        out[key] = {"t": t, "delta": delta, "w2": W, "dt": float(cfg["solver"]["dt"])}
    data._stability_curves = out
    return out


def gronwall_rates(t, delta):
    r"""Per path: :math:`L_G = \max_{t>0} \log(\delta(t)/\delta(0))/t` and the least-squares
    slope :math:`L_{ls}` of :math:`\log\delta` on t. ``delta`` is (records, P)."""
    t = np.asarray(t, float)
    m = t > 0
    ratio = np.log(delta[m] / delta[0])
    LG = np.max(ratio / t[m, None], axis=0)
    A = np.vstack([t, np.ones_like(t)]).T
    Lls = np.linalg.lstsq(A, np.log(delta), rcond=None)[0][0]
    return LG, Lls


def fit_rates(curves, fit_eps=1e-6):
    r"""The fitted rates, per Δt (``half`` False/True): ``{half: {"LG", "Lls" (P,),
    "r_weights", "r_decay" (P,), "C_...": ...}}``; r from :math:`\max_t\delta \approx
    C\varepsilon^r` by least squares on log–log axes, per path."""
    out = {}
    for half in (False, True):
        key = (half, "tokens", fit_eps)
        if key not in curves:
            continue
        c = curves[key]
        LG, Lls = gronwall_rates(c["t"], c["delta"])
        res = {"LG": LG, "Lls": Lls, "dt": c["dt"]}
        for fam in ("weights", "decay"):
            eps = sorted(e for (h, f, e) in curves if h == half and f == fam)
            if len(eps) < 2:
                continue
            dmax = np.array([np.max(curves[(half, fam, e)]["delta"], axis=0) for e in eps])
            x = np.log(eps)
            slope, icpt = np.polyfit(x, np.log(dmax), 1)
            res[f"r_{fam}"] = np.atleast_1d(slope)
            res[f"C_{fam}"] = np.exp(np.atleast_1d(icpt))
        out[half] = res
    return out


def coincidence(curves, fit_eps=1e-6, eps_max=1e-4, half=False):
    r"""Largest relative gap :math:`\max_{t,p} |\delta_\varepsilon(t)/\varepsilon\, /\,
    (\delta_{\varepsilon_0}(t)/\varepsilon_0) - 1|` over the token runs with ε ≤ ``eps_max``,
    against ε₀ = ``fit_eps`` (the curves of δ/ε coincide in the linear regime)."""
    base = curves[(half, "tokens", fit_eps)]["delta"] / fit_eps
    gaps = {}
    for (h, fam, e), c in curves.items():
        if h == half and fam == "tokens" and e <= eps_max and e != fit_eps:
            gaps[e] = float(np.max(np.abs(c["delta"] / e / base - 1.0)))
    return gaps


def stability_summary(data, fit_eps=1e-6):
    """``(text, table)``: per family and ε the δ(T)/ε, max_t δ/ε, W₂(T)/ε (means over paths),
    the fitted rates with 95% intervals, and their Δt/2 resolution check."""
    curves = stability_curves(data)
    rates = fit_rates(curves, fit_eps)
    table = {k: [] for k in ("dt", "family", "eps", "delta_T_over_eps", "max_delta_over_eps",
                             "w2_T_over_eps", "grows_below_envelope")}
    lines = ["per-run numbers (means over paths; δ = max_i d_S(x_i, x_i^ε); '≤ env': "
             f"δ(t) ≤ (1 + 1e-3) δ(0)e^(L_G t) on every record and path, L_G per path from ε = {fit_eps:g})",
             f"{'dt':>8}{'family':>9}{'eps':>9}{'δ(T)/ε':>12}{'max δ/ε':>12}{'W2(T)/ε':>12}"
             f"{'≤ env':>7}"]
    for key in sorted(curves, key=lambda k: (k[0], FAMILIES.index(k[1]), k[2])):
        half, fam, eps = key
        c = curves[key]
        t = c["t"]
        below = np.nan
        if fam == "tokens" and half in rates:
            env = c["delta"][0] * np.exp(np.outer(t, rates[half]["LG"]))  # per path
            below = float(np.all(c["delta"] <= env * (1 + 1e-3)))
        vals = (c["dt"], fam, eps, float(np.mean(c["delta"][-1]) / eps),
                float(np.mean(np.max(c["delta"], axis=0)) / eps),
                float(np.nanmean(c["w2"][-1]) / eps), below)
        for k, v in zip(table, vals):
            table[k].append(v)
        lines.append(f"{vals[0]:>8.4g}{fam:>9}{eps:>9.0e}{vals[3]:>12.4g}{vals[4]:>12.4g}"
                     f"{vals[5]:>12.4g}{'' if np.isnan(below) else ('yes' if below else 'NO'):>7}")
    lines.append("")
    lines.append("fitted rates: mean over paths ± 95% t-interval; Δt/2 = the resolution check")
    lines.append(f"{'quantity':<44}{'Δt':>14}{'Δt/2':>14}{'|change|':>10}{'< interval':>11}")
    names = {"LG": "Grönwall rate L_G (smallest L, δ ≤ δ0 e^{Lt})",
             "Lls": "least-squares growth rate L_ls of log δ",
             "r_weights": "exponent r, weights: max δ ≈ C ε^r",
             "r_decay": "exponent r, decay: max δ ≈ C ε^r"}
    for q, label in names.items():
        a = rates[False].get(q)
        b = rates.get(True, {}).get(q)
        if a is None:
            continue
        ma, ca = float(np.mean(a)), mean_ci(a)
        s = f"{label:<44}{ma:>8.4g} ±{ca:<5.2g}"
        if b is not None:
            mb, cb = float(np.mean(b)), mean_ci(b)
            ok = abs(ma - mb) < max(ca, cb) if np.isfinite(max(ca, cb)) else False
            s += f"{mb:>8.4g} ±{cb:<5.2g}{abs(ma - mb):>10.2g}{'yes' if ok else 'NO':>11}"
        lines.append(s)
    gaps = coincidence(curves, fit_eps)
    lines.append("")
    lines.append("coincidence of δ/ε (ε ≤ 1e-4) with the ε = %g curve: " % fit_eps
                 + ", ".join(f"ε = {e:g}: {g:.2e}" for e, g in sorted(gaps.items())))
    return "\n".join(lines), table
