r"""Escape times of the metastability study beyond T = 10⁵ by collapsing converged clusters
(``wflow.studies._collapse``; experiments/metastability.md, "S¹ beyond β = 8 by collapsing
clusters").

Three parts, each printed and written to ``--out`` (JSON):

- ``validate``: per system, the collapsed τ against wflow's full solver (dopri5,
  rtol = atol = 1e-9, event_tol 1e-8, no collapse) on the study's systems 0 … P−1 of
  S¹ and S² at β = 5, 6, 7, T = 2·10⁴;
- ``delta``: τ at δ = 1e-11 and at rtol = 1e-12 against the default (δ = 1e-13,
  rtol = 1e-10) on S¹ at β = 9, 10;
- ``cells``: the Kaplan–Meier median of τ with its 95 % band and the fraction escaped, per
  (d, β), 32 systems (the study's), censored at T = 10⁸; and the growth law over β ≥ 5
  (``fit_growth``).

Usage::

    python experiments/metastability_collapse.py --out collapse.json
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import numpy as np

from wflow.analysis.intervals import km_median_interval, proportion_interval
from wflow.studies._collapse import escape_time, study_tokens
from wflow.studies.metastability import FIT_BETA_MIN, _fmt_km, cell_name, fit_growth


def full_solver(d, beta, paths, T):
    """wflow's event times of the study's cell (d, β), dopri5 at rtol = atol = 1e-9."""
    from wflow.engine.run import simulate
    from wflow.studies import StudyOptions, get_study

    cfg = copy.deepcopy(dict(get_study("metastability").tasks(StudyOptions(scale="full")))
                        [cell_name(d, beta)])
    cfg["solver"].update(method="dopri5", rtol=1e-9, atol=1e-9, T=T, paths=paths,
                         event_tol=1e-8)
    tau = np.asarray(simulate(cfg)["event_time"], dtype=float)[-1]
    return np.where(tau <= T, tau, np.inf)


def collapsed(d, beta, paths, T, **kw):
    X = study_tokens(d, beta, paths)
    return np.array([escape_time(X[p], beta, T=T, **kw)["tau"] for p in range(paths)])


def validate(paths, T, cells):
    out = {}
    for d, beta in cells:
        ref = full_solver(d, beta, paths, T)
        new = collapsed(d, beta, paths, T)
        both = np.isfinite(ref) & np.isfinite(new)
        rel = np.abs(new[both] - ref[both]) / ref[both]
        out[f"{d},{beta:g}"] = dict(full=ref.tolist(), collapsed=new.tolist(),
                                    censoring_agrees=bool(np.all(np.isfinite(ref)
                                                                 == np.isfinite(new))),
                                    max_rel=float(rel.max()) if rel.size else None,
                                    n_compared=int(both.sum()))
        print(f"validate d = {d}, β = {beta:g}: {both.sum()} systems escaped in both, max "
              f"relative difference {rel.max():.2e}; censoring agrees: "
              f"{out[f'{d},{beta:g}']['censoring_agrees']}", flush=True)
    return out


def sensitivity(paths, T, betas):
    out = {}
    for beta in betas:
        base = collapsed(2, beta, paths, T)
        for label, kw in (("delta=1e-11", dict(delta=1e-11)), ("rtol=1e-12", dict(rtol=1e-12,
                                                                                  atol=1e-14))):
            alt = collapsed(2, beta, paths, T, **kw)
            both = np.isfinite(base) & np.isfinite(alt)
            rel = np.abs(alt[both] - base[both]) / base[both]
            out[f"{beta:g},{label}"] = dict(max_rel=float(rel.max()), median_rel=float(
                np.median(rel)), censoring_agrees=bool(np.all(np.isfinite(base)
                                                              == np.isfinite(alt))))
            print(f"sensitivity S¹ β = {beta:g}, {label}: max relative change of τ "
                  f"{rel.max():.2e} (median {np.median(rel):.2e}) over {both.sum()} systems; "
                  f"censoring agrees: {out[f'{beta:g},{label}']['censoring_agrees']}",
                  flush=True)
    return out


def cells(paths, T, grid):
    out, by_d = {}, {}
    for d, beta in grid:
        t0 = time.process_time()
        tau = collapsed(d, beta, paths, T)
        cpu = time.process_time() - t0
        med = km_median_interval(np.where(np.isfinite(tau), tau, np.nan), T, unit="systems")
        esc = proportion_interval(int(np.isfinite(tau).sum()), tau.size, unit="systems")
        out[f"{d},{beta:g}"] = dict(tau=tau.tolist(), median=med.as_tuple(),
                                    escaped=esc.as_tuple(), cpu=cpu)
        by_d.setdefault(d, ([], []))
        by_d[d][0].append(beta)
        by_d[d][1].append(med)
        print(f"d = {d}, β = {beta:g}: KM median {_fmt_km(med)}, escaped by T = {T:g}: "
              f"{esc.fmt('.2f')}; {cpu:.1f} CPU-s", flush=True)
    for d, (betas, meds) in by_d.items():
        f = fit_growth(betas, meds, beta_min=FIT_BETA_MIN)
        out[f"fit,{d}"] = dict(b=f.as_tuple(), a=f.extra["a"], a_se=f.extra.get("a_se"),
                               chi2_red=f.extra.get("chi2_red"),
                               betas=[float(b) for b in f.extra.get("betas", [])])
        print(f"growth law d = {d}: b = {f.fmt('.3g')}; a = {f.extra['a']:.3g} ± "
              f"{f.extra.get('a_se', float('nan')):.2g}; reduced χ² "
              f"{f.extra.get('chi2_red', float('nan')):.2g}; β = {f.extra.get('betas')}",
              flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="metastability_collapse.json")
    ap.add_argument("--parts", default="validate,delta,cells")
    ap.add_argument("--paths", type=int, default=32)
    ap.add_argument("--T", type=float, default=1e8)
    ap.add_argument("--dims", default="2")
    ap.add_argument("--betas", default="5,6,7,8,9,10")
    args = ap.parse_args(argv)
    parts = args.parts.split(",")
    res = {}
    t0 = time.process_time()
    if "validate" in parts:
        res["validate"] = validate(16, 2e4, [(d, b) for d in (2, 3) for b in (5.0, 6.0, 7.0)])
    if "delta" in parts:
        res["delta"] = sensitivity(args.paths, args.T, (9.0, 10.0))
    if "cells" in parts:
        grid = [(int(d), float(b)) for d in args.dims.split(",") for b in args.betas.split(",")]
        res["cells"] = cells(args.paths, args.T, grid)
    res["cpu_s"] = time.process_time() - t0
    print(f"{res['cpu_s']:.0f} CPU-s", flush=True)
    with open(args.out, "w") as fh:
        json.dump(res, fh, indent=1, default=float)


if __name__ == "__main__":
    main()
