r"""The standard studies, each a sweep plus a summary table computed from the result files.

- ``section6``: the paper's Section 6 [model §9]: S², n = 200, β = 1, Δt = 5·10⁻³, T = 20,
  H ∈ {1, 10, 100}; OU weights with 10 Monte Carlo paths and oscillating weights
  (shared phase) with one path. Summary: late-window G² per H with a 95% CI over
  paths, the fit :math:`G^2 \approx aH^b` per family (expected OU b ≈ −1,
  oscillating b ≈ 0), and clustering at T (clustering vs non-clustering on S²).
- ``energy``: the discrete energy identity: deterministic oscillating weights (shared, H = 10,
  n = 50, T = 2), Euler / Heun / RK4 over Δt ∈ {0.02, 0.01, 0.005, 0.0025}; the exact ledger
  residual and its fitted order (expected min(p, 2)), the telescoping error, ∫G²/∫𝒟.
- ``laplacian``: attention vs Laplacian heads (none, half, all of H = 4), OU weights:
  within-sequence variance, spectral rank, order parameter and clusters at T.

``scale = "quick"`` shrinks T and the path count (a smoke test of the whole pipeline).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from . import config as _config
from .analysis import fit_power_law, head_scaling_data, load_source
from .sweep import expand_grid, run_sweep

__all__ = ["STUDIES", "section6_tasks", "laplacian_tasks", "energy_tasks", "run_study",
           "summarize_section6", "summarize_energy"]

SECTION6_BASE = {
    "model": {"d": 3, "n": 200, "beta": 1.0, "normalization": "head", "sign": "descent"},
    "init": {"tokens": "octahedral", "token_noise": 0.05, "weights": "symmetric_gaussian",
             "seed": 0},
    "weights": {"process": "ou", "rate": 1.0, "mean": 1.0, "noise_var": 2.0,
                "scheme": "euler_maruyama"},
    "solver": {"method": "euler", "dt": 5e-3, "T": 20.0, "record_every": 5, "paths": 10},
    "diagnostics": {"ledger": False, "clustering": True},
    "output": {"store_tokens": True},
}


def _scaled(base, scale):
    cfg = copy.deepcopy(base)
    if scale == "quick":
        cfg["solver"]["T"] = 0.5
        cfg["solver"]["paths"] = min(cfg["solver"]["paths"], 2)
    return cfg


def section6_tasks(scale="full", heads=(1, 10, 100), ledger=False, overrides=()):
    """Tasks (name, config) of the paper's Section 6: OU × heads (10 paths) and oscillating
    (shared phase, 1 path) × heads."""
    ou = _scaled(SECTION6_BASE, scale)
    ou["diagnostics"]["ledger"] = bool(ledger)
    ou = _config.apply_overrides(ou, list(overrides))
    osc = copy.deepcopy(ou)
    osc["weights"] = {"process": "oscillating", "phase": "shared", "noise_var": 0.0,
                      "scheme": "euler"}
    osc["solver"]["paths"] = 1
    return (expand_grid(ou, {"model.heads": list(heads)}, name="ou")
            + expand_grid(osc, {"model.heads": list(heads)}, name="oscillating"))


def laplacian_tasks(scale="full", overrides=()):
    """Attention vs Laplacian heads: H = 4, laplacian_heads ∈ {0, 2, 4}, OU weights."""
    base = _scaled(SECTION6_BASE, scale)
    base["model"]["heads"] = 4
    base["solver"]["T"] = min(base["solver"]["T"], 10.0)
    base["solver"]["paths"] = min(base["solver"]["paths"], 4)
    base = _config.apply_overrides(base, list(overrides))
    return expand_grid(base, {"model.laplacian_heads": [0, 2, 4]}, name="laplacian")


ENERGY_DTS = (0.02, 0.01, 0.005, 0.0025)


def energy_tasks(scale="full", overrides=()):
    """The discrete energy identity: oscillating shared weights, three solvers, four Δt."""
    T = 2.0 if scale == "full" else 0.4
    base = {"model": {"n": 50, "heads": 10}, "init": {"seed": 3},
            "weights": {"process": "oscillating", "phase": "shared", "noise_var": 0.0},
            "solver": {"T": T, "paths": 1}, "diagnostics": {"clustering": False, "ledger": True},
            "output": {"store_tokens": False}}
    base = _config.apply_overrides(base, list(overrides))
    tasks = []
    for method in ("euler", "heun", "rk4"):
        for dt in ENERGY_DTS:
            cfg = copy.deepcopy(base)
            cfg["solver"].update(method=method, dt=dt, record_every=int(round(T / dt)))
            tasks += expand_grid(cfg, {}, name=f"energy-{method}-dt={dt:g}")
    return tasks


def summarize_energy(paths):
    """Ledger residual at T per solver and Δt, its fitted order, telescoping error, ∫G²/∫𝒟."""
    rows = {}
    for p in paths:
        cfg, arr = load_source(p)
        rows.setdefault(cfg["solver"]["method"], []).append(
            (cfg["solver"]["dt"], abs(_final_mean(arr, "ledger_residual")),
             float(np.nanmax(np.abs(arr["ledger_telescoping"]))),
             _final_mean(arr, "int_G2") / _final_mean(arr, "int_dissipation")))
    lines = [f"{'method':<8}" + "".join(f"{'dt=' + format(dt, 'g'):>12}" for dt in ENERGY_DTS)
             + f"{'order':>8}{'max telescoping':>18}{'int G2/int D':>14}"]
    for method, r in rows.items():
        r.sort(reverse=True)
        dts = np.array([x[0] for x in r])
        res = np.array([x[1] for x in r])
        order = float(np.polyfit(np.log(dts), np.log(res), 1)[0])
        lines.append(f"{method:<8}" + "".join(f"{e:>12.3e}" for e in res) + f"{order:>8.2f}"
                     f"{max(x[2] for x in r):>18.1e}{r[-1][3]:>14.3f}")
    return "\n".join(lines)


def _final_mean(arrays, key):
    a = np.asarray(arrays[key], dtype=float)
    return float(np.nanmean(a[-1]))


def summarize_section6(paths, window=None):
    """Text table + dict from the Section 6 result files (late window t ≥ T/2 by default)."""
    fam = {"ou": [], "oscillating": []}
    for p in paths:
        fam["oscillating" if Path(p).name.startswith("oscillating") else "ou"].append(p)
    lines, out = [], {}
    for name, srcs in fam.items():
        if not srcs:
            continue
        data = head_scaling_data(srcs, window)
        lines.append(f"{name}: late-window mean G² (95% CI over paths)")
        lines.append(f"{'H':>6}{'G2':>12}{'CI':>12}{'paths':>7}{'order':>8}{'clusters':>10}")
        finals = {}
        for s in srcs:
            cfg, arr = load_source(s)
            finals[cfg["model"]["heads"]] = (_final_mean(arr, "order_parameter"),
                                             _final_mean(arr, "n_clusters"))
        for H, m, ci, np_ in zip(data["H"], data["mean"], data["ci"], data["paths"]):
            op, nc = finals.get(int(H), (np.nan, np.nan))
            lines.append(f"{int(H):>6}{m:>12.4g}{ci:>12.2g}{np_:>7}{op:>8.3f}{nc:>10.1f}")
        fit = None
        if len(data["H"]) >= 2:
            a, b, se = fit_power_law(data["H"], data["mean"])
            fit = (a, b, se)
            lines.append(f"fit G2 = a H^b: a = {a:.4g}, b = {b:.3f} ± {se:.2g}")
        out[name] = {"H": data["H"].tolist(), "G2": data["mean"].tolist(),
                     "ci": data["ci"].tolist(), "fit": fit}
    return "\n".join(lines), out


def summarize_table(paths, keys=("variance", "spectral_rank", "order_parameter", "n_clusters",
                                 "G2")):
    """Final-record means over paths of ``keys``, one row per result file."""
    lines = [f"{'run':<34}" + "".join(f"{k:>16}" for k in keys)]
    for p in paths:
        _, arr = load_source(p)
        lines.append(f"{Path(p).stem:<34}" + "".join(f"{_final_mean(arr, k):>16.4g}" for k in keys))
    return "\n".join(lines)


STUDIES = {
    "section6": "the paper's Section 6: OU and oscillating weights over H ∈ {1, 10, 100}",
    "energy": "the discrete energy identity: ledger residual orders of Euler, Heun, RK4",
    "laplacian": "attention vs Laplacian heads (0, 2, 4 of H = 4), OU weights",
}


def run_study(name, outdir, scale="full", executor="serial", address=None, n_workers=None,
              overrides=(), ledger=False, progress=False):
    """Run a study into ``outdir`` and return its summary text."""
    if name == "section6":
        tasks = section6_tasks(scale, ledger=ledger, overrides=overrides)
    elif name == "laplacian":
        tasks = laplacian_tasks(scale, overrides=overrides)
    elif name == "energy":
        tasks = energy_tasks(scale, overrides=overrides)
    else:
        from .errors import ConfigError

        raise ConfigError(f"study = {name!r}: allowed values are {', '.join(STUDIES)}")
    rows = run_sweep(tasks, outdir, executor=executor, address=address, n_workers=n_workers,
                     progress=progress)
    paths = [r["path"] for r in rows]
    timing = "\n".join(f"{r['name']:<34}{r['action']:<20}{r['elapsed']:>9.1f} s" for r in rows)
    if name == "section6":
        text, _ = summarize_section6(paths)
    elif name == "energy":
        text = summarize_energy(paths)
    else:
        text = summarize_table(paths)
    return f"{timing}\n\n{text}"
