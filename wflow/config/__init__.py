"""Run configuration: the TOML vocabulary of [model §10], declared once in a table.

A run is one nested dict ``{section: {key: value}}`` (the same shape as the TOML document).
Every key is one :class:`~wflow.config.schema.Param` of the table below (default, constraint,
one-line doc, when it applies, cross-key rule). From the table come :data:`DEFAULTS`,
:func:`validate`, the embedded default run ``wflow/data/default.toml``
(:func:`default_toml`) and the key reference of ``docs/guide.md`` (:func:`markdown_reference`);
``python -m wflow.config write`` regenerates both files. Every problem raises
:class:`~wflow.errors.ConfigError` with a one-line message naming the dotted key, the
offending value and what is allowed; validation never raises anything else.

Choices (see also ``docs/guide.md``):

* Unset file paths are ``""`` and an unset layer list is ``[]``, so a validated
  configuration is always representable in TOML and in JSON.
* Integers are accepted where floats are expected (and converted); floats are *not*
  accepted where integers are expected; booleans are never numbers.
* The ``[weights]`` keys of a weight process are declared once, on its class
  (:mod:`wflow.model.processes`), and read into the table by :mod:`wflow.config.process_keys`:
  a key of another process set to a value other than its default is an error naming the key,
  the process and its keys; a key several processes declare (``weights.scheme``) follows the
  chosen one (``"euler"`` for oscillating when unset). An override that changes
  ``weights.process`` drops the inherited keys the new process does not read or does not
  allow (unless they are overridden too).
* ``model.laplacian_heads`` given as an integer ``k`` means the last ``k`` heads.
* A key set explicitly (in the file, the dict or an override) that cannot apply — e.g.
  ``solver.precision = "float32"`` with ``solver.backend = "numpy"`` — is an error, unless
  its value is the default; the embedded default run sets nothing explicitly.
* The allowed values of the model's options come from the model modules (``attention``,
  ``weights``, the processes, the stepper registry); their errors name their own parameters and
  :func:`config_errors` maps them to keys (:data:`PARAM_KEYS`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from contextlib import contextmanager

from wflow.config import files as config_files
from wflow.config import process_keys, schema
from wflow.config.files import (
    default_config,
    default_toml,
    generated_files,
    load_toml,
    markdown_reference,
    parse_override,
)
from wflow.config.schema import (
    Boolean,
    Choice,
    Custom,
    Integer,
    Interval,
    Param,
    Path,
    When,
    bad,
    choices_text,
    error,
    is_int,
    show,
    typename,
)
from wflow.errors import ConfigError
from wflow.geometry.circle_fv import LIMITERS
from wflow.model.attention import (
    BACKENDS,
    EXPS,
    HEAD_COMBINES,
    INTERACTIONS,
    MASKS,
    NO_ENERGY_GENERAL,
    NORMALIZATIONS,
    PRECISIONS,
    SIGNS,
)
from wflow.model.density import DIFFUSION_MOBILITIES, DIFFUSION_SCHEMES
from wflow.model.layernorm import PLACEMENTS
from wflow.model.processes import PROCESSES, get_process
from wflow.model.weights import GENERAL_INITIAL_WEIGHTS, INITIAL_WEIGHTS
from wflow.stepping import density as _density
from wflow.stepping.integrators import TABLEAUX
from wflow.stepping.registry import SDE_ORDERS, STEPPERS

__all__ = [  # noqa: F822 - DEFAULTS comes from the module __getattr__ (always the whole table)
    "DEFAULTS", "default_config", "load_toml", "parse_override", "apply_overrides", "validate",
    "resolve", "config_hash", "computation", "differing_keys", "NOT_COMPUTATION", "n_steps",
    "config_errors", "PARAM_KEYS", "default_toml",
    "markdown_reference", "generated_files",
]

VALUES = ("tied", "identity", "minus_identity", "gaussian", "symmetric_gaussian")
TOKEN_INITS = ("octahedral", "uniform", "vmf", "classes", "file", "uniform_mode",
               "uniform_noise")
REPRESENTATIONS = ("particles", "density")
#: initial laws a density can start from (cell averages of a closed form)
DENSITY_INITS = ("uniform", "vmf", "uniform_mode", "uniform_noise")
#: the perturbed uniform starts, density only [model §5b]
PERTURBED_INITS = ("uniform_mode", "uniform_noise")

METHODS = STEPPERS  # solver.method: every registered stepper (a dict: later ones count too)
ENERGY_METHODS = ("jko",)
#: solver.event: the per-path statistics an event may watch (the clustering series of §8)
EVENT_SERIES = ("", "merged_fraction", "n_clusters", "order_parameter", "min_cosine",
                "variance", "spectral_rank")
#: relative tolerance of the "whole number of steps" rule for solver.T / solver.dt
STEP_RTOL = 1e-9

#: parameter names of the model modules -> configuration keys (see :func:`config_errors`)
PARAM_KEYS = {"beta": "model.beta", "normalization": "model.normalization",
              "sign": "model.sign", "laplacian_heads": "model.laplacian_heads", "heads": "model.heads",
              "mask": "model.mask", "backend": "solver.backend", "precision": "solver.precision",
              "fast_exp": "solver.exp", "d": "model.d", "method": "solver.method",
              "nu": "model.diffusion", "diffusion_scheme": "density.diffusion_scheme",
              "diffusion_mobility": "density.diffusion_mobility",
              "interaction": "model.interaction", "head_combine": "model.head_combine"}

# --------------------------------------------------------------------------------------
# Cross-key checks (referenced from the table)
# --------------------------------------------------------------------------------------


def _laplacian(key, value, cfg) -> list[int]:
    heads = cfg["model"]["heads"]
    if is_int(value):
        k = int(value)
        if not 0 <= k <= heads:
            raise bad(key, value, "an integer k (the last k heads) must satisfy "
                                  f"0 <= k <= model.heads = {heads}")
        return list(range(heads - k, heads))
    if not isinstance(value, (list, tuple)):
        raise bad(key, value, "must be a list of head indices or an integer k (the last k heads) "
                              f"(got {typename(value)})")
    out = []
    for item in value:
        if not is_int(item):
            raise bad(key, value, f"indices must be integers (got {typename(item)} {show(item)})")
        i = int(item)
        if not 0 <= i < heads:
            raise bad(key, value, f"indices must be in 0..{heads - 1} (model.heads = {heads})")
        if i in out:
            raise bad(key, value, f"indices must be distinct (index {i} repeated)")
        out.append(i)
    return sorted(out)


def _process(key, v, cfg=None):
    """``weights.process``: a registered name, an entry point or ``module:Class``."""
    if not isinstance(v, str):
        raise bad(key, v, f"allowed values are {choices_text(tuple(PROCESSES))} or 'module:Class'")
    try:
        get_process(v)
    except ValueError:
        raise bad(key, v, f"allowed values are {choices_text(tuple(PROCESSES))} or "
                          "'module:Class'") from None
    return v


def _needs_file(key, when_key, when_value):
    def rule(cfg):
        s, k = key.split(".")
        ws, wk = when_key.split(".")
        if cfg[ws][wk] == when_value and not cfg[s][k].strip():
            raise bad(key, cfg[s][k], f"must name a file (a non-empty path) when "
                                      f"{when_key} = {when_value!r}")
    return rule


def _shared_path_rule(cfg):
    if cfg["weights"]["shared_path"] and cfg["init"]["per_path_weights"]:
        raise error("weights.shared_path = true with init.per_path_weights = true: one weight "
                    "path for every path needs one D(0); set one of them to false")


def _classes_rule(cfg):
    C, d = cfg["init"]["classes"], cfg["model"]["d"]
    if cfg["init"]["tokens"] == "classes" and C > 2 * d:
        raise bad("init.classes", C, f"must be <= 2 model.d = {2 * d} (the class centres are "
                                     "the vertices ±e_a)")


def _method_rule(cfg):
    s = cfg["solver"]
    if s["method"] in ENERGY_METHODS and cfg["model"]["mask"] == "causal":
        raise error(f"solver.method = {s['method']!r} with model.mask = 'causal': "
                    "energy-based methods are refused under the causal mask")


def _interaction_rule(cfg):
    """``model.interaction = "general"`` [model §1b]: no energy (no ledger, no energy-based
    method), a process with a general form, particles; non-symmetric initial weights need it."""
    m = cfg["model"]
    kind = cfg["init"]["weights"]
    if m["interaction"] == "symmetric":
        if kind in GENERAL_INITIAL_WEIGHTS:
            raise bad("init.weights", kind, "is not symmetric: needs model.interaction = 'general'")
        return
    if cfg["diagnostics"]["ledger"]:
        raise error(f"diagnostics.ledger = true with model.interaction = 'general': "
                    f"{NO_ENERGY_GENERAL}")
    if cfg["solver"]["method"] in ENERGY_METHODS:
        raise error(f"solver.method = {cfg['solver']['method']!r} with model.interaction = "
                    f"'general': {NO_ENERGY_GENERAL}")
    if cfg["solver"]["representation"] != "particles":
        raise bad("solver.representation", cfg["solver"]["representation"],
                  "must be 'particles' with model.interaction = 'general'")
    process = cfg["weights"]["process"]
    if not getattr(get_process(process), "accepts_general", False):
        raise bad("weights.process", process, "keeps D_h symmetric: with model.interaction = "
                                              "'general' allowed are frozen, ou, layers, file")


def _ledger_default(cfg):
    """True, unless the energy does not exist (``model.interaction = "general"``) or the
    layer-norm placement rescales the speeds (``model.layernorm`` other than "post")."""
    return cfg["model"]["interaction"] == "symmetric" and cfg["model"]["layernorm"] == "post"


#: the unprojected output u of [model §1c] is computed for the model of §2 (no key biases,
#: no drift): the weight processes whose model it does not describe
_NO_OUTPUT_PROCESSES = ("imported",)


def _layernorm_rule(cfg):
    """``model.layernorm`` other than "post" [model §1c]: particles, an explicit tableau with
    fixed steps, no token noise, no ledger; the unprojected step is the post-LN block."""
    m, s = cfg["model"], cfg["solver"]
    place, method = m["layernorm"], s["method"]
    process = cfg["weights"]["process"]
    if method == "euler_unprojected" and process in _NO_OUTPUT_PROCESSES:
        raise error(f"solver.method = 'euler_unprojected' with weights.process = {process!r}: "
                    "its attention output carries key biases and a drift (docs/model.md §5c); "
                    "use euler")
    if place == "post":
        return
    where = f"with model.layernorm = {place!r}"
    if s["representation"] != "particles":
        raise bad("solver.representation", s["representation"],
                  f"must be 'particles' {where}: a density carries no radius and no |u| per "
                  "point (docs/model.md §1c)")
    if method == "euler_unprojected":
        raise bad("solver.method", method, f"is the post-LN block: not allowed {where}; allowed "
                                           f"are {choices_text(tuple(TABLEAUX))}")
    if method not in TABLEAUX:
        raise bad("solver.method", method, f"must be an explicit tableau {where} (the placements "
                                           "are not gradient flows of E): allowed are "
                                           f"{choices_text(tuple(TABLEAUX))}")
    if s["adaptive"]:
        raise bad("solver.adaptive", True, f"must be false {where}")
    if m["diffusion"] != 0:
        raise bad("model.diffusion", m["diffusion"], f"must be 0 {where}: no SDE order is "
                                                     "stated for the placements")
    if process in _NO_OUTPUT_PROCESSES:
        raise bad("weights.process", process, f"is not allowed {where}: its attention output "
                                              "carries key biases and a drift (docs/model.md §5c)")
    if cfg["diagnostics"]["ledger"]:
        raise error(f"diagnostics.ledger = true {where}: the ledger is not derived for a "
                    "per-token speed factor (docs/model.md §1c); set it to false")


def _head_combine_rule(cfg):
    if cfg["model"]["head_combine"] == "sum" and cfg["model"]["normalization"] == "joint":
        raise error("model.head_combine = 'sum' with model.normalization = 'joint': the joint "
                    "normalisation is a weighted mean of the heads by construction")


def _representation_rule(cfg):
    """The density representation [model §5b]: S¹ or S², no causal mask, an SSP scheme,
    an initial law with a closed form."""
    if cfg["solver"]["representation"] != "density":
        return
    where = "with solver.representation = 'density'"
    if cfg["model"]["d"] not in (2, 3):
        raise bad("model.d", cfg["model"]["d"],
                  f"must be 2 (the circle S^1) or 3 (the sphere S^2) {where}")
    if cfg["model"]["mask"] != "none":
        raise bad("model.mask", cfg["model"]["mask"], f"must be 'none' {where}")
    if cfg["solver"]["method"] not in _density.SSP_METHODS:
        raise bad("solver.method", cfg["solver"]["method"],
                  f"must be one of {choices_text(_density.SSP_METHODS)} {where} "
                  "(strong-stability-preserving: keeps rho >= 0)")
    if cfg["init"]["tokens"] not in DENSITY_INITS:
        raise bad("init.tokens", cfg["init"]["tokens"],
                  f"must be one of {choices_text(DENSITY_INITS)} {where}")


def _diffusion_rule(cfg):
    """``model.diffusion`` > 0: token noise on particles [model §6b] needs a stepper with a
    stated SDE order; a density diffuses with any of its SSP schemes [model §5b]."""
    nu = cfg["model"]["diffusion"]
    if nu == 0 or cfg["solver"]["representation"] == "density":
        return
    method = cfg["solver"]["method"]
    if method not in SDE_ORDERS:
        raise bad("model.diffusion", nu,
                  f"must be 0 with solver.method = {method!r}: token noise needs a scheme with "
                  f"a stated SDE order, {choices_text(tuple(SDE_ORDERS))} (projected "
                  "Euler–Maruyama)")


def _perturbed_rule(cfg):
    """The perturbed uniform starts: density only; ``init.mode_m`` an order of the degree
    ``init.mode`` on S², 0 on S¹ [model §5b]."""
    ini = cfg["init"]
    if ini["tokens"] not in PERTURBED_INITS:
        return
    if cfg["solver"]["representation"] != "density":
        raise bad("init.tokens", ini["tokens"],
                  "needs solver.representation = 'density' (a perturbed uniform density); "
                  "particles start from 'uniform' (iid uniform tokens) or another of "
                  f"{choices_text(TOKEN_INITS[:5])}")
    if ini["tokens"] == "uniform_mode":
        ell, m = ini["mode"], ini["mode_m"]
        if cfg["model"]["d"] == 2 and m != 0:
            raise bad("init.mode_m", m, "must be 0 on S^1 (model.d = 2: the mode is cos k theta)")
        if abs(m) > ell:
            raise bad("init.mode_m", m, f"must be in -{ell}..{ell} (|m| <= init.mode = {ell})")


def _steps_rule(cfg):
    s = cfg["solver"]
    if s["T"] < s["dt"]:
        raise bad("solver.T", s["T"], f"must be >= solver.dt = {s['dt']!r}")
    ratio = s["T"] / s["dt"]
    if not math.isfinite(ratio):
        raise bad("solver.T", s["T"], f"must be a whole number of steps of solver.dt = "
                                      f"{s['dt']!r} (T/dt overflows)")
    steps = int(round(ratio))
    if steps < 1 or abs(steps * s["dt"] - s["T"]) > STEP_RTOL * s["T"]:
        raise bad("solver.T", s["T"],
                  f"must be a whole number of steps of solver.dt (T/dt = {ratio:.10g})")


def _adaptive_rule(cfg):
    """Adaptive steps [model §6d]: an embedded pair, particles, deterministic weights, no
    token noise."""
    s = cfg["solver"]
    if not s["adaptive"]:
        return
    where = "with solver.adaptive = true"
    tab = TABLEAUX.get(s["method"])
    if tab is None or not tab.embedded:
        pairs = tuple(n for n, t in TABLEAUX.items() if t.embedded)
        raise bad("solver.method", s["method"], f"has no error estimate: allowed values {where} "
                                                f"are {choices_text(pairs)}")
    if s["representation"] != "particles":
        raise bad("solver.representation", s["representation"],
                  f"must be 'particles' {where} (the density's SSP substeps have no error "
                  "estimate)")
    proc = cfg["weights"]["process"]
    if not getattr(get_process(proc), "deterministic", False):
        raise bad("weights.process", proc,
                  f"must be a deterministic process (frozen, oscillating, layers, file) {where}: "
                  "noise would need a Brownian path queried at any time (not in wflow)")
    diffusion = cfg["model"].get("diffusion", 0)
    if diffusion:
        raise bad("model.diffusion", diffusion, f"must be 0 {where} (token noise, [model §6d])")


def _first_record_rule(cfg):
    s = cfg["solver"]
    if s["record_times"] == "geometric" and not first_record(cfg) < s["T"]:
        raise bad("solver.first_record", s["first_record"], f"must be < solver.T = {s['T']!r}")


def _record_default(cfg):
    """5, or the number of steps of a shorter run (a default never makes a run invalid)."""
    s = cfg["solver"]
    ratio = s["T"] / s["dt"]
    steps = int(round(ratio)) if math.isfinite(ratio) else 5
    return max(1, min(5, steps))


def _record_rule(cfg):
    steps = n_steps(cfg)
    if cfg["solver"]["record_every"] > steps:
        raise bad("solver.record_every", cfg["solver"]["record_every"],
                  f"must be <= the number of steps round(solver.T/solver.dt) = {steps}")


# --------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------

_POS, _NONNEG = Interval(0, None, "neither"), Interval(0, None, "both")
_SECTION_DOCS = {
    "model": "the attention dynamics [model §2–4]",
    "init": "initial tokens X0 and weights D(0)",
    "weights": "the weight process D(t) [model §5]",
    "solver": "time stepping [model §6–7]",
    "diagnostics": "what is measured besides the series [model §8]",
    "output": "the HDF5 result file",
    "density": "the density representation on S^1 and S^2 (solver.representation = "
               "'density') [model §5b]",
}
for _section, _doc in _SECTION_DOCS.items():
    schema.register_section(_section, _doc)

for _p in [
    Param("model.d", 3, Integer(lo=2), "tokens on the sphere S^(d-1) in R^d"),
    Param("model.n", 200, Integer(lo=2), "number of tokens"),
    Param("model.beta", 1.0, _POS, "inverse temperature β"),
    Param("model.heads", 10, Integer(lo=1), "number of heads H"),
    Param("model.normalization", "head", Choice(NORMALIZATIONS),
          "head: v = (1/H) Σ_h w_h; joint: Σ_h Z_h w_h / Σ_h Z_h; none: (1/H) Σ_h Z_h w_h"),
    Param("model.sign", "descent", Choice(tuple(SIGNS)),
          "descent: ẋ = −v, the energy decreases; ascent: ẋ = +v"),
    Param("model.laplacian_heads", [], Custom(_laplacian, "a list of head indices, or an "
                                             "integer k (the last k heads)"),
          "Laplacian heads (0-based); [] = every head is an attention head"),
    Param("model.mask", "none", Choice(MASKS), "causal: token i attends to the tokens j ≤ i"),
    Param("model.values", "tied", Choice(VALUES),
          "value matrices: tied V_h = D_h (the gradient flow), identity, minus_identity −I, "
          "gaussian Ξ_h/√d, symmetric_gaussian (Ξ_h + Ξ_hᵀ)/√(2d)"),
    Param("model.diffusion", 0.0, _NONNEG,
          "token diffusion ν: Brownian motion on the sphere, generator ν Δ_S [model §6b]",
          rule=_diffusion_rule),
    Param("model.interaction", "symmetric", Choice(INTERACTIONS),
          "symmetric: D_h ∈ Sym(d), the gradient flow; general: any real D_h, no energy, "
          "no ledger [model §1b]", rule=_interaction_rule),
    Param("model.head_combine", "mean", Choice(HEAD_COMBINES),
          "mean: (1/H) Σ_h as in model.normalization; sum: Σ_h, multi-head attention "
          "[model §1b]", rule=_head_combine_rule),
    Param("model.layernorm", "post", Choice(PLACEMENTS),
          "layer-norm placement: post (the flow on the sphere), pre (residual z = r x, "
          "ż = σu), peri (ż = σu/|u|), mix (post until model.mix_switch, then pre), ngpt "
          "(ẋ = α σ P_x u/|u|) [model §1c]", rule=_layernorm_rule),
    Param("model.ngpt_alpha", 0.2, Interval(0, 1, "right"),
          "nGPT's step size α: ẋ = α σ P_x u/|u| [model §1c]",
          applies=When("model.layernorm", "ngpt")),
    Param("model.mix_switch", 5.0, _NONNEG,
          "Mix-LN: the time t_s of the switch from post-LN to pre-LN (on the step grid) "
          "[model §1c]", applies=When("model.layernorm", "mix")),
    Param("init.tokens", "octahedral", Choice(TOKEN_INITS),
          "octahedral: ±e_a plus noise, renormalised; uniform; vmf; classes (per path: a "
          "sequence centre around its class centre, tokens around it); file; density only: "
          "uniform_mode, uniform_noise (uniform plus a small perturbation) [model §5b]"),
    Param("init.mode", 2, Integer(lo=1),
          "uniform_mode: the Fourier mode k (S^1: cos k theta) or the degree l (S^2)",
          applies=When("init.tokens", "uniform_mode")),
    Param("init.mode_m", 0, Integer(),
          "uniform_mode on S^2: the order m of the real spherical harmonic, |m| <= init.mode",
          applies=When("init.tokens", "uniform_mode"), rule=_perturbed_rule),
    Param("init.amplitude", 0.01, _NONNEG,
          "ε: uniform_mode rho = rho_bar (1 + ε phi), phi = cos k theta or the harmonic of mean "
          "square 1; uniform_noise: pointwise standard deviation of the relative noise",
          applies=When("init.tokens", ("uniform_mode", "uniform_noise"))),
    Param("init.noise_modes", 8, Integer(lo=1),
          "uniform_noise: the random series has the Fourier modes 1..K (S^1) or the degrees "
          "1..L (S^2), seeded from stream (7,)",
          applies=When("init.tokens", "uniform_noise")),
    Param("init.token_noise", 0.05, _NONNEG, "std of the Gaussian noise per coordinate",
          applies=When("init.tokens", "octahedral")),
    Param("init.kappa", 10.0, _POS, "concentration κ of the von Mises–Fisher start (classes: "
          "of the tokens around their sequence centre)", applies=When("init.tokens", ("vmf", "classes"))),
    Param("init.classes", 3, Integer(lo=1), "classes: number C of classes; path p is of class "
          "p mod C, centre (−1)^⌊c/d⌋ e_(c mod d)", applies=When("init.tokens", "classes"),
          rule=_classes_rule),
    Param("init.class_kappa", 20.0, _POS, "classes: vMF concentration of a sequence centre "
          "around its class centre", applies=When("init.tokens", "classes")),
    Param("init.weights", "symmetric_gaussian", Choice(INITIAL_WEIGHTS),
          "D_h(0): symmetric_gaussian Ξ + Ξᵀ (Ξ iid N(0, 1)), identity, file; goe "
          "(Ξ + Ξᵀ)/√(2d); with model.interaction = 'general': gaussian Ξ/√d, gpt2 0.02 Ξ"),
    Param("init.seed", 0, Integer(lo=0, hi=2**64 - 1), "seed of every random stream of the run"),
    Param("init.tokens_file", "", Path(),
          "token file: .npy holding the (n, d) array, or .npz/.h5 with the array 'X'",
          applies=When("init.tokens", "file"),
          rule=_needs_file("init.tokens_file", "init.tokens", "file")),
    Param("init.normalize", False, Boolean(),
          "tokens file: project rows that are not unit vectors onto the sphere (false: refuse "
          "them)", applies=When("init.tokens", "file")),
    Param("init.weights_file", "", Path(), "weight file (.npz/.h5 with the array 'D', shape (H, d, d))",
          applies=When("init.weights", "file"),
          rule=_needs_file("init.weights_file", "init.weights", "file")),
    Param("init.per_path_tokens", False, Boolean(), "each path draws its own X0"),
    Param("init.per_path_weights", False, Boolean(), "each path draws its own D(0)"),
    Param("init.token_perturbation", 0.0, _NONNEG,
          "ε: move every token a geodesic distance atan ε, x_i ← (x_i + ε u_i)/√(1 + ε²), u_i a "
          "random unit tangent vector (stream (3,)); 0: X0 unchanged"),
    Param("init.weight_perturbation", 0.0, _NONNEG,
          "ε: D_h(0) ← D_h(0) + ε S_h, S_h a random symmetric matrix of Frobenius norm 1 "
          "(stream (4,)); 0: D(0) unchanged"),
    Param("init.first_path", 0, Integer(lo=0),
          "index of this run's first path in the ensemble: path p draws from (seed, "
          "first_path + p) (sweeps split paths into batches)"),
    Param("weights.process", "ou", Custom(_process, "a registered process or 'module:Class'"),
          "frozen; ou: dD = λ(M − D) dt + g dW_sym; oscillating; layers; file; or a registered "
          "process ('module:Class' imports one)"),
    Param("weights.shared_path", False, Boolean(),
          "every path follows one weight path: the same D(0) and the same noise (stream (5,))",
          rule=_shared_path_rule),
    Param("solver.method", "euler", Choice(METHODS),
          "euler (renormalised onto the sphere), heun, rk4, ssprk3 (SSP-RK3), jko",
          rule=_method_rule),
    Param("solver.representation", "particles", Choice(REPRESENTATIONS),
          "particles: n tokens; density: cell averages of ρ (finite volumes on S^1 or S^2)",
          rule=_representation_rule),
    Param("solver.dt", 0.005, _POS, "time step Δt"),
    Param("solver.T", 20.0, _POS, "final time (a whole number of steps)", rule=_steps_rule),
    Param("solver.record_every", 5, Integer(lo=1),
          "steps between records (t = 0 is a record); left out: 5, or every step of a run "
          "of fewer than 5 steps",
          rule=_record_rule, default_from=_record_default),
    Param("solver.adaptive", False, Boolean(),
          "adaptive steps: an embedded pair (bs32, dopri5, tsit5) under a PI controller, each "
          "path on its own, first step solver.dt [model §6d]", rule=_adaptive_rule),
    Param("solver.rtol", 1e-6, Interval(0, 1, "neither"), "adaptive: relative tolerance",
          applies=When("solver.adaptive", True)),
    Param("solver.atol", 1e-8, Interval(0, 1, "neither"), "adaptive: absolute tolerance",
          applies=When("solver.adaptive", True)),
    Param("solver.max_steps", 10_000_000, Integer(lo=1),
          "adaptive: attempted steps per path before the run stops",
          applies=When("solver.adaptive", True)),
    Param("solver.stop_at_records", False, Boolean(),
          "adaptive: end steps exactly on the record times (else dense output, order 3)",
          applies=When("solver.adaptive", True)),
    Param("solver.event", "", Choice(EVENT_SERIES),
          "adaptive: the per-path statistic whose first crossing of solver.event_threshold is "
          "located ('' none) [model §6d]", applies=When("solver.adaptive", True)),
    Param("solver.event_threshold", 0.5, Interval(None, None, "neither"),
          "adaptive: the event's threshold", applies=When("solver.event", EVENT_SERIES[1:])),
    Param("solver.event_direction", "up", Choice(("up", "down")),
          "adaptive: up: the statistic >= threshold; down: <= threshold",
          applies=When("solver.event", EVENT_SERIES[1:])),
    Param("solver.event_stop", False, Boolean(),
          "adaptive: a path stops at its event (the run ends when every path has)",
          applies=When("solver.event", EVENT_SERIES[1:])),
    Param("solver.event_tol", 1e-6, _POS, "adaptive: the event time's bisection tolerance",
          applies=When("solver.event", EVENT_SERIES[1:])),
    Param("solver.record_times", "uniform", Choice(("uniform", "geometric")),
          "uniform: every record_every steps; geometric: solver.records times from "
          "solver.first_record to T (fixed steppers round them to the step grid)"),
    Param("solver.records", 200, Integer(lo=2), "geometric: number of positive record times",
          applies=When("solver.record_times", "geometric")),
    Param("solver.first_record", 0.0, _NONNEG,
          "geometric: the first positive record time (0: record_every·dt)",
          applies=When("solver.record_times", "geometric"), rule=_first_record_rule),
    Param("solver.paths", 1, Integer(lo=1), "Monte Carlo paths of the weight noise"),
    Param("solver.backend", "numba", Choice(BACKENDS),
          "numba: compiled kernels; numpy: the plain reference"),
    Param("solver.precision", "float64", Choice(PRECISIONS),
          "float32: the pair loop in single precision",
          applies=(When("model.d", 3), When("solver.backend", "numba"), When("solver.exp", "fast"))),
    Param("solver.exp", "fast", Choice(EXPS), "exponential of the compiled kernels: fast or libm",
          applies=When("solver.backend", "numba")),
    Param("solver.jko_tol", 1e-10, _POS, "JKO: L-BFGS gradient tolerance",
          applies=When("solver.method", "jko")),
    Param("solver.jko_maxiter", 200, Integer(lo=1), "JKO: L-BFGS iterations per step",
          applies=When("solver.method", "jko")),
    Param("density.cells", 256, Integer(lo=4),
          "cells N: the uniform grid in angle on S^1; Voronoi cells of N Fibonacci points on S^2",
          applies=When("solver.representation", "density")),
    Param("density.limiter", "van_leer", Choice(LIMITERS),
          "S^1: slope limiter of the MUSCL reconstruction (none: unlimited, not positive); "
          "S^2 is first-order upwind",
          applies=When("solver.representation", "density")),
    Param("density.lloyd", 0, Integer(lo=0),
          "S^2: Lloyd iterations moving the generators toward a centroidal Voronoi mesh",
          applies=When("solver.representation", "density")),
    Param("density.cfl", 0.4, Interval(0, 1, "right"),
          "Courant number of the substeps (<= 0.5 keeps rho >= 0)",
          applies=When("solver.representation", "density")),
    Param("density.diffusion_scheme", "explicit", Choice(DIFFUSION_SCHEMES),
          "explicit: the diffusion in every stage, substeps from the Courant condition of "
          "transport plus diffusion (Δt ≲ h²/(4ν)); split: Strang, each transport substep "
          "between two sub-cycled half-steps of the diffusion [model §5b]",
          applies=When("solver.representation", "density")),
    Param("density.diffusion_mobility", "one", Choice(DIFFUSION_MOBILITIES),
          "one: ν Δ_S ρ (the free energy's gradient flow for model.normalization = 'none'); "
          "b_hat: ν div(b̂ ∇ρ), b̂ = 1/Z̄ of the field (the gradient flow for 'joint'); "
          "explicit diffusion_scheme only [model §5b]",
          applies=When("solver.representation", "density")),
    Param("diagnostics.ledger", True, Boolean(), "exact energy ledger (a second energy per step); "
          "left out: true, false with model.interaction = 'general' or model.layernorm "
          "other than 'post'",
          default_from=_ledger_default),
    Param("diagnostics.clustering", True, Boolean(),
          "clusters, order parameter, smallest cosine, variance, spectrum"),
    Param("diagnostics.cluster_angle", 0.1, Interval(0, math.pi, "neither", hi_text="pi"),
          "tokens within this angle (radians) are in one cluster",
          applies=When("diagnostics.clustering", True)),
    Param("diagnostics.merge_cosine", 0.999, Interval(-1, 1, "neither"),
          "merged_fraction counts the pairs i ≠ j with <x_i, x_j> above this cosine",
          applies=When("diagnostics.clustering", True)),
    Param("diagnostics.w2", False, Boolean(), "W2 between snapshots (POT; costly)"),
    Param("diagnostics.max_pairwise_n", 2000, Integer(lo=2),
          "O(n²) diagnostics are skipped or subsampled above this n"),
    Param("output.path", "wflow_run.h5", Path(required=True), "HDF5 result file"),
    Param("output.store_tokens", True, Boolean(), "store the token snapshots X"),
    Param("output.store_weights", False, Boolean(), "store the weight trajectory D"),
    Param("output.checkpoint_every", 200, Integer(lo=1),
          "steps between resumable checkpoints (adaptive: rounds of the loop, [model §6d])"),
    Param("output.overwrite", False, Boolean(), "replace a complete result"),
]:
    schema.register_param(_p)
    if _p.key == "weights.process":  # the processes' own keys follow it in the table
        process_keys.sync()
schema.register_source(process_keys.sync)


def __getattr__(name):
    if name == "DEFAULTS":  # every key with its default value: a fresh copy of the table's
        return schema.defaults()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: the embedded default run (wflow/data/default.toml): the reference setting of [model §9],
#: shortened; every other key at its default
DEFAULT_RUN = {"solver.T": 2.0, "solver.paths": 2}


def first_record(cfg: dict) -> float:
    """The first positive geometric record time: ``solver.first_record``, or (0) ``record_every``
    steps of ``dt`` [model §6d]."""
    s = cfg["solver"]
    return float(s["first_record"]) or float(s["dt"]) * int(s["record_every"])


def n_steps(cfg: dict) -> int:
    """Number of steps ``round(T/dt)`` of a validated configuration."""
    return int(round(cfg["solver"]["T"] / cfg["solver"]["dt"]))


def validate(cfg, explicit=None) -> dict:
    """Fill defaults, check every value and rule, return a new normalised dict.

    ``explicit``: the dotted keys the user gave (None: every key present in ``cfg``; ``()``
    for a stored, complete configuration). Raises :class:`ConfigError` with one line.

    The ``[weights]`` keys of a process are declared on its class
    (:mod:`wflow.config.process_keys`); a process named by ``module:Class`` or an entry
    point is imported first, so its keys are in the table.
    """
    w = cfg.get("weights") if isinstance(cfg, Mapping) else None
    if isinstance(w, Mapping) and isinstance(w.get("process"), str):
        try:
            get_process(w["process"])
        except ValueError:
            pass  # the table's check names the bad value
    return schema.validate(cfg, explicit)


@contextmanager
def config_errors():
    """Turn a model module's ``ValueError`` naming one of its parameters (``beta = 0: ...``)
    into a :class:`ConfigError` naming the key (``model.beta = 0: ...``)."""
    try:
        yield
    except ConfigError:
        raise
    except ValueError as exc:
        msg = str(exc)
        m = re.match(r"([A-Za-z_]\w*)( = |: )", msg)
        if m is None or m.group(1) not in PARAM_KEYS:
            raise
        raise error(PARAM_KEYS[m.group(1)] + msg[m.end(1):]) from exc


# --------------------------------------------------------------------------------------
# Overrides, resolution
# --------------------------------------------------------------------------------------


def apply_overrides(cfg: dict, overrides) -> dict:
    """Apply ``section.key=value`` strings to a copy of ``cfg`` and return the copy.

    Missing tables on the way are created. If ``weights.process`` is overridden, every
    inherited key of another process that the new one does not read (or whose value it does
    not allow, e.g. ``weights.scheme = "euler_maruyama"`` for oscillating) is dropped unless
    overridden too, so the new process's defaults apply.
    """
    out = config_files.apply_overrides(cfg, overrides)
    keys = _override_keys(overrides)
    if "weights.process" in keys:
        process_keys.drop_inherited(out, keys)
    return out


def _override_keys(overrides) -> set[str]:
    if isinstance(overrides, str):
        overrides = [overrides]
    return {".".join(parse_override(o)[0][:2]) for o in overrides}


def resolve(cfg_or_path=None, overrides=(), explicit=None) -> dict:
    """The validated configuration of a run.

    ``None`` -> the embedded default run; a ``str`` or path -> that TOML file; a dict
    -> itself. Then the overrides, then :func:`validate`. The keys given explicitly are
    those of the file or dict and of the overrides (none of the embedded default run);
    ``explicit=()`` marks a stored, complete configuration (e.g. on resume).
    """
    given = None  # a file or a dict: every key it holds (after the overrides) was given
    if cfg_or_path is None:
        cfg = default_config()
        given = _override_keys(overrides)  # the embedded default run sets nothing explicitly
    elif isinstance(cfg_or_path, (str, os.PathLike)):
        cfg = load_toml(cfg_or_path)
    elif isinstance(cfg_or_path, Mapping):
        cfg = cfg_or_path
    else:
        raise error(f"config = {show(cfg_or_path)}: expected None, a path or a dict "
                    f"(got {typename(cfg_or_path)})")
    if overrides:
        cfg = apply_overrides(cfg, overrides)
    if cfg_or_path is None:  # a derived default the embedded run states is left to its rule
        for p in schema.params():  # (e.g. record_every of a run shorter than 5 steps)
            if (p.default_from and p.key not in given
                    and cfg.get(p.section, {}).get(p.name) == p.default):
                cfg = {**cfg, p.section: {k: v for k, v in cfg[p.section].items()
                                          if k != p.name}}
    return validate(cfg, given if explicit is None else tuple(explicit))


#: Keys that decide where and how a result is written, not what its arrays hold: left out of
#: :func:`computation` (a rerun that changes only these reuses the result).
NOT_COMPUTATION = ("output.path", "output.checkpoint_every", "output.overwrite")

#: Keys naming input files: :func:`computation` holds the sha256 of the file's bytes.
INPUT_FILE_KEYS = ("init.tokens_file", "init.weights_file", "weights.file",
                   "weights.file_values", "weights.imported")


def _file_digest(name):
    """``"sha256:<hex>"`` of the file's bytes, or the name itself when it cannot be read."""
    try:
        with open(name, "rb") as fh:
            return "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError:
        return name


def computation(cfg, digests=None) -> dict:
    """What decides the arrays of a run's result: the validated configuration without
    :data:`NOT_COMPUTATION`, each input file of :data:`INPUT_FILE_KEYS` replaced by the
    sha256 of its bytes (the file's content, not its name, is what the run reads).
    ``digests`` (dotted key -> ``"sha256:<hex>"``) gives the digests of the files a stored
    run read, which are used instead of the files' content today."""
    out = copy.deepcopy(validate(cfg, ()))
    for key in NOT_COMPUTATION:
        sec, k = key.split(".")
        out.get(sec, {}).pop(k, None)
    for key in INPUT_FILE_KEYS:
        sec, k = key.split(".")
        if out.get(sec, {}).get(k):
            given = (digests or {}).get(key)
            out[sec][k] = given if given is not None else _file_digest(out[sec][k])
    return out


def config_hash(cfg, versions=None, digests=None) -> str:
    r"""The computation hash: sha256 (hex) of the canonical JSON (sorted keys) of
    :func:`computation` and ``versions``.

    Two runs with the same hash give the same arrays, so a result is reused only when its
    hash, recomputed from its stored configuration and versions, equals the request's.

    Parameters
    ----------
    cfg : a configuration (validated here).
    versions : mapping, e.g. ``{"format": 2, "wflow": "0.1.0"}``: the results format and the
        wflow version whose numbers the file promises (:func:`wflow.engine.driver.result_hash`
        passes them); None hashes the configuration alone.
    digests : mapping, optional
        The digests of the input files a stored run read (:func:`computation`).
    """
    comp = computation(cfg, digests)
    data = comp if versions is None else {"config": comp, "versions": dict(versions)}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def differing_keys(a, b) -> list[str]:
    """The dotted keys whose values differ between the computations of configurations ``a``
    and ``b`` (:func:`computation`), sorted."""
    ca, cb = computation(a), computation(b)
    keys = {f"{s}.{k}" for c in (ca, cb) for s, sec in c.items() if isinstance(sec, Mapping)
            for k in sec}
    get = lambda c, key: c.get(key.split(".")[0], {}).get(key.split(".")[1], None)
    return sorted(k for k in keys if get(ca, k) != get(cb, k))
