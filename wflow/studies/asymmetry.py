r"""The symmetric/antisymmetric balance of D and the layer-norm placement: how they change
clustering [model §1b "The symmetric/antisymmetric balance", §1c].

Many independent small systems, as the ``phase`` study (:data:`wflow.studies.phase.PHASE_BASE`):
n = 32 tokens i.i.d. uniform on :math:`S^1` (d = 2), one head, identity values, head
normalisation, ascent, and a frozen interaction of antisymmetric fraction α,

.. math:: D(\alpha) = \sqrt{1-\alpha^2}\, S + \alpha A, \qquad S = I, \qquad
          A = \sqrt d\, \frac{\Xi - \Xi^\top}{\lVert \Xi - \Xi^\top \rVert_F},

Ξ with i.i.d. N(0, 1) entries, one per system (``init.weights = "gaussian"``,
``init.per_path_weights``). Since :math:`\langle S, A\rangle_F = 0` and
:math:`\lVert S\rVert_F = \lVert A\rVert_F = \sqrt d`, :math:`\lVert D\rVert_F = \sqrt d` and
:math:`\lVert D - D^\top\rVert_F / (2\lVert D\rVert_F) = \alpha` exactly (the
``antisymmetry`` of an imported head, [model §5c]); on :math:`S^1`, :math:`A = \pm J` (the
rotation by π/2) and :math:`D = R_{\pm\varphi}`, :math:`\sin\varphi = \alpha`: the logit
:math:`\beta\cos(\theta_j - \theta_i \mp \varphi)` favours the keys ahead by φ. α = 0 is the
``phase`` study's D = I. The weight process is :class:`Skew`, named by module path
(``weights.process = "wflow.studies.asymmetry:skew_0.5"``, :func:`skew_process`).

Per (placement, α, β) cell, P systems (the Monte Carlo paths, ``init.per_path_tokens``):

- the pooled merged fraction F(t) and its half-merge time :math:`t_{1/2}` with the 95%
  percentile bootstrap interval over systems (:func:`wflow.studies.phase.pooled_fraction`,
  :func:`wflow.studies.phase.half_time_interval`): the phase diagram over (α, β);
- per system, the half-merge time :math:`\tau_p = \inf\{t: f_p(t) \ge 1/2\}` and the
  one-cluster time :math:`\tau^1_p = \inf\{t: f_p(t) = 1\}` (every pair within cosine
  0.999), from the records (linear interpolation between records,
  :func:`wflow.studies.phase.half_time`), right-censored at T: Kaplan–Meier medians with
  their 95% log-log bands (:func:`wflow.analysis.intervals.km_median_interval`);
- the cluster count ``n_clusters`` (``diagnostics.cluster_angle`` = 0.1) at fixed times:
  mean over systems with a Student-t interval (log scale).

Placements (``model.layernorm``, [model §1c]): ``post`` over the whole (α, β) grid; ``pre``,
``peri``, ``ngpt`` (α_nGPT = 0.2) and ``mix`` (switch at t = 5) on a smaller grid and a
shorter T, the post cells censored at that T for the comparison. Every cell steps with
explicit Euler, Δt = 0.05 (the ``phase`` study's step): adaptive steps, whose events would
locate the times exactly, are refused with placements other than post, so one stepper
serves all. Records are geometric in time (fixed steps round them to the step grid).
Resolution check: a few cells run again with Δt/2 (same systems); the summary compares the
pooled t_1/2 and the KM median of τ with the half-width of the Δt interval.

Quick: n = 16, 24 systems, T = 20, post α ∈ {0, 0.5, 1} × β ∈ {1, 4}, pre and ngpt at
α ∈ {0, 1}, β = 4, Δt/2 at (post, 0.5, 4).

The two-token law (``tests/test_study_asymmetry.py``): for n = 2 and α = 1 (any d, any β)
:math:`\rho = \langle x_1, x_2\rangle` obeys :math:`\dot\rho = 1 - \rho^2` (:func:`two_token_rho`).
"""

from __future__ import annotations

import copy
import math
import re

import numpy as np

from wflow.analysis.intervals import km_median_interval, mean_interval
from wflow.analysis.results import load_source
from wflow.errors import ConfigError
from wflow.model.weights import WeightProcess, _batch
from wflow.studies._base import Study, register_study
from wflow.studies.phase import PHASE_BASE, half_time, half_time_interval, pooled_fraction
from wflow.sweeps.sweep import expand_grid

__all__ = ["Asymmetry", "Skew", "skew_process", "skew_matrices", "two_token_rho",
           "two_token_angle_rate", "PLACEMENTS"]

#: the placements compared (``model.layernorm``, [model §1c])
PLACEMENTS = ("post", "pre", "peri", "ngpt", "mix")

_SCALES = {
    "full": dict(n=32, paths=32, T=1000.0, alphas=(0.0, 0.25, 0.5, 0.75, 1.0),
                 betas=(1.0, 2.0, 4.0, 8.0), records=160,
                 other=("pre", "peri", "ngpt", "mix"), other_paths=24, other_T=200.0,
                 other_alphas=(0.0, 0.5, 1.0), other_betas=(1.0, 8.0),
                 halved=(("post", 0.5, 8.0), ("post", 1.0, 8.0), ("pre", 1.0, 8.0),
                         ("ngpt", 0.5, 8.0))),
    "quick": dict(n=16, paths=24, T=20.0, alphas=(0.0, 0.5, 1.0), betas=(1.0, 4.0), records=40,
                  other=("pre", "ngpt"), other_paths=24, other_T=20.0,
                  other_alphas=(0.0, 1.0), other_betas=(4.0,),
                  halved=(("post", 0.5, 4.0),)),
}
_NAME = re.compile(r"skew_(?P<alpha>[0-9.eE+-]+)")
_MODULE = __name__


# ----------------------------------------------------------------------------- the weights
def skew_matrices(xi, alpha):
    r"""The interaction of antisymmetric fraction α built from Gaussian matrices ``xi``:

    .. math:: D = \sqrt{1-\alpha^2}\, I + \alpha\sqrt d\,
              \frac{\Xi - \Xi^\top}{\lVert \Xi - \Xi^\top\rVert_F},

    so :math:`\lVert D\rVert_F = \sqrt d` and :math:`\lVert D - D^\top\rVert_F = 2\alpha\sqrt d`.

    Parameters
    ----------
    xi : (..., d, d) array
        Matrices whose antisymmetric parts are not zero (Gaussian draws).
    alpha : float in [0, 1]

    Returns
    -------
    (..., d, d) array; exactly the identity at α = 0 (``xi`` is then not read).
    """
    xi = np.asarray(xi, dtype=float)
    d = xi.shape[-1]
    eye = np.broadcast_to(np.eye(d), xi.shape)
    if alpha == 0:
        return np.array(eye)
    a = xi - np.swapaxes(xi, -1, -2)
    norm = np.linalg.norm(a, axis=(-2, -1), keepdims=True)
    if np.any(norm == 0):
        raise ConfigError("init.weights: the skew process needs random initial matrices "
                          "(init.weights = 'gaussian'); their antisymmetric part is zero")
    return math.sqrt(1.0 - alpha ** 2) * eye + alpha * math.sqrt(d) * a / norm


class Skew(WeightProcess):
    r"""Frozen weights of antisymmetric fraction α [model §1b].

    .. math:: D_h(t) = D_h(0) = \sqrt{1-\alpha^2}\, I + \alpha A_h, \qquad
              A_h = \sqrt d\,\frac{\Xi_h - \Xi_h^\top}{\lVert\Xi_h - \Xi_h^\top\rVert_F},

    Ξ_h the initial weights drawn by ``init.weights = "gaussian"`` (per system with
    ``init.per_path_weights``), :func:`skew_matrices`. α is part of the process name:
    ``weights.process = "wflow.studies.asymmetry:skew_<α>"`` (:func:`skew_process`), so the
    process has no keys of its own and a run is found again from its stored configuration.
    Needs ``model.interaction = "general"`` when α > 0.
    """

    name = "skew"
    alpha = 0.0
    accepts_general = True
    deterministic = True
    #: f = 0: adaptive steps skip integrating D ([model §6d])
    piecewise_constant = True

    def initial(self, D0):
        if self.alpha > 0 and self.symmetric:
            raise ConfigError(f"model.interaction = 'symmetric' with weights.process = "
                              f"{skew_process(self.alpha)!r}: must be 'general' (D is not "
                              "symmetric for α > 0)")
        return skew_matrices(D0, self.alpha)

    def drift(self, D, t):
        return np.zeros(np.shape(D))

    def step(self, D, t, dt, rngs=None):
        return np.array(_batch(D))

    def describe(self):
        return {"process": self.name, "alpha": self.alpha}


_CLASSES: dict = {}


def skew_process(alpha) -> str:
    """The ``weights.process`` value of :class:`Skew` at α: ``"wflow.studies.asymmetry:skew_<α>"``
    (α formatted with ``repr``, so it is read back exactly)."""
    return f"{_MODULE}:skew_{float(alpha)!r}"


def __getattr__(name):
    """``skew_<α>``: the :class:`Skew` subclass of that α (α in [0, 1]), made once."""
    m = _NAME.fullmatch(name)
    if m is None:
        raise AttributeError(f"module {_MODULE!r} has no attribute {name!r}")
    try:
        alpha = float(m.group("alpha"))
    except ValueError:
        raise AttributeError(f"{name}: α is not a number") from None
    if not 0.0 <= alpha <= 1.0:
        raise AttributeError(f"{name}: α must be in [0, 1]")
    if name not in _CLASSES:
        # each process class declares `deterministic` itself (register_process's rule)
        _CLASSES[name] = type(name, (Skew,), {"name": name, "alpha": alpha,
                                              "deterministic": Skew.deterministic,
                                              "__module__": _MODULE})
    return _CLASSES[name]


# ----------------------------------------------------------------------------- closed forms
def two_token_rho(t, rho0):
    r"""Two tokens, α = 1 (D antisymmetric), identity values, head normalisation, ascent:

    .. math:: \dot\rho = 1 - \rho^2, \qquad \rho(t) = \tanh(t + \operatorname{artanh}\rho_0),

    ρ = ⟨x_1, x_2⟩, for any d, β and A [model §1b]: the self-logits vanish
    (⟨x, Ax⟩ = 0), the cross-logits are ±βa (a = ⟨x_1, Ax_2⟩), so the two attention
    weights on the other token are σ(βa) and σ(−βa), which sum to 1."""
    return np.tanh(np.asarray(t, dtype=float) + np.arctanh(rho0))


def two_token_angle_rate(theta, alpha, beta):
    r"""Two tokens on :math:`S^1` with :math:`D = R_\varphi` (α = sin φ, A = J), the angle
    θ = θ₂ − θ₁ [model §1b]:

    .. math:: \dot\theta = -\sin\theta\,\big[\sigma(\beta(\cos(\theta+\varphi) - \cos\varphi))
              + \sigma(\beta(\cos(\theta-\varphi) - \cos\varphi))\big],

    σ the logistic function; for α = 1, with ρ = cos θ, it is :func:`two_token_rho`'s law."""
    theta = np.asarray(theta, dtype=float)
    phi = math.asin(alpha)

    def sig(z):
        return 0.5 * (1.0 + np.tanh(0.5 * z))

    c = math.cos(phi)
    return -np.sin(theta) * (sig(beta * (np.cos(theta + phi) - c))
                             + sig(beta * (np.cos(theta - phi) - c)))


# ----------------------------------------------------------------------------- the study
def cell_name(placement, alpha, beta, halved=False):
    """``asym-<placement>-a<α>-b<β>``; ``asymh-…`` for the Δt/2 run of the cell."""
    return f"{'asymh' if halved else 'asym'}-{placement}-a{alpha:g}-b{beta:g}"


def parse_name(name):
    """``(placement, α, β)`` and whether the task is a Δt/2 run."""
    kind, placement, a, b = name.split("-")
    return (placement, float(a[1:]), float(b[1:])), kind == "asymh"


def _first_time(t, f, level):
    """Per system (columns of ``f``): first time f ≥ level, interpolated; NaN when never."""
    return half_time(t, np.asarray(f, dtype=float).T, level)


@register_study
class Asymmetry(Study):
    """Clustering against the antisymmetric fraction α of D and the layer-norm placement.

    Full: n = 32, d = 2; post: α ∈ {0, .25, .5, .75, 1} × β ∈ {1, 2, 4, 8}, 32 systems,
    T = 1000; pre, peri, ngpt, mix: α ∈ {0, .5, 1} × β ∈ {1, 8}, 24 systems, T = 200.
    Euler, Δt = 0.05, geometric records; Δt/2 runs of four cells at β = 8.
    """

    name = "asymmetry"
    question = ("how do the antisymmetric part of D (fraction α) and the layer-norm placement "
                "change the time to merge, the cluster counts and the (α, β) phase diagram?")
    quick = ("n = 16, 24 systems, T = 20, post α ∈ {0, .5, 1} × β ∈ {1, 4}, pre and ngpt at "
             "α ∈ {0, 1}, β = 4: the tables, intervals and figure are written")
    #: D(α) is not symmetric for α > 0: no energy ledger [model §1b]
    ledger = False

    def base(self, scale):
        s = _SCALES[scale]
        cfg = copy.deepcopy(PHASE_BASE)
        cfg["model"].update(n=s["n"], interaction="general")
        cfg["init"].update(weights="gaussian", per_path_weights=True, seed=36)
        cfg["solver"] = {"method": "euler", "dt": 0.05, "T": s["T"], "paths": s["paths"],
                         "record_times": "geometric", "records": s["records"],
                         "first_record": 0.05}
        return cfg

    def variants(self, base, scale):
        s = _SCALES[scale]
        cells = [("post", a, b) for b in s["betas"] for a in s["alphas"]]
        cells += [(p, a, b) for p in s["other"] for b in s["other_betas"]
                  for a in s["other_alphas"]]
        tasks = []
        for placement, alpha, beta in cells:
            cfg = copy.deepcopy(base)
            cfg["model"].update(beta=float(beta), layernorm=placement)
            cfg["weights"] = {"process": skew_process(alpha)}
            if placement != "post":
                cfg["solver"].update(T=s["other_T"], paths=s["other_paths"],
                                     records=max(20, s["records"] // 2))
            tasks += expand_grid(cfg, {}, name=cell_name(placement, alpha, beta))
        for placement, alpha, beta in s["halved"]:  # the resolution check: same systems, Δt/2
            cfg = copy.deepcopy(dict(tasks)[cell_name(placement, alpha, beta)])
            cfg["solver"]["dt"] = cfg["solver"]["dt"] / 2
            tasks += expand_grid(cfg, {}, name=cell_name(placement, alpha, beta, halved=True))
        return tasks

    # ------------------------------------------------------------------ data
    def cells(self, data, probe=None, halved=False):
        """``{(placement, α, β): cell}`` of the main runs (``halved``: of the Δt/2 runs); a
        cell holds ``t``, ``F``, ``se`` (pooled merged
        fraction), ``t_half`` (bootstrap Interval of the pooled curve), ``tau_half``,
        ``tau_one`` (per-system times, NaN censored), ``km_half``, ``km_one`` (KM Intervals),
        ``clusters`` ({time: Interval}), ``P``, ``T``."""
        seed = int(data.config(data.tasks[0][0])["init"]["seed"])
        out = {}
        for path, (point, _) in zip(data.paths, data.tasks):
            cfg, arr = load_source(path)
            key, half = parse_name(point)
            if half != halved:
                continue
            t = np.asarray(arr["t"], dtype=float)
            f = np.asarray(arr["merged_fraction"], dtype=float)
            k = np.asarray(arr["n_clusters"], dtype=float)
            T = float(cfg["solver"]["T"])
            F, se = pooled_fraction(f)
            rng = np.random.default_rng([seed, PLACEMENTS.index(key[0]),
                                         int(round(100 * key[1])), int(round(100 * key[2]))])
            tau_h = _first_time(t, f, 0.5)
            tau_1 = _first_time(t, f, 1.0)
            times = [x for x in (probe or self._probe(T)) if x <= T]
            out[key] = {"t": t, "F": F, "se": se, "P": f.shape[1], "T": T,
                        "t_half": half_time_interval(t, f, rng),
                        "tau_half": tau_h, "tau_one": tau_1,
                        "km_half": km_median_interval(tau_h, T, unit="systems"),
                        "km_one": km_median_interval(tau_1, T, unit="systems"),
                        "clusters": {x: mean_interval(k[int(np.argmin(np.abs(t - x)))],
                                                      unit="systems") for x in times},
                        "n_clusters": k, "dt": float(cfg["solver"]["dt"])}
        return out

    @staticmethod
    def _probe(T):
        return [x for x in (1.0, 10.0, 100.0, 1000.0) if x < T] + [T]

    @staticmethod
    def censored(cell, T):
        """KM medians of a cell with its times censored at ``T`` ≤ its own T (the post cells
        against the placements' shorter window)."""
        th = np.where(cell["tau_half"] <= T, cell["tau_half"], np.nan)
        t1 = np.where(cell["tau_one"] <= T, cell["tau_one"], np.nan)
        return (km_median_interval(th, T, unit="systems"),
                km_median_interval(t1, T, unit="systems"))

    # ------------------------------------------------------------------ summary
    def summarize(self, data):
        cells = self.cells(data)
        table = {k: [] for k in ("placement", "alpha", "beta", "systems", "T",
                                 "t_half", "t_half_lo", "t_half_hi",
                                 "km_half", "km_half_lo", "km_half_hi",
                                 "km_one", "km_one_lo", "km_one_hi",
                                 "merged_T", "merged_T_se", "clusters_T", "clusters_T_lo",
                                 "clusters_T_hi")}
        lines = ["Half-merge and one-cluster times per (placement, α, β): t_1/2 of the pooled "
                 "merged fraction [95% percentile bootstrap over systems]; per-system half-merge "
                 "τ and one-cluster τ¹: Kaplan–Meier medians [95% log-log band]; '> T': not "
                 "reached (censored); clusters: mean count over systems at the time shown "
                 "[Student-t, log scale]."]
        for placement in PLACEMENTS:
            keys = sorted(k for k in cells if k[0] == placement)
            if not keys:
                continue
            c0 = cells[keys[0]]
            probe = sorted(c0["clusters"])
            lines += ["", f"{placement}-LN  ({c0['P']} systems, T = {c0['T']:g}, Euler dt = 0.05)",
                      f"{'beta':>5}{'alpha':>6}{'t_1/2 pooled':>26}{'KM median τ':>26}"
                      f"{'KM median τ¹':>26}"
                      + "".join(f"{'clusters(' + format(x, 'g') + ')':>22}" for x in probe)]
            for k in keys:
                c = cells[k]
                lines.append(f"{k[2]:>5g}{k[1]:>6g}{_fmt(c['t_half']):>26}{_fmt(c['km_half']):>26}"
                             f"{_fmt(c['km_one']):>26}"
                             + "".join(f"{c['clusters'][x].fmt('.3g'):>22}" for x in probe))
                cl = c["clusters"][max(c["clusters"])]
                for col, v in zip(table, (k[0], k[1], k[2], c["P"], c["T"],
                                          *c["t_half"].as_tuple(), *c["km_half"].as_tuple(),
                                          *c["km_one"].as_tuple(), float(c["F"][-1]),
                                          float(c["se"][-1]), *cl.as_tuple())):
                    table[col].append(v)
        others = sorted({k for k in cells if k[0] != "post"})
        if others:
            Tc = min(cells[k]["T"] for k in others)
            lines += ["", f"Placements at a common window T = {Tc:g} (post cells censored "
                          "there): KM median half-merge time τ [95% band]",
                      f"{'beta':>5}{'alpha':>6}" + "".join(f"{p:>24}" for p in PLACEMENTS)]
            for beta in sorted({k[2] for k in others}):
                for alpha in sorted({k[1] for k in others}):
                    row = []
                    for p in PLACEMENTS:
                        c = cells.get((p, alpha, beta))
                        row.append("-" if c is None else _fmt(self.censored(c, Tc)[0]))
                    lines.append(f"{beta:>5g}{alpha:>6g}" + "".join(f"{r:>24}" for r in row))
        lines += [""] + self.resolution_lines(cells, self.cells(data, halved=True))
        return "\n".join(lines), table

    @staticmethod
    def resolution_lines(cells, halved):
        """The Δt/2 check: per halved cell, the pooled t_1/2 and the KM median of τ at Δt
        and Δt/2 (same systems), the difference against the half-width of the Δt interval."""
        if not halved:
            return ["resolution check: no Δt/2 runs"]
        lines = ["Resolution check (Δt halved, same systems): pooled t_1/2 and KM median τ at "
                 "Δt and Δt/2; |diff| against the half-width of the Δt interval",
                 f"{'placement':>10}{'alpha':>6}{'beta':>5}{'t_1/2(dt)':>11}{'t_1/2(dt/2)':>13}"
                 f"{'τ med(dt)':>11}{'τ med(dt/2)':>13}{'|diff τ|':>10}{'half-width':>12}  verdict"]
        for key in sorted(halved):
            a, b = cells.get(key), halved[key]
            if a is None:
                continue
            t1, t2 = a["t_half"].estimate, b["t_half"].estimate
            m1, m2 = a["km_half"], b["km_half"]
            if math.isfinite(m1.estimate) and math.isfinite(m2.estimate):
                diff = abs(m1.estimate - m2.estimate)
                hw = m1.halfwidth
                ok = diff <= hw
                ds, hs = f"{diff:.3g}", f"{hw:.3g}"
            else:
                ok = not math.isfinite(m1.estimate) and not math.isfinite(m2.estimate)
                ds = hs = "-"
            lines.append(f"{key[0]:>10}{key[1]:>6g}{key[2]:>5g}{_t(t1):>11}{_t(t2):>13}"
                         f"{_t(m1.estimate):>11}{_t(m2.estimate):>13}{ds:>10}{hs:>12}  "
                         f"{'pass' if ok else 'FAIL'}")
        return lines

    def figures(self, data, outdir, formats):
        from wflow.figures import asymmetry as fig

        return fig.plot_asymmetry(self.cells(data), outdir, formats,
                                  censored=self.censored)


def _t(v):
    return "> T" if not math.isfinite(v) else f"{v:.3g}"


def _fmt(iv):
    """``est [low, high]``; an estimate not reached (NaN or ``inf``) reads ``> T``."""
    def f(v):
        return "> T" if not math.isfinite(v) else f"{v:.3g}"
    if not iv.ok:
        return f"{f(iv.estimate)} (no CI)"
    return f"{f(iv.estimate)} [{f(iv.low)}, {f(iv.high)}]"
