"""Tests of wflow.config.schema: one table of keys, the files generated from it, the extension hook,
explicit settings that cannot apply, and the model's errors mapped to keys."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import pytest

from wflow import config as C
from wflow.config import files as F
from wflow.config import schema
from wflow.config.schema import Choice, Integer, Interval, Param, When
from wflow.errors import ConfigError
from wflow.kernels import reference as _reference
from wflow.model import attention, processes
from wflow.model.attention import AttentionModel
from wflow.model.processes import oscillating
from wflow.stepping import integrators

ROOT = Path(__file__).resolve().parents[1]


def error_of(fn, *args, **kw) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kw)
    msg = str(info.value)
    assert len(msg.splitlines()) == 1, msg
    return msg


@pytest.fixture
def scratch_table(monkeypatch):
    """Registrations made by a test are undone afterwards."""
    monkeypatch.setattr(schema, "_PARAMS", dict(schema._PARAMS))
    monkeypatch.setattr(schema, "_SECTIONS", dict(schema._SECTIONS))


# --------------------------------------------------------------------------------------
# One table: defaults and generated files
# --------------------------------------------------------------------------------------


def test_generated_files_are_in_sync():
    """default.toml and the user guide's key reference are generated from the table
    (regenerate with `python -m wflow.config write`)."""
    files = F.generated_files(ROOT)
    assert set(files) == {ROOT / "wflow" / "data" / "default.toml", ROOT / "docs" / "guide.md"}
    for path, text in files.items():
        assert path.read_text("utf-8") == text, f"{path} is stale: python -m wflow.config write"
    assert F.main(["check"]) == 0


def test_table_is_the_single_source():
    keys = [p.key for p in schema.params()]
    assert len(keys) == len(set(keys))
    own = [p for p in schema.params() if p.present is None]  # not a plug-in process's keys
    assert C.DEFAULTS == {s: {p.name: p.default for p in own if p.section == s}
                          for s in schema.sections()}
    embedded = tomllib.loads((ROOT / "wflow" / "data" / "default.toml").read_text("utf-8"))
    readme = (ROOT / "docs" / "guide.md").read_text("utf-8")
    for p in own:
        assert p.doc and "\n" not in p.doc, p.key
        assert embedded[p.section][p.name] == p.default, p.key
        assert f"| `{p.key}` |" in readme, p.key
    assert C.validate(C.DEFAULTS, ()) == C.DEFAULTS


def test_choice_lists_are_defined_once():
    assert C.NORMALIZATIONS is attention.NORMALIZATIONS is _reference.NORMALIZATIONS
    assert schema.param("model.normalization").check.values is _reference.NORMALIZATIONS
    # weights.process: the process registry itself (names registered later count too)
    assert schema.param("weights.process").check("weights.process", "frozen") == "frozen"
    assert set(processes.PROCESSES) >= {"frozen", "ou", "oscillating", "layers", "file"}
    assert schema.param("weights.phase").check.values is oscillating.PHASES
    assert schema.param("solver.backend").check.values is attention.BACKENDS
    assert schema.param("solver.precision").check.values is attention.PRECISIONS
    assert set(schema.param("solver.method").check.values) == set(integrators.STEPPERS)
    assert {*integrators.TABLEAUX, "jko"} <= set(integrators.STEPPERS)
    assert set(schema.param("model.sign").check.values) == set(attention.SIGNS)


def test_constraint_messages():
    assert error_of(Integer(lo=2), "a.b", 1) == "a.b = 1: must be an integer >= 2"
    assert error_of(Integer(0, 3), "a.b", 4) == "a.b = 4: must be an integer in 0..3"
    assert error_of(Interval(0, None, "neither"), "a.b", 0) == "a.b = 0: must be a number > 0"
    assert error_of(Interval(0, 1, "left"), "a.b", 1) == "a.b = 1: must be a number in [0, 1)"
    assert error_of(Choice(("x", "y")), "a.b", "z") == "a.b = 'z': allowed values are 'x', 'y'"
    assert Interval(0, None, "neither")("a.b", 2) == 2.0


# --------------------------------------------------------------------------------------
# The extension hook
# --------------------------------------------------------------------------------------


def test_register_section_params_adds_keys_that_apply_to_one_process(scratch_table):
    added = schema.register_section_params(
        "weights",
        [Param("kick", 0.0, Interval(0, None), "size of a kick"),
         Param("kick_every", 10, Integer(lo=1), "steps between kicks")],
        when=When("weights.process", "oscillating"))
    assert [p.key for p in added] == ["weights.kick", "weights.kick_every"]
    assert C.DEFAULTS["weights"]["kick"] == 0.0
    cfg = C.validate({"weights": {"process": "oscillating", "kick": 2}})
    assert cfg["weights"]["kick"] == 2.0 and cfg["weights"]["kick_every"] == 10
    assert C.validate({})["weights"]["kick"] == 0.0  # a default that does not apply: quiet
    assert error_of(C.validate, {"weights": {"process": "oscillating", "kick": -1}}) == (
        "weights.kick = -1: must be a number >= 0")
    assert error_of(C.validate, {"weights": {"process": "ou", "kick": 1.0}}) == (
        "weights.kick = 1.0 with weights.process = 'ou': cannot apply "
        "(only with weights.process = 'oscillating')")
    assert error_of(C.validate, {"weights": {"kik": 1.0}}) == (
        "unknown key 'weights.kik': did you mean 'weights.kick'?")
    assert "| `weights.kick` | `0.0` | a number >= 0 | size of a kick (only with " in (
        F.markdown_table())
    assert "kick_every = 10" in F.default_toml()


def test_register_param_new_section_and_refusals(scratch_table):
    schema.register_section("extra", "an extension's own table")
    schema.register_param(Param("extra.level", "low", Choice(("low", "high")), "a level"))
    assert C.validate({"extra": {"level": "high"}})["extra"] == {"level": "high"}
    with pytest.raises(ValueError, match="already declared"):
        schema.register_param(Param("extra.level", "low", Choice(("low",)), "again"))
    with pytest.raises(ValueError, match="fails its own check"):
        schema.register_param(Param("extra.n", 0, Integer(lo=1), "n"))
    with pytest.raises(ValueError, match="section.name"):
        schema.register_param(Param("nosection", 1, Integer(), "n"))
    with pytest.raises(ValueError, match=r"not in section \[weights\]"):
        schema.register_section_params("weights", [Param("model.x", 1, Integer(), "x")])


# --------------------------------------------------------------------------------------
# Explicit settings that cannot apply
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("sets, other", [
    (["solver.backend=numpy"], "solver.backend = 'numpy'"),
    (["solver.exp=libm"], "solver.exp = 'libm'"),
    (["model.d=4"], "model.d = 4"),
])
def test_float32_without_a_float32_path_is_an_error(sets, other):
    msg = error_of(C.resolve, None, ["solver.precision=float32", *sets])
    assert msg.startswith(f"solver.precision = 'float32' with {other}: cannot apply"), msg
    # the default precision is quiet in the same setting, and so is the embedded default run
    assert C.resolve(None, sets)["solver"]["precision"] == "float64"
    assert C.resolve(None, ["solver.precision=float64", *sets])["solver"]["precision"] == "float64"


def test_which_settings_are_explicit(tmp_path):
    # a file: its keys are explicit
    f = tmp_path / "run.toml"
    f.write_text('[init]\ntokens = "uniform"\nkappa = 5.0\n', "utf-8")
    assert error_of(C.resolve, f) == (
        "init.kappa = 5.0 with init.tokens = 'uniform': cannot apply "
        "(only with init.tokens in ('vmf', 'classes'))")
    # an explicit value equal to the default is quiet
    C.resolve({"weights": {"process": "frozen", "phase": "shared"}})
    C.resolve({"init": {"tokens": "uniform", "kappa": 10}})
    # a stored configuration (explicit=()) is read as it is
    stored = C.validate(C.DEFAULTS, ())
    stored["init"].update(tokens="uniform", kappa=5.0)
    assert C.validate(stored, explicit=())["init"]["kappa"] == 5.0
    assert C.resolve(stored, explicit=())["init"]["kappa"] == 5.0
    with pytest.raises(ConfigError, match="init.kappa = 5.0 with init.tokens"):
        C.validate(stored)
    # changing the process drops an inherited scheme that does not apply to the new one
    base = C.resolve(None, ["weights.process=oscillating", "weights.scheme=exact"])
    assert C.resolve(base, ["weights.process=frozen"])["weights"]["scheme"] == "euler_maruyama"
    assert "weights.scheme = 'exact' with weights.process = 'frozen'" in error_of(
        C.resolve, base, ["weights.process=frozen", "weights.scheme=exact"])


def test_cli_refuses_float32_on_numpy(capsys):
    from wflow.cli import main

    assert main(["validate", "--set", "solver.precision=float32", "--set",
                 "solver.backend=numpy"]) == 2
    err = capsys.readouterr().err
    assert err == ("wflow: error: solver.precision = 'float32' with solver.backend = 'numpy': "
                   "cannot apply (only with solver.backend = 'numba')\n")


# --------------------------------------------------------------------------------------
# The model's errors name its parameters; the config layer names keys
# --------------------------------------------------------------------------------------


def test_model_errors_are_plain_value_errors_with_parameter_names():
    for kw, start in [({"beta": 0.0}, "beta = 0.0: must be > 0"),
                      ({"normalization": "x"}, "normalization = 'x': allowed values are"),
                      ({"sign": "up"}, "sign = 'up'"), ({"backend": "cuda"}, "backend = 'cuda'"),
                      ({"precision": "float32", "backend": "numpy"}, "precision = 'float32'")]:
        with pytest.raises(ValueError) as info:
            AttentionModel(**kw)
        assert not isinstance(info.value, ConfigError)
        assert str(info.value).startswith(start), str(info.value)
    with pytest.raises(ValueError, match="^laplacian_heads = 5: "):
        attention.laplacian_indices(5, 4)
    with pytest.raises(ValueError, match="^method = 'rk45': "):
        integrators.get_stepper("rk45")


def test_config_errors_maps_parameter_names_to_keys():
    with pytest.raises(ConfigError) as info, C.config_errors():
        AttentionModel(beta=0.0)
    assert str(info.value) == "model.beta = 0.0: must be > 0"
    with pytest.raises(ConfigError, match=r"^solver\.method = 'rk45': allowed"), C.config_errors():
        integrators.get_stepper("rk45")
    with pytest.raises(ValueError) as info, C.config_errors():  # not a parameter: unchanged
        raise ValueError("something else went wrong")
    assert not isinstance(info.value, ConfigError)


def test_info_writes_the_configuration_as_toml():
    from wflow.cli import _toml

    cfg = C.resolve(None, ["weights.process=layers", "weights.layers=[{duration = 1.0, "
                           "weights = 'identity'}]", "solver.T=1.0"])
    text = _toml(cfg)
    assert C.validate(tomllib.loads(text), ()) == cfg
    assert C.config_hash(tomllib.loads(text)) == C.config_hash(copy.deepcopy(cfg))


def test_one_default_run_through_every_door(tmp_path):
    """`wflow run --set model.heads=4`, a TOML file holding only `[model] heads = 4` and the
    API with the same dict resolve to one configuration: the embedded default with that key."""
    f = tmp_path / "h4.toml"
    f.write_text("[model]\nheads = 4\n")
    via_set = C.resolve(None, ["model.heads=4"])
    via_file = C.resolve(str(f))
    via_dict = C.resolve({"model": {"heads": 4}})
    assert via_set == via_file == via_dict
    assert via_dict["solver"]["T"] == 2.0 and via_dict["solver"]["paths"] == 2
    assert C.resolve(None) == C.validate(C.DEFAULTS)


def test_a_result_lists_every_series():
    import wflow

    res = wflow.simulate({"model": {"n": 8, "heads": 2}, "solver": {"T": 0.02, "dt": 0.01}})
    names = set(res.keys())
    assert {"t", "energy", "G2", "X", "ledger_residual"} <= names
    assert names <= set(dir(res))
