"""Run configuration: the TOML vocabulary of [model §10], declared once in a table.

A run is one nested dict ``{section: {key: value}}`` (the same shape as the TOML document).
Every key is one :class:`~wflow.config.schema.Param` of one table (default, constraint,
one-line doc, when it applies, cross-key rule): the core keys below, the keys a feature
declares in its own module with :func:`wflow.params.declare` (the layer-norm placements in
:mod:`wflow.stepping.layernorm`, adaptive steps in :mod:`wflow.stepping.adaptive`, the density
in :mod:`wflow.stepping.density`, token noise in :mod:`wflow.stepping.noise`, JKO in
:mod:`wflow.stepping.jko`, general interactions in :mod:`wflow.model.interaction`) and the
weight processes' keys (declared on their classes). From the table come :data:`DEFAULTS`,
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
from wflow.config.rules import (
    STEP_RTOL,  # noqa: F401 - re-exported
    _classes_rule,
    _first_record_rule,
    _laplacian,
    _ledger_default,
    _needs_file,
    _process,
    _record_default,
    _record_rule,
    _shared_path_rule,
    _steps_rule,
    first_record,  # noqa: F401 - re-exported (the engine's record times)
    n_steps,
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
    error,
    show,
    typename,
)
from wflow.errors import ConfigError
from wflow.model.attention import (
    BACKENDS,
    EXPS,
    MASKS,
    NORMALIZATIONS,
    PRECISIONS,
    SIGNS,
)
from wflow.model.processes import get_process
from wflow.model.weights import INITIAL_WEIGHTS
from wflow.stepping.registry import STEPPERS, methods_doc  # (the package: every built-in feature's keys)

__all__ = [  # noqa: F822 - DEFAULTS comes from the module __getattr__ (always the whole table)
    "DEFAULTS", "default_config", "load_toml", "parse_override", "apply_overrides", "validate",
    "resolve", "config_hash", "computation", "differing_keys", "NOT_COMPUTATION", "n_steps",
    "config_errors", "PARAM_KEYS", "default_toml",
    "markdown_reference", "generated_files",
]

VALUES = ("tied", "identity", "minus_identity", "gaussian", "symmetric_gaussian")
TOKEN_INITS = ("octahedral", "uniform", "vmf", "classes", "file", "uniform_mode",
               "uniform_noise", "imported")

METHODS = STEPPERS  # solver.method: every registered stepper (a dict: later ones count too)

#: parameter names of the model modules -> configuration keys (see :func:`config_errors`)
PARAM_KEYS = {"beta": "model.beta", "normalization": "model.normalization",
              "sign": "model.sign", "laplacian_heads": "model.laplacian_heads", "heads": "model.heads",
              "mask": "model.mask", "backend": "solver.backend", "precision": "solver.precision",
              "fast_exp": "solver.exp", "d": "model.d", "method": "solver.method",
              "nu": "model.diffusion", "diffusion_scheme": "density.diffusion_scheme",
              "diffusion_mobility": "density.diffusion_mobility",
              "interaction": "model.interaction", "head_combine": "model.head_combine"}

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
    Param("init.tokens", "octahedral", Choice(TOKEN_INITS),
          "octahedral: ±e_a plus noise, renormalised; uniform; vmf; classes (per path: a "
          "sequence centre around its class centre, tokens around it); file; imported (an imported "
          "model's own starts, init.imported_tokens [model §5c]); density only: "
          "uniform_mode, uniform_noise (uniform plus a small perturbation) [model §5b]"),
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
    Param("solver.method", "euler", Choice(METHODS), methods_doc()),
    Param("solver.dt", 0.005, _POS, "time step Δt"),
    Param("solver.T", 2.0, _POS, "final time (a whole number of steps)", rule=_steps_rule),
    Param("solver.record_every", 5, Integer(lo=1),
          "steps between records (t = 0 is a record); left out: 5, or every step of a run "
          "of fewer than 5 steps",
          rule=_record_rule, default_from=_record_default),
    Param("solver.record_times", "uniform", Choice(("uniform", "geometric")),
          "uniform: every record_every steps; geometric: solver.records times from "
          "solver.first_record to T (fixed steppers round them to the step grid)"),
    Param("solver.records", 200, Integer(lo=2), "geometric: number of positive record times",
          applies=When("solver.record_times", "geometric")),
    Param("solver.first_record", 0.0, _NONNEG,
          "geometric: the first positive record time (0: record_every·dt)",
          applies=When("solver.record_times", "geometric"), rule=_first_record_rule),
    Param("solver.paths", 2, Integer(lo=1), "Monte Carlo paths of the weight noise"),
    Param("solver.backend", "numba", Choice(BACKENDS),
          "numba: compiled kernels; numpy: the plain reference"),
    Param("solver.precision", "float64", Choice(PRECISIONS),
          "float32: the pair loop in single precision",
          applies=(When("model.d", 3), When("solver.backend", "numba"), When("solver.exp", "fast"))),
    Param("solver.exp", "fast", Choice(EXPS), "exponential of the compiled kernels: fast or libm",
          applies=When("solver.backend", "numba")),
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
INPUT_FILE_KEYS = ("init.tokens_file", "init.token_ids_file", "init.weights_file", "weights.file",
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
