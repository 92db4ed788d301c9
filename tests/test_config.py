"""Tests of wflow.config: vocabulary, defaults, validation rules, overrides, hashing."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wflow import config as C
from wflow.errors import ConfigError
from wflow.model.processes.layers import LAYER_KEYS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "wflow" / "data" / "experiments").glob("*.toml"))
DEFAULT_TOML = ROOT / "wflow" / "data" / "default.toml"


def one_line(msg: str) -> bool:
    return len(msg.splitlines()) == 1 and "\n" not in msg and "\r" not in msg


def with_values(base: dict | None = None, **dotted) -> dict:
    """A copy of ``base`` (default: default_config()) with ``section__key=value`` set."""
    cfg = copy.deepcopy(base if base is not None else C.default_config())
    for name, value in dotted.items():
        section, key = name.split("__")
        cfg.setdefault(section, {})[key] = value
    return cfg


# --------------------------------------------------------------------------------------
# Defaults, shipped examples, hashing
# --------------------------------------------------------------------------------------


def test_defaults_cover_the_vocabulary():
    assert set(C.DEFAULTS) == {"model", "init", "weights", "solver", "diagnostics", "output",
                               "density"}  # [density]: the S¹ density representation (§5b)
    # [model §10] names are all present
    spec = {
        "model": "d n beta heads normalization sign laplacian_heads mask values",
        "init": "tokens token_noise weights seed",
        "weights": "process rate mean noise_var scheme phase",
        "solver": "method dt T record_every paths",
        "diagnostics": "ledger",
        "output": "path store_tokens store_weights",
    }
    for section, names in spec.items():
        assert set(names.split()) <= set(C.DEFAULTS[section])
    # DEFAULTS alone is a valid configuration and validation is a fixed point on it
    assert C.validate(C.DEFAULTS) == C.DEFAULTS


def test_default_config_is_the_short_reference_run():
    cfg = C.default_config()
    out = C.validate(cfg)
    assert out["model"] == {**C.DEFAULTS["model"], "d": 3, "n": 200, "beta": 1.0, "heads": 10}
    assert out["init"]["tokens"] == "octahedral" and out["init"]["token_noise"] == 0.05
    assert out["init"]["weights"] == "symmetric_gaussian"
    w = out["weights"]
    assert (w["process"], w["rate"], w["mean"], w["noise_var"], w["scheme"]) == (
        "ou", 1.0, 1.0, 2.0, "euler_maruyama")
    s = out["solver"]
    assert (s["method"], s["dt"], s["T"], s["record_every"], s["paths"]) == (
        "euler", 0.005, 2.0, 5, 2)
    assert C.n_steps(out) == 400
    # a fresh copy each time, DEFAULTS untouched
    cfg["model"]["n"] = 7
    assert C.default_config()["model"]["n"] == 200
    assert C.DEFAULTS["model"]["n"] == 200
    assert C.resolve() == out


def test_default_toml_every_setting_is_commented():
    for line in DEFAULT_TOML.read_text("utf-8").splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            assert "#" in line, line


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_shipped_example_validates(path):
    cfg = C.resolve(path)
    assert C.validate(cfg) == cfg
    assert C.resolve(str(path)) == cfg


def test_required_examples_are_shipped_with_their_settings():
    names = {p.name for p in EXAMPLES}
    required = {"paper_ou.toml", "paper_oscillating.toml", "oscillating_spread.toml",
                "laplacian_heads.toml", "joint_gradient_flow.toml", "clustering_ascent_s2.toml"}
    assert required <= names
    d = "wflow/data/experiments/"
    ou = C.resolve(ROOT / (d + "paper_ou.toml"))
    assert (ou["model"]["heads"], ou["solver"]["paths"], ou["solver"]["T"]) == (10, 10, 20.0)
    assert ou["weights"]["process"] == "ou" and C.n_steps(ou) == 4000
    osc = C.resolve(ROOT / (d + "paper_oscillating.toml"))
    assert (osc["weights"]["process"], osc["weights"]["phase"]) == ("oscillating", "shared")
    assert (osc["weights"]["noise_var"], osc["solver"]["paths"], osc["solver"]["T"]) == (
        0.0, 1, 20.0)
    spread = C.resolve(ROOT / (d + "oscillating_spread.toml"))
    assert spread["weights"]["phase"] == "spread"
    lap = C.resolve(ROOT / (d + "laplacian_heads.toml"))
    assert lap["model"]["heads"] == 4 and lap["model"]["laplacian_heads"] == [2, 3]
    joint = C.resolve(ROOT / (d + "joint_gradient_flow.toml"))
    assert joint["model"]["normalization"] == "joint"
    assert joint["weights"]["process"] == "frozen"
    clu = C.resolve(ROOT / (d + "clustering_ascent_s2.toml"))
    assert (clu["model"]["sign"], clu["init"]["weights"], clu["weights"]["process"],
            clu["init"]["tokens"]) == ("ascent", "identity", "frozen", "uniform")


def test_config_hash_stable_and_sensitive():
    cfg = C.default_config()
    h = C.config_hash(cfg)
    assert re.fullmatch(r"[0-9a-f]{64}", h)
    assert C.config_hash(C.default_config()) == h
    assert C.config_hash(C.validate(cfg)) == h  # validated or not
    # key order does not matter
    reordered = {s: dict(reversed(list(cfg[s].items()))) for s in reversed(list(cfg))}
    assert C.config_hash(reordered) == h
    # an int where a float is expected is the same configuration
    assert C.config_hash(with_values(cfg, model__beta=1)) == h
    # missing keys are filled from DEFAULTS: the same as writing the default explicitly
    partial = copy.deepcopy(cfg)
    del partial["diagnostics"]
    assert C.config_hash(partial) == h
    # any change of value changes the hash
    assert C.config_hash(with_values(cfg, model__n=201)) != h
    assert C.config_hash(with_values(cfg, solver__dt=0.0025)) != h
    assert C.config_hash(with_values(cfg, model__laplacian_heads=[9])) != h
    assert C.config_hash(with_values(cfg, output__store_tokens=False)) != h  # other arrays
    # where and how the result is written is not part of the computation
    for key in C.NOT_COMPUTATION:
        s, k = key.split(".")
        other = {"path": "elsewhere/r.h5", "checkpoint_every": 7, "overwrite": True}[k]
        assert C.config_hash(with_values(cfg, **{f"{s}__{k}": other})) == h, key
    assert C.differing_keys(cfg, with_values(cfg, model__n=201, output__path="x.h5")) == [
        "model.n"]
    # the versions of the format and of wflow are part of a result's hash
    assert C.config_hash(cfg, {"format": 2}) != C.config_hash(cfg, {"format": 3}) != h


def test_config_hash_follows_the_content_of_input_files(tmp_path):
    """A weights or tokens file enters the hash by its bytes: the same name with other
    contents is another computation, another name with the same contents is the same."""
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    np.savez(a, D=np.eye(3)[None])
    b.write_bytes(a.read_bytes())
    cfg = C.default_config()
    cfg["model"].update(d=3, heads=1)
    cfg["init"].update(weights="file", weights_file=str(a))
    h = C.config_hash(cfg)
    cfg_b = copy.deepcopy(cfg)
    cfg_b["init"]["weights_file"] = str(b)
    assert C.config_hash(cfg_b) == h
    np.savez(a, D=2 * np.eye(3)[None])
    assert C.config_hash(cfg) != h
    assert C.differing_keys(cfg, cfg_b) == ["init.weights_file"]


def test_validate_returns_new_dict_and_does_not_mutate_input():
    cfg = with_values(model__laplacian_heads=3)
    before = copy.deepcopy(cfg)
    out = C.validate(cfg)
    assert cfg == before
    assert out["model"]["laplacian_heads"] == [7, 8, 9]
    out["model"]["laplacian_heads"].append(0)
    out["weights"]["layers"].append({})
    assert C.DEFAULTS["model"]["laplacian_heads"] == []
    assert C.DEFAULTS["weights"]["layers"] == []
    assert C.validate({})["weights"]["layers"] == []


def test_validate_normalises_types():
    out = C.validate(with_values(model__beta=2, solver__T=4, weights__mean=0,
                                 diagnostics__cluster_angle=1))
    assert type(out["model"]["beta"]) is float and out["model"]["beta"] == 2.0
    assert type(out["solver"]["T"]) is float
    assert type(out["weights"]["mean"]) is float
    assert type(out["diagnostics"]["cluster_angle"]) is float


# --------------------------------------------------------------------------------------
# One case per validation rule
# --------------------------------------------------------------------------------------

# (id, modifications, dotted key in the message, offending value, a fragment of the message)
RULES = [
    ("d-small", {"model__d": 1}, "model.d", 1, ">= 2"),
    ("d-float", {"model__d": 3.0}, "model.d", 3.0, "integer"),
    ("d-bool", {"model__d": True}, "model.d", True, "got bool"),
    ("n-small", {"model__n": 1}, "model.n", 1, "must be an integer >= 2"),
    ("n-str", {"model__n": "200"}, "model.n", "200", "got str"),
    ("beta-zero", {"model__beta": 0}, "model.beta", 0, "> 0"),
    ("beta-neg", {"model__beta": -1.0}, "model.beta", -1.0, "> 0"),
    ("beta-nan", {"model__beta": math.nan}, "model.beta", math.nan, "finite"),
    ("beta-inf", {"model__beta": math.inf}, "model.beta", math.inf, "finite"),
    ("beta-bool", {"model__beta": True}, "model.beta", True, "got bool"),
    ("beta-hugeint", {"model__beta": 10**400}, "model.beta", None, "= 1000"),
    ("heads-zero", {"model__heads": 0}, "model.heads", 0, ">= 1"),
    ("normalization", {"model__normalization": "heads"}, "model.normalization", "heads",
     "allowed values are 'head', 'joint', 'none'"),
    ("sign", {"model__sign": "up"}, "model.sign", "up", "'descent', 'ascent'"),
    ("lap-range", {"model__heads": 3, "model__laplacian_heads": [3]}, "model.laplacian_heads",
     [3], "indices must be in 0..2 (model.heads = 3)"),
    ("lap-negative", {"model__laplacian_heads": [-1]}, "model.laplacian_heads", [-1], "0..9"),
    ("lap-dup", {"model__laplacian_heads": [1, 1]}, "model.laplacian_heads", [1, 1], "distinct"),
    ("lap-k-big", {"model__heads": 4, "model__laplacian_heads": 5}, "model.laplacian_heads",
     5, "0 <= k <= model.heads = 4"),
    ("lap-k-neg", {"model__laplacian_heads": -1}, "model.laplacian_heads", -1, "0 <= k"),
    ("lap-str", {"model__laplacian_heads": "2"}, "model.laplacian_heads", "2", "got str"),
    ("lap-float", {"model__laplacian_heads": [0.0]}, "model.laplacian_heads", [0.0],
     "integers"),
    ("lap-bool", {"model__laplacian_heads": True}, "model.laplacian_heads", True, "got bool"),
    ("mask", {"model__mask": "causal "}, "model.mask", "causal ", "'none', 'causal'"),
    ("values", {"model__values": "untied"}, "model.values", "untied", "'gaussian'"),
    ("tokens", {"init__tokens": "gauss"}, "init.tokens", "gauss", "'vmf'"),
    ("token-noise", {"init__token_noise": -0.1}, "init.token_noise", -0.1, ">= 0"),
    ("kappa", {"init__kappa": 0.0}, "init.kappa", 0.0, "> 0"),
    ("init-weights", {"init__weights": "random"}, "init.weights", "random",
     "'symmetric_gaussian'"),
    ("seed-neg", {"init__seed": -1}, "init.seed", -1, "an integer in 0..18446744073709551615"),
    ("seed-float", {"init__seed": 1.5}, "init.seed", 1.5, "got float"),
    ("tokens-file-type", {"init__tokens_file": 3}, "init.tokens_file", 3, "string"),
    ("tokens-file-missing", {"init__tokens": "file"}, "init.tokens_file", "",
     "init.tokens = 'file'"),
    ("weights-file-missing", {"init__weights": "file", "init__weights_file": " "},
     "init.weights_file", " ", "init.weights = 'file'"),
    ("per-path-tokens", {"init__per_path_tokens": "yes"}, "init.per_path_tokens", "yes",
     "true or false"),
    ("per-path-weights", {"init__per_path_weights": 1}, "init.per_path_weights", 1,
     "true or false"),
    ("process", {"weights__process": "brownian"}, "weights.process", "brownian",
     "'oscillating'"),
    ("rate", {"weights__rate": 0}, "weights.rate", 0, "> 0"),
    ("mean-str", {"weights__mean": "I"}, "weights.mean", "I", "got str"),
    ("mean-nan", {"weights__mean": math.nan}, "weights.mean", math.nan, "finite"),
    ("noise-var", {"weights__noise_var": -2.0}, "weights.noise_var", -2.0, ">= 0"),
    ("scheme", {"weights__scheme": "milstein"}, "weights.scheme", "milstein", "'exact'"),
    ("scheme-ou", {"weights__scheme": "euler"}, "weights.scheme", "euler",
     "weights.process = 'ou': allowed values are 'euler_maruyama', 'exact'"),
    ("scheme-osc", {"weights__process": "oscillating", "weights__scheme": "euler_maruyama"},
     "weights.scheme", "euler_maruyama", "allowed values are 'euler', 'exact'"),
    ("phase", {"weights__phase": "random"}, "weights.phase", "random", "'spread'"),
    ("layers-type", {"weights__layers": "identity"}, "weights.layers", "identity", "tables"),
    ("layers-empty", {"weights__process": "layers"}, "weights.layers", [], "non-empty"),
    ("layer-type", {"weights__layers": [3]}, "weights.layers[0]", 3, "table"),
    ("layer-duration", {"weights__layers": [{"duration": 0, "weights": "identity"}]},
     "weights.layers[0].duration", 0, "> 0"),
    ("layer-missing", {"weights__layers": [{"duration": 1.0}]}, "weights.layers[0].weights",
     None, "missing"),
    ("layer-weights", {"weights__layers": [{"duration": 1.0, "weights": ""}]},
     "weights.layers[0].weights", "", "non-empty"),
    ("layer-seed", {"weights__layers": [{"duration": 1.0, "weights": "identity", "seed": -3}]},
     "weights.layers[0].seed", -3, ">= 0"),
    ("weights-file-process", {"weights__process": "file"}, "weights.file", "",
     "weights.process = 'file'"),
    ("method", {"solver__method": "rk45"}, "solver.method", "rk45", "'heun'"),
    ("dt-zero", {"solver__dt": 0.0}, "solver.dt", 0.0, "> 0"),
    ("dt-str", {"solver__dt": "0.1"}, "solver.dt", "0.1", "must be a number > 0 (got str)"),
    ("T-neg", {"solver__T": -1.0}, "solver.T", -1.0, "> 0"),
    ("T-lt-dt", {"solver__T": 0.001}, "solver.T", 0.001, ">= solver.dt"),
    ("T-fraction", {"solver__T": 2.0025}, "solver.T", 2.0025,
     "whole number of steps of solver.dt (T/dt = 400.5)"),
    ("T-overflow", {"solver__T": 1e308, "solver__dt": 1e-308}, "solver.T", 1e308, "steps"),
    ("record-every-zero", {"solver__record_every": 0}, "solver.record_every", 0, ">= 1"),
    ("record-every-big", {"solver__record_every": 401}, "solver.record_every", 401,
     "number of steps round(solver.T/solver.dt) = 400"),
    ("paths", {"solver__paths": 0}, "solver.paths", 0, ">= 1"),
    ("backend", {"solver__backend": "cuda"}, "solver.backend", "cuda", "'numba', 'numpy'"),
    ("precision", {"solver__precision": "float16"}, "solver.precision", "float16",
     "'float32'"),
    ("exp", {"solver__exp": "slow"}, "solver.exp", "slow", "'fast', 'libm'"),
    ("jko-tol", {"solver__jko_tol": 0}, "solver.jko_tol", 0, "> 0"),
    ("jko-maxiter", {"solver__jko_maxiter": 0}, "solver.jko_maxiter", 0, ">= 1"),
    ("jko-causal", {"solver__method": "jko", "model__mask": "causal"}, "solver.method", "jko",
     "with model.mask = 'causal': energy-based methods are refused under the causal mask"),
    ("ledger", {"diagnostics__ledger": "true"}, "diagnostics.ledger", "true", "true or false"),
    ("clustering", {"diagnostics__clustering": 0}, "diagnostics.clustering", 0, "got int"),
    ("cluster-angle-zero", {"diagnostics__cluster_angle": 0}, "diagnostics.cluster_angle", 0,
     "(0, pi)"),
    ("cluster-angle-big", {"diagnostics__cluster_angle": 3.2}, "diagnostics.cluster_angle",
     3.2, "(0, pi)"),
    ("w2", {"diagnostics__w2": None}, "diagnostics.w2", None, "got NoneType"),
    ("max-pairwise", {"diagnostics__max_pairwise_n": 1}, "diagnostics.max_pairwise_n", 1,
     ">= 2"),
    ("path-empty", {"output__path": ""}, "output.path", "", "non-empty"),
    ("path-type", {"output__path": 5}, "output.path", 5, "got int"),
    ("store-tokens", {"output__store_tokens": "no"}, "output.store_tokens", "no", "true"),
    ("store-weights", {"output__store_weights": 0}, "output.store_weights", 0, "true"),
    ("checkpoint", {"output__checkpoint_every": 0}, "output.checkpoint_every", 0, ">= 1"),
    ("overwrite", {"output__overwrite": "yes"}, "output.overwrite", "yes", "true"),
]


@pytest.mark.parametrize("mods,key,value,fragment", [r[1:] for r in RULES],
                         ids=[r[0] for r in RULES])
def test_validation_rule(mods, key, value, fragment):
    cfg = with_values(**mods)
    with pytest.raises(ConfigError) as info:
        C.validate(cfg)
    msg = str(info.value)
    assert one_line(msg), msg
    assert msg.startswith(key + " ") or f"{key} = " in msg or f"{key} is" in msg, msg
    if value is not None:
        assert f"{key} = {value!r}" in msg, msg
    assert fragment in msg, msg
    assert isinstance(info.value, ValueError)  # ConfigError is a ValueError too


def test_exact_messages_of_the_brief():
    def msg(**mods):
        with pytest.raises(ConfigError) as info:
            C.validate(with_values(**mods))
        return str(info.value)

    assert msg(model__n=1) == "model.n = 1: must be an integer >= 2"
    assert msg(model__normalization="heads") == (
        "model.normalization = 'heads': allowed values are 'head', 'joint', 'none'")
    assert msg(solver__dt="0.1") == "solver.dt = '0.1': must be a number > 0 (got str)"
    assert msg(model__heads=3, model__laplacian_heads=[3]) == (
        "model.laplacian_heads = [3]: indices must be in 0..2 (model.heads = 3)")
    assert msg(solver__method="jko", model__mask="causal") == (
        "solver.method = 'jko' with model.mask = 'causal': "
        "energy-based methods are refused under the causal mask")
    assert msg(solver__dtt=0.1) == "unknown key 'solver.dtt': did you mean 'solver.dt'?"


@pytest.mark.parametrize("mods", [{"model__mask": "causal"},
                                  {"model__mask": "causal", "solver__method": "rk4"},
                                  {"solver__method": "jko"}])
def test_causal_mask_allows_explicit_methods_and_jko_allows_no_mask(mods):
    C.validate(with_values(**mods))


def test_section_must_be_a_table():
    for bad in (3, [1, 2], "x", None, True):
        with pytest.raises(ConfigError) as info:
            C.validate({"model": bad})
        msg = str(info.value)
        assert one_line(msg) and msg.startswith(f"model = {bad!r}:"), msg
    with pytest.raises(ConfigError, match="must be a table of sections"):
        C.validate([("model", {})])


# --------------------------------------------------------------------------------------
# Unknown keys and sections
# --------------------------------------------------------------------------------------


def test_unknown_key_suggests_close_key():
    with pytest.raises(ConfigError) as info:
        C.validate({"solver": {"dtt": 0.1}})
    assert str(info.value) == "unknown key 'solver.dtt': did you mean 'solver.dt'?"
    with pytest.raises(ConfigError, match=r"did you mean 'model\.normalization'"):
        C.validate({"model": {"normalisation": "head"}})
    # a key of another section
    with pytest.raises(ConfigError, match=r"'model.paths': did you mean 'solver.paths'"):
        C.validate({"model": {"paths": 2}})
    # nothing close: list the allowed keys
    with pytest.raises(ConfigError) as info:
        C.validate({"output": {"zzzzzz": 1}})
    msg = str(info.value)
    assert "'output.zzzzzz'" in msg and "'store_tokens'" in msg and one_line(msg)


def test_unknown_section_suggests_close_section():
    with pytest.raises(ConfigError) as info:
        C.validate({"solvr": {"dt": 0.1}})
    assert str(info.value) == "unknown section 'solvr': did you mean 'solver'?"
    with pytest.raises(ConfigError, match=r"unknown section 'dt': did you mean 'solver\.dt'"):
        C.validate({"dt": 0.1})
    with pytest.raises(ConfigError) as info:
        C.validate({"qqqqqqq": {}})
    assert "'diagnostics'" in str(info.value)
    with pytest.raises(ConfigError, match="unknown section"):
        C.validate({1: {}})


def test_unknown_layer_key():
    cfg = with_values(weights__process="layers",
                      weights__layers=[{"duration": 1.0, "weigths": "identity"}])
    with pytest.raises(ConfigError) as info:
        C.validate(cfg)
    assert str(info.value) == (
        "unknown key 'weights.layers[0].weigths': did you mean 'weights.layers[0].weights'?")


def test_messages_stay_on_one_line_for_hostile_values():
    class Evil:
        def __repr__(self):
            return "line one\nline two"

    class Worse:
        def __repr__(self):
            raise RuntimeError("no repr")

    evil = "a\nb\r\u2028c"
    for cfg in ({"model": {"normalization": evil}}, {evil: {}}, {"model": {evil: 1}},
                {"output": {"path": 10**5000}}, {"model": {"n": [[[[[[1]]]]]] * 100}},
                {"model": {"n": Evil()}}, {"model": {"n": Worse()}}, {Evil(): {}}):
        with pytest.raises(ConfigError) as info:
            C.validate(cfg)
        assert one_line(str(info.value)), str(info.value)


# --------------------------------------------------------------------------------------
# Model details
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("heads,k,expected", [(10, 0, []), (10, 1, [9]), (4, 2, [2, 3]),
                                              (3, 3, [0, 1, 2]), (1, 1, [0])])
def test_laplacian_heads_int_means_last_k(heads, k, expected):
    out = C.validate(with_values(model__heads=heads, model__laplacian_heads=k))
    assert out["model"]["laplacian_heads"] == expected


def test_laplacian_heads_list_is_sorted():
    out = C.validate(with_values(model__heads=5, model__laplacian_heads=[4, 0, 2]))
    assert out["model"]["laplacian_heads"] == [0, 2, 4]


def test_oscillating_scheme_defaults_to_euler():
    cfg = C.validate({"weights": {"process": "oscillating"}})
    assert cfg["weights"]["scheme"] == "euler"
    assert C.validate({"weights": {"process": "ou"}})["weights"]["scheme"] == "euler_maruyama"
    assert C.validate({"weights": {"process": "oscillating", "scheme": "exact"}})[
        "weights"]["scheme"] == "exact"
    # from the default run, an override of the process alone drops the inherited scheme
    assert C.resolve(None, ["weights.process=oscillating"])["weights"]["scheme"] == "euler"
    assert C.resolve(None, ["weights.process=oscillating", "weights.scheme=exact"])[
        "weights"]["scheme"] == "exact"
    # ... but a compatible inherited scheme stays
    base = with_values(weights__scheme="exact")
    assert C.resolve(base, ["weights.process=oscillating"])["weights"]["scheme"] == "exact"
    with pytest.raises(ConfigError, match="weights.scheme = 'euler_maruyama'"):
        C.resolve(None, ["weights.process=oscillating", "weights.scheme=euler_maruyama"])


def test_a_key_of_another_process_is_refused_naming_the_process_keys():
    """Every process declares its keys on its class; a key of another process set to a value
    other than its default is one error line (the same rule for every process)."""
    msg = "weights.noise_var = 0.5 with weights.process = 'frozen': cannot apply (only with " \
          "weights.process = 'ou'); process 'frozen' has no keys of its own"
    with pytest.raises(ConfigError, match=f"^{re.escape(msg)}$"):
        C.validate({"weights": {"process": "frozen", "noise_var": 0.5}})
    with pytest.raises(ConfigError, match=re.escape(
            "weights.phase = 'spread' with weights.process = 'ou': cannot apply (only with "
            "weights.process = 'oscillating'); the keys of process 'ou' are rate, mean, "
            "noise_var, noise_refine, scheme")):
        C.validate({"weights": {"process": "ou", "phase": "spread"}})
    # its default is quiet; the deterministic oscillating process accepts noise_var (as 0)
    assert C.validate({"weights": {"process": "frozen", "rate": 1.0}}) == C.validate(
        {"weights": {"process": "frozen"}})
    assert C.validate({"weights": {"process": "oscillating", "noise_var": 0.0}})[
        "weights"]["noise_var"] == 0.0


def test_changing_the_process_drops_the_keys_of_the_old_one():
    ou = ROOT / "wflow/data/experiments/paper_ou.toml"
    osc = C.resolve(ou, ["weights.process=frozen"])
    assert osc["weights"]["process"] == "frozen" and osc["weights"]["noise_var"] == 2.0
    assert C.resolve(ou, ["weights.process=oscillating", "weights.phase=spread"])[
        "weights"]["scheme"] == "euler"
    base = {"weights": {"process": "ou", "noise_var": 0.5, "rate": 3.0}}
    assert C.resolve(base, ["weights.process=oscillating"])["weights"]["rate"] == 1.0
    with pytest.raises(ConfigError, match="weights.rate = 3.0 with weights.process = 'frozen'"):
        C.resolve(base, ["weights.process=frozen", "weights.rate=3.0"])


def test_steps_tolerance():
    ok = C.validate(with_values(solver__dt=0.1, solver__T=0.3, solver__record_every=1))
    assert C.n_steps(ok) == 3
    assert C.n_steps(C.validate(with_values(solver__dt=0.005, solver__T=20.0))) == 4000
    C.validate(with_values(solver__dt=0.005, solver__T=0.005, solver__record_every=1))
    with pytest.raises(ConfigError, match="T/dt = 3.5"):
        C.validate(with_values(solver__dt=0.1, solver__T=0.35, solver__record_every=1))


def test_layers_are_normalised():
    cfg = with_values(weights__process="layers",
                      weights__layers=[{"duration": 1, "weights": "identity"},
                                       {"duration": 1.0, "weights": "w.npz", "seed": 4}])
    layers = C.validate(cfg)["weights"]["layers"]
    assert layers == [{"duration": 1.0, "weights": "identity", "seed": 0},
                      {"duration": 1.0, "weights": "w.npz", "seed": 4}]


# --------------------------------------------------------------------------------------
# Overrides
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,path,value", [
    ("solver.dt=0.01", ["solver", "dt"], 0.01),
    ("model.n=150", ["model", "n"], 150),
    ("model.beta = 2", ["model", "beta"], 2),
    ("output.overwrite=true", ["output", "overwrite"], True),
    ("diagnostics.w2=false", ["diagnostics", "w2"], False),
    ("model.laplacian_heads=[0, 1]", ["model", "laplacian_heads"], [0, 1]),
    ("model.normalization=joint", ["model", "normalization"], "joint"),
    ('output.path="my run.h5"', ["output", "path"], "my run.h5"),
    ("output.path=runs/a-1.h5", ["output", "path"], "runs/a-1.h5"),
    ("output.path=2024-01-01", ["output", "path"], "2024-01-01"),  # dates stay strings
    ("init.tokens_file=", ["init", "tokens_file"], ""),
    ("solver.T=1e1", ["solver", "T"], 10.0),
    ("weights.layers=[{duration = 1.0, weights = 'identity'}]", ["weights", "layers"],
     [{"duration": 1.0, "weights": "identity"}]),
    ("a.b.c=x=y", ["a", "b", "c"], "x=y"),
])
def test_parse_override_types(text, path, value):
    p, v = C.parse_override(text)
    assert p == path and v == value and type(v) is type(value)


@pytest.mark.parametrize("text", ["solver.dt", "=1", "  =1", ".a=1", "a..b=1", "a.=1",
                                  "a b=1", "solver.dt=1\nmodel.n=3", 3, None])
def test_parse_override_rejects_bad_strings(text):
    with pytest.raises(ConfigError) as info:
        C.parse_override(text)
    assert one_line(str(info.value))


def test_apply_overrides_creates_nested_keys_and_copies():
    base = {"model": {"n": 10}}
    out = C.apply_overrides(base, ["solver.dt=0.01", "model.n=20", "x.y.z=1"])
    assert out == {"model": {"n": 20}, "solver": {"dt": 0.01}, "x": {"y": {"z": 1}}}
    assert base == {"model": {"n": 10}}
    assert C.apply_overrides(base, "model.n=3") == {"model": {"n": 3}}  # one string
    with pytest.raises(ConfigError, match="is not a table"):
        C.apply_overrides(base, ["model.n.x=1"])
    with pytest.raises(ConfigError):
        C.apply_overrides(base, [1])
    with pytest.raises(ConfigError):
        C.apply_overrides(base, 5)


def test_resolve_with_overrides():
    cfg = C.resolve(None, ["model.heads=4", "model.laplacian_heads=1", "solver.paths=3"])
    assert cfg["model"]["laplacian_heads"] == [3] and cfg["solver"]["paths"] == 3
    with pytest.raises(ConfigError, match="did you mean 'solver.dt'"):
        C.resolve(None, ["solver.dtt=0.1"])
    with pytest.raises(ConfigError, match="expected None, a path or a dict"):
        C.resolve(3)


def test_resolve_file_fills_from_defaults(tmp_path):
    f = tmp_path / "run.toml"
    f.write_text("[model]\nheads = 1\n[solver]\nT = 1.0\n", "utf-8")
    cfg = C.resolve(f)
    assert cfg["model"]["heads"] == 1 and cfg["solver"]["paths"] == 2  # the default run's
    assert cfg["init"] == C.DEFAULTS["init"]


def test_load_toml_errors(tmp_path):
    with pytest.raises(ConfigError) as info:
        C.load_toml(tmp_path / "missing.toml")
    assert "missing.toml" in str(info.value) and "not found" in str(info.value)
    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\nn = 3\nbeta = = 1\n", "utf-8")
    with pytest.raises(ConfigError) as info:
        C.load_toml(bad)
    msg = str(info.value)
    assert one_line(msg) and "bad.toml" in msg and "line 3" in msg, msg
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"a = '\xff\xfe'\n")
    with pytest.raises(ConfigError, match="UTF-8"):
        C.load_toml(binary)
    with pytest.raises(ConfigError):
        C.load_toml(tmp_path)  # a directory
    with pytest.raises(ConfigError):
        C.load_toml(3.5)


# --------------------------------------------------------------------------------------
# Property: validation and overrides raise ConfigError or nothing, whatever the input
# --------------------------------------------------------------------------------------

# every code point UTF-8 encodes, i.e. all but the surrogates (category Cs): the set of
# st.text()'s default alphabet, named by category so hypothesis reads its bundled category
# table instead of building the UTF-8 table by encoding each of the 1.1 M code points
# (~3 s per process on a clean clone, where .hypothesis/ is empty)
def text(max_size):
    return st.text(st.characters(exclude_categories=["Cs"]), max_size=max_size)


SECTIONS = list(C.DEFAULTS)
ALL_KEYS = [(s, k) for s in C.DEFAULTS for k in C.DEFAULTS[s]]

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.sampled_from([0, 1, 2, 3, 5, 10, 400, 10**30, -(10**30)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.005, 0.1, 2.0, 20.0, 1e-300, 1e300]),
    text(max_size=12),
    st.sampled_from(["head", "joint", "none", "ou", "oscillating", "layers", "file", "jko",
                     "causal", "euler", "exact", "euler_maruyama", "identity", "uniform"]),
)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.one_of(text(max_size=8), st.sampled_from(list(LAYER_KEYS))),
                      inner, max_size=4),
    max_leaves=12,
)
names = st.one_of(st.sampled_from([k for _, k in ALL_KEYS]), text(max_size=10))
random_docs = st.dictionaries(
    st.one_of(st.sampled_from(SECTIONS), text(max_size=10)),
    st.one_of(st.dictionaries(names, values, max_size=6), values),
    max_size=7,
)
# the default run with a few real keys set to random values of random types
perturbed_docs = st.lists(st.tuples(st.sampled_from(ALL_KEYS), values), max_size=4).map(
    lambda changes: _perturb(changes)
)


def _perturb(changes):
    cfg = C.default_config()
    for (section, key), value in changes:
        cfg[section][key] = value
    return cfg


dotted = st.one_of(st.sampled_from([f"{s}.{k}" for s, k in ALL_KEYS]),
                   text(max_size=12))
literals = st.one_of(
    text(max_size=12),
    st.sampled_from(["1", "0", "-1", "0.5", "1e400", "nan", "inf", "true", "false", "[0, 1]",
                     "[1, 1]", "[]", "'x'", '"x"', "{a = 1}", "[{duration = 1.0}]",
                     "[[[]]]", "1979-05-27", "oscillating", "jko", "causal", "file", "[",
                     "{", '"', "9" * 5000]),
)
override_strings = st.one_of(
    text(max_size=30),
    st.builds(lambda k, v: f"{k}={v}", dotted, literals),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.one_of(random_docs, perturbed_docs, values),
       overrides=st.lists(override_strings, max_size=3))
def test_validate_never_raises_anything_but_config_error(doc, overrides):
    try:
        out = C.resolve(doc, overrides) if isinstance(doc, dict) else C.validate(doc)
    except ConfigError as exc:
        assert one_line(str(exc)), str(exc)
        return
    assert isinstance(out, dict)
    assert C.validate(out) == out  # validation is a fixed point
    assert len(C.config_hash(out)) == 64


@settings(max_examples=300, deadline=None)
@given(text=override_strings)
def test_parse_override_never_raises_anything_but_config_error(text):
    try:
        path, _ = C.parse_override(text)
    except ConfigError as exc:
        assert one_line(str(exc)), str(exc)
        return
    assert path and all(path)


def test_a_default_never_makes_a_short_run_invalid():
    """``record_every`` left at its default follows a run shorter than 5 steps (every step is
    recorded); given explicitly it is checked as given."""
    assert C.resolve(None, ["solver.T=0.015"])["solver"]["record_every"] == 3
    assert C.resolve(None)["solver"]["record_every"] == 5
    assert C.resolve({"solver": {"T": 0.01, "dt": 0.005}})["solver"]["record_every"] == 2
    with pytest.raises(ConfigError, match=r"solver.record_every = 5: must be <= .* = 3"):
        C.resolve(None, ["solver.T=0.015", "solver.record_every=5"])
