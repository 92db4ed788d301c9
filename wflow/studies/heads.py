r"""Head-count scaling with confidence intervals: :math:`\langle G^2\rangle \approx aH^b`
([model §8, §9]).

Quantities, per Monte Carlo path: the late-window (:math:`t \ge T/2`) means of :math:`G^2`,
:math:`G^2_{hm}` and :math:`\mathcal D` (the sweep summary's ``G2``, ``G2_hm``,
``dissipation``). Per H: their mean over paths with a 95% Student-t interval on the log
scale (:func:`wflow.analysis.intervals.mean_interval`). Per family: the exponent b of the
least-squares line through :math:`(\log H, \log \overline{G^2})` with a 95% jackknife
Student-t interval over paths, paired across H (:func:`wflow.analysis.intervals.power_law_interval`).
Each interval carries its label (method, paths, and "conditional on one X₀, D(0)" where the
paths share the initial draw: the design cells ``cell_t0w0``, ``s6_t0w0``, ...).

Parts (task-name prefixes):

- ``ou``, ``shared``, ``spread``: OU weights, oscillating weights with shared phase and
  with spread phases, :math:`H \in \{1, 2, \dots, 128\}`, 10 paths, each path with its own
  X0 and D(0) (``init.per_path_tokens``, ``init.per_path_weights``: intervals over
  independent draws of the initial state, not conditional on one draw).
- ``scan_g2=…_beta=…``: b of OU on the 3 × 3 grid ``weights.noise_var``
  :math:`\in \{0.5, 2, 8\}` × β :math:`\in \{0.5, 1, 2\}`, on :math:`H \in \{1, 4, 16, 64\}`.
- ``cell_t?w?``: the 2 × 2 design (per-path tokens yes/no × per-path weights yes/no) at
  :math:`H \in \{1, 16\}`; the (yes, yes) cell is the ``ou`` family. ``s6_t?w?``: the same
  four cells on the Section 6 base itself (n = 200, Δt = 5·10⁻³, T = 20) at H = 1.
- ``resdt_*``, ``resn_*``: resolution checks, Δt halved and n doubled on a subset.

Random numbers: every grid point keeps the base seed (``streams="common"``), so path p
draws the same X0 and (as far as the shapes agree) the same D(0) at every H; the noise
streams differ in shape. The exponent's jackknife therefore leaves a path out at every H at
once (``paired=True``).

Scales. ``full``: n = 64, Δt = 10⁻², T = 10 (the Section 6 base has n = 200, Δt = 5·10⁻³,
T = 20: n and T are reduced to fit the budget; the resolution parts check Δt and n).
``quick``: n = 16, Δt = 0.025, T = 3, 4 paths; OU on :math:`H \in \{1, 4, 16, 64\}`, the
rest on {1, 4}, one cell of the design, Δt/2 on OU H ∈ {1, 4}, no scan and no n
check (seconds; its claim is OU b < −0.5 with
4 H values, ``tests/test_study_heads.py``; the shared phase's b is not claimed per seed: its
interval is).
"""

from __future__ import annotations

import copy

import numpy as np

from wflow.analysis.intervals import CONDITIONAL_X0_D0, bootstrap_interval, mean_interval, power_law_interval
from wflow.studies._base import Study, register_study
from wflow.studies.section6 import SECTION6_BASE
from wflow.sweeps.sweep import expand_grid

#: the three quantities (summary columns) and how they are labelled
QUANTITIES = (("G2", "G²"), ("G2_hm", "G²_hm"), ("dissipation", "𝒟"))
FAMILIES = ("ou", "shared", "spread")
OSC = {"process": "oscillating", "noise_var": 0.0, "scheme": "euler"}

_SCALES = {
    "full": {"n": 64, "dt": 1e-2, "T": 10.0, "paths": 10,
             "heads": (1, 2, 4, 8, 16, 32, 64, 128), "scan_heads": (1, 4, 16, 64),
             "cell_heads": (1, 16), "noise_var": (0.5, 2.0, 8.0), "beta": (0.5, 1.0, 2.0),
             "resdt": {"ou": (1, 4, 16), "shared": (1, 16), "spread": (1, 16)},
             "resn": {"ou": (1, 16)}, "s6": (1,)},
    "quick": {"n": 16, "dt": 2.5e-2, "T": 3.0, "paths": 4,
              "heads": {"ou": (1, 4, 16, 64), "shared": (1, 4), "spread": (1, 4)},
              "scan_heads": (1, 4), "cell_heads": (1, 4), "cells": ((0, 0),),
              "noise_var": (), "beta": (), "resdt": {"ou": (1, 4)}, "resn": {},
              "s6": ()},
}


def _verdict(change, halfwidth):
    if np.isnan(halfwidth):
        return "(no interval)"
    return "ok" if abs(change) < halfwidth else "LARGER"


def _group(point):
    return point.split("-heads=")[0]


@register_study
class Heads(Study):
    """Head-count scaling of the late-window G², G²_hm and 𝒟 with labelled 95% intervals."""

    name = "heads"
    question = ("what is the exponent b of G² ≈ aH^b (OU, oscillating shared/spread; vs noise "
                "and β), with a confidence interval?")
    quick = ("n = 16, T = 3, 4 paths: OU at H ∈ {1, 4, 16, 64}, shared/spread at H ∈ {1, 4}, one "
             "Δt/2 check: OU b < −0.5 (its 95% interval below 0)")
    #: bootstrap resamples of the between-path SD (given from 20 paths on)
    n_resamples = 1999

    def base(self, scale):
        p = _SCALES[scale]
        cfg = copy.deepcopy(SECTION6_BASE)
        cfg["model"]["n"] = p["n"]
        cfg["solver"].update(dt=p["dt"], T=p["T"], paths=p["paths"], record_every=5)
        cfg["init"].update(per_path_tokens=True, per_path_weights=True)
        cfg["diagnostics"]["clustering"] = False
        cfg["output"]["store_tokens"] = False
        return cfg

    def variants(self, base, scale):
        p = _SCALES[scale]

        def fam(cfg, family):
            c = copy.deepcopy(cfg)
            if family != "ou":
                c["weights"] = {**OSC, "phase": family}
            return c

        def grid(cfg, name, heads):
            return expand_grid(cfg, {"model.heads": list(heads)}, name=name)

        tasks = []
        for f in FAMILIES:
            heads = p["heads"][f] if isinstance(p["heads"], dict) else p["heads"]
            tasks += grid(fam(base, f), f, heads)
        for v in p["noise_var"]:  # the noise × β grid
            for b in p["beta"]:
                c = copy.deepcopy(base)
                c["weights"]["noise_var"] = v
                c["model"]["beta"] = b
                tasks += grid(c, f"scan_g2={v:g}_beta={b:g}", p["scan_heads"])
        for tok, w in p.get("cells", ((0, 0), (0, 1), (1, 0))):  # (1, 1): the ou family
            c = copy.deepcopy(base)
            c["init"].update(per_path_tokens=bool(tok), per_path_weights=bool(w))
            tasks += grid(c, f"cell_t{tok}w{w}", p["cell_heads"])
        for tok in (0, 1):  # the 2 x 2 design on the Section 6 base itself (n = 200, T = 20)
            for w in (0, 1):
                if not p["s6"]:
                    break
                c = copy.deepcopy(SECTION6_BASE)
                c["init"].update(per_path_tokens=bool(tok), per_path_weights=bool(w))
                c["diagnostics"]["clustering"] = False
                c["output"]["store_tokens"] = False
                tasks += grid(c, f"s6_t{tok}w{w}", p["s6"])
        for f, heads in p["resdt"].items():
            c = fam(base, f)
            c["solver"]["dt"] = base["solver"]["dt"] / 2
            tasks += grid(c, f"resdt_{f}", heads)
        for f, heads in p["resn"].items():
            c = fam(base, f)
            c["model"]["n"] = 2 * base["model"]["n"]
            tasks += grid(c, f"resn_{f}", heads)
        return tasks

    # ------------------------------------------------------------------------ analysis
    def _rng(self, data, *key):
        seed = int(data.tasks[0][1]["init"]["seed"])
        return np.random.default_rng(np.random.SeedSequence([seed, 13, *key]))

    def collect(self, data):
        """``{group: {H: {column: (P,) array}}}`` from the sweep summary."""
        out = {}
        for point, cfg in data.tasks:
            H = int(cfg["model"]["heads"])
            out.setdefault(_group(point), {})[H] = {
                c: data.column(c, point) for c, _ in QUANTITIES}
        cell11 = out.get("ou", {})
        heads = {H for g, d in out.items() if g.startswith("cell_") for H in d}
        if heads:
            out["cell_t1w1"] = {H: cell11[H] for H in sorted(heads) if H in cell11}
        return out

    @staticmethod
    def conditional(cfg):
        """What the paths of a task share: "" when each path draws its own X₀ and D(0)."""
        tok = bool(cfg["init"].get("per_path_tokens", False))
        w = bool(cfg["init"].get("per_path_weights", False))
        return ("" if tok and w else CONDITIONAL_X0_D0 if not (tok or w) else
                "conditional on one X₀" if not tok else "conditional on one D(0)")

    def fit(self, per_H, column, heads=None, conditional=""):
        """Power-law fit of ``column`` over ``heads`` (default all) of one group: an
        :class:`~wflow.analysis.intervals.Interval` of b (``extra["a"]`` the prefactor)."""
        Hs = sorted(per_H if heads is None else heads)
        Y = np.stack([per_H[H][column] for H in Hs], axis=1)
        if len(Hs) < 2 or not np.all(Y > 0):
            return None
        return power_law_interval(Hs, Y, paired=True, conditional=conditional)

    def analyse(self, data):
        """Everything the summary and the figures report (deterministic: seeded rngs).

        ``means[g, H, c]`` and ``fits[g, c]`` are :class:`~wflow.analysis.intervals.Interval`
        objects; ``conditional[g]`` what the paths of group g share."""
        key = id(data)
        if getattr(self, "_cache", (None,))[0] == key:
            return self._cache[1]
        groups = self.collect(data)
        cond = {}
        for point, cfg in data.tasks:
            cond[_group(point)] = self.conditional(cfg)
        if "ou" in cond:
            cond.setdefault("cell_t1w1", cond["ou"])
        res = {"groups": groups, "means": {}, "fits": {}, "conditional": cond}
        for g, per_H in groups.items():
            for H, cols in per_H.items():
                for c, _ in QUANTITIES:
                    res["means"][g, H, c] = mean_interval(cols[c], conditional=cond.get(g, ""))
            for c, _ in QUANTITIES:
                if len(per_H) >= 2:
                    res["fits"][g, c] = self.fit(per_H, c, conditional=cond.get(g, ""))
        # the tail H >= 4 of each family (the spread phases cancel the forcing's harmonics
        # in the head average from H = 3 on: a change of regime, not a power law)
        for g in FAMILIES:
            tail = tuple(H for H in groups.get(g, {}) if H >= 4)
            if len(tail) >= 3:
                res["fits"][g, "G2", "tail"] = self.fit(groups[g], "G2", tail, cond.get(g, ""))
        # b of the ou family on the subsets the scan and the resolution checks use
        ou = groups.get("ou", {})
        for g, per_H in groups.items():
            if g.startswith(("scan_", "resdt_", "resn_")) and len(per_H) >= 2:
                base = "ou" if g.startswith("scan_") else g.split("_", 1)[1]
                Hs = tuple(sorted(per_H))
                src = groups.get(base, {})
                if all(H in src for H in Hs):
                    res["fits"][base, "G2", Hs] = self.fit(src, "G2", Hs, cond.get(base, ""))
        if ou:
            res["spread"] = {}
            for g in sorted(groups):
                if g.startswith(("cell_", "s6_")):
                    for H, cols in groups[g].items():
                        res["spread"][g, H] = bootstrap_interval(
                            cols["G2"], lambda v, axis=-1: np.std(v, axis=axis, ddof=1),
                            rng=self._rng(data, 3, H), n_resamples=self.n_resamples,
                            conditional=cond.get(g, ""))
        self._cache = (key, res)
        return res

    # ------------------------------------------------------------------------ summary
    def summarize(self, data):
        """Per group and H: the late-window means with their 95% intervals; per group the
        exponent b with its 95% interval; the 2 × 2 design; the resolution checks. Each
        group says the intervals' label (method, paths, what they are conditional on)."""
        r = self.analyse(data)
        groups, means, fits = r["groups"], r["means"], r["fits"]
        lines = ["Late-window (t >= T/2) means over paths [95% CI: Student-t on the log scale]; "
                 "b of a*H^b: least squares on log-log of the means [95% CI: jackknife "
                 "Student-t over paths, a path left out at every H at once (common random "
                 "numbers)]. Each group's label says the paths and what the interval is "
                 "conditional on."]
        table = {k: [] for k in ("group", "H", "quantity", "mean", "low", "high", "paths",
                                 "b", "b_low", "b_high", "b_se", "interval")}

        def row(g, H, c, iv, fit):
            m = iv or fit
            for k, v in zip(table, (g, H, c, *(iv.as_tuple() if iv else (np.nan,) * 3), m.n,
                                    *(fit.as_tuple() if fit else (np.nan,) * 3),
                                    fit.se if fit else np.nan, m.label)):
                table[k].append(v)

        for g in sorted(groups, key=lambda g: (g not in FAMILIES, g)):
            per_H = groups[g]
            first = means[g, min(per_H), "G2"]
            lines.append(f"\n{g}: means {first.label}")
            lines.append(f"{'H':>5}" + "".join(f"{lab:>30}" for _, lab in QUANTITIES) + f"{'P':>4}")
            for H in sorted(per_H):
                cells = []
                for c, _ in QUANTITIES:
                    iv = means[g, H, c]
                    cells.append(iv.fmt(".4g") if not iv.ok else
                                 f"{iv.estimate:.4g} [{iv.low:.3g}, {iv.high:.3g}]")
                    row(g, H, c, iv, None)
                P = per_H[H]["G2"].size
                lines.append(f"{H:>5}" + "".join(f"{s:>30}" for s in cells) + f"{P:>4}")
            for c, lab in QUANTITIES:
                f = fits.get((g, c))
                if f is None:
                    if len(per_H) >= 2:
                        lines.append(f"  b({lab}): no fit (a value is not positive)")
                    continue
                lines.append(f"  b({lab}) = {f.fmt('.3f')} ({f.label}), "
                             f"a = {f.extra['a']:.3g}")
                row(g, "all", c, None, f)
            f = fits.get((g, "G2", "tail"))
            if f is not None:
                lines.append(f"  b(G²) over H >= 4 only = {f.fmt('.3f')} ({f.label})")
                row(g, "H>=4", "G2", None, f)
        lines += self._scan_lines(r)
        lines += self._design_lines(r)
        lines += self._resolution_lines(r, table)
        return "\n".join(lines), table

    @staticmethod
    def scan(r):
        """``[(noise_var, β, fit)]``: b(G²) of OU on each point of the noise × β grid, sorted."""
        out = []
        for g in r["groups"]:
            if g.startswith("scan_g2="):
                v, b = g[len("scan_g2="):].split("_beta=")
                out.append((float(v), float(b), r["fits"].get((g, "G2"))))
        return sorted(out, key=lambda x: x[:2])

    def _scan_lines(self, r):
        rows = self.scan(r)
        if not rows:
            return []
        betas = sorted({b for _, b, _ in rows})
        lab = next((f.label for _, _, f in rows if f is not None), "")
        out = [f"\nOU b(G²) on the noise × β grid [{lab}]:",
               f"{'noise_var':>10}" + "".join(f"{'β = ' + format(b, 'g'):>26}" for b in betas)]
        for v in sorted({v for v, _, _ in rows}):
            cells = []
            for b in betas:
                f = next((f for v2, b2, f in rows if v2 == v and b2 == b), None)
                cells.append(f.fmt(".3f") if f else "—")
            out.append(f"{v:>10g}" + "".join(f"{c:>26}" for c in cells))
        return out

    def _design_lines(self, r):
        out = []
        for kind, title in (("cell_", "study base"), ("s6_", "Section 6 base: n = 200, "
                                                             "Δt = 5e-3, T = 20")):
            out += self._cells_lines(r, kind, title)
        return out

    @staticmethod
    def _cells_lines(r, kind, title):
        groups, fits, spread = r["groups"], r["fits"], r.get("spread", {})
        cells = sorted(g for g in groups if g.startswith(kind))
        if not cells:
            return []
        out = [f"\n2 x 2 design, {title} (t = per-path tokens, w = per-path weights; "
               "1 = yes): late G² mean [95% CI] and its between-path SD [95% CI, percentile "
               "bootstrap, from 20 paths on]"]
        for g in cells:
            for H in sorted(groups[g]):
                m = r["means"][g, H, "G2"]
                s = spread[g, H]
                out.append(f"  {g:<10} H={H:<4} mean {m.fmt('.4g')}  SD {s.fmt('.3g')}  "
                           f"({m.label})")
            f = fits.get((g, "G2"))
            if f is not None:
                out.append(f"  {g:<10} b = {f.fmt('.3f')} ({f.label})")
        # between-path variance: noise alone (t0w0), + X0 (t1w0), + D(0) (t0w1), all (t1w1)
        for H in sorted(groups.get(f"{kind}t0w0", {})):
            v = {g[len(kind):]: spread[g, H].estimate ** 2 for g in cells if (g, H) in spread}
            if len(v) == 4:
                out.append(f"  H={H}: between-path variance of G²: weight noise alone "
                           f"{v['t0w0']:.3g}; added by own X0 {v['t1w0'] - v['t0w0']:+.3g}, "
                           f"by own D(0) {v['t0w1'] - v['t0w0']:+.3g}, by both "
                           f"{v['t1w1'] - v['t0w0']:+.3g}")
        return out

    def _resolution_lines(self, r, table):
        groups, means, fits = r["groups"], r["means"], r["fits"]
        res = sorted(g for g in groups if g.startswith(("resdt_", "resn_")))
        if not res:
            return []
        out = ["\nResolution (Δt halved: resdt_, n doubled: resn_): |change| against the "
               "half-width of the base value's 95% interval (ok if smaller)"]
        for g in res:
            base = g.split("_", 1)[1]
            for H in sorted(groups[g]):
                for c, lab in QUANTITIES:
                    b0, hw = means[base, H, c].estimate, means[base, H, c].halfwidth
                    b1 = means[g, H, c].estimate
                    out.append(f"  {g:<12} H={H:<4} {lab:<6} {b0:.4g} -> {b1:.4g}: "
                               f"|Δ| = {abs(b1 - b0):.2g} vs {hw:.2g} {_verdict(b1 - b0, hw)}")
            Hs = tuple(sorted(groups[g]))
            f0, f1 = fits.get((base, "G2", Hs)), fits.get((g, "G2"))
            if f0 and f1:
                hw = f0.halfwidth
                d = abs(f1.estimate - f0.estimate)
                out.append(f"  {g:<12} b(G²) on H={list(Hs)}: {f0.estimate:.3f} -> "
                           f"{f1.estimate:.3f}: "
                           f"|Δ| = {d:.2g} vs {hw:.2g} {_verdict(d, hw)}")
        return out

    def figures(self, data, outdir, formats):
        from wflow.figures import heads as fig

        r = self.analyse(data)
        r = {**r, "families": FAMILIES, "quantities": QUANTITIES, "scan": self.scan(r)}
        return fig.draw(r, outdir, formats)
