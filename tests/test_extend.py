"""Extending wflow from outside the package: a weight process, a recorded series, a stepper and
a study, each one declaration in this file, with no edit inside ``wflow/`` (README, "Extending wflow").

A weight process is one class: its name, whether it is deterministic (``deterministic``: no
default, a class without it is refused), its ``[weights]`` keys declared once (``params``:
Param rows — default, constraint, one-line doc), its mathematics; ``register_process`` adds
it to the registry, and the configuration table, the validation and the generated key
reference read its keys from there (a built-in process is the same class in one file of
``wflow/model/processes/`` and one registration line in its ``__init__``)."""

from pathlib import Path

import h5py
import numpy as np
import pytest

import wflow
from wflow.config import files as config_files
from wflow.engine import driver
from wflow.engine import series as S
from wflow.errors import ConfigError
from wflow.model.processes import register_process
from wflow.model.weights import WeightProcess
from wflow.params import Interval, Param, bad, declare, withdraw
from wflow.stepping.integrators import EULER, RungeKutta
from wflow.stepping.registry import STEPPERS, register_series, register_stepper
from wflow.storage import io
from wflow.studies import STUDIES, Study, register_study, run_study, summary_table
from wflow.sweeps.sweep import expand_grid


@register_process
class Decay(WeightProcess):
    r"""Weights decaying to zero: :math:`\dot D = -\gamma D`, stepped exactly,
    :math:`D_{k+1} = e^{-\gamma\Delta t} D_k` (deterministic, no noise)."""

    name = "decay"
    deterministic = True  # no step draws random numbers
    params = (Param("gamma", 0.5, Interval(0, None, "neither"), "decay rate γ of the weights"),)

    @classmethod
    def from_config(cls, spec, H, d, dt):
        return cls(spec.get("gamma", 0.5))

    def __init__(self, gamma=0.5):
        self.gamma = float(gamma)

    def drift(self, D, t):
        return -self.gamma * np.asarray(D, dtype=float)

    def step(self, D, t, dt, rngs=None):
        return np.asarray(D, dtype=float) * np.exp(-self.gamma * dt)


def _cfg(process="decay"):
    return {"model": {"n": 10, "heads": 2},
            "weights": {"process": process, "gamma": 2.0},
            "solver": {"T": 0.2, "dt": 0.01, "record_every": 5, "paths": 2},
            "output": {"store_weights": True}}


@pytest.fixture
def mean_z():
    """A user series: the mean third coordinate of the tokens, per path."""
    S.add_series("mean_z", "point", "mean third coordinate of the tokens", "dimensionless",
                 fn=lambda ctx: ctx.X[..., 2].mean(axis=-1))
    yield
    S.remove_series("mean_z")


@pytest.mark.parametrize("process", ["decay", "test_extend:Decay"])
def test_new_process_and_series_through_simulate_and_hdf5(tmp_path, mean_z, process):
    res = wflow.simulate(_cfg(process))
    # the process: D(t) = e^{-γt} D(0) exactly, so ∂_tE = <∂_D E, −γD> is recorded
    decay = np.exp(-2.0 * res.t)[:, None, None, None, None]
    np.testing.assert_allclose(res.D, decay * res.D[0][None], rtol=1e-12, atol=0)
    # the weight part of the exact ledger is the drift work plus a second-order remainder
    assert np.all(np.abs(res.ito_realised[-1]) < 0.05 * np.abs(res.drift_work[-1]))
    # the series: recorded at every record, equal to its definition
    np.testing.assert_array_equal(res.mean_z, res.X[..., 2].mean(axis=-1))
    # through the HDF5 writer, with the table's description, and a resume
    path = driver.run_to_file(_cfg(process), tmp_path / "r.h5")
    _, arrays, attrs = io.read(path)
    np.testing.assert_array_equal(arrays["mean_z"], res.mean_z)
    np.testing.assert_array_equal(arrays["D"], res.D)
    with h5py.File(path) as f:
        assert f["series/mean_z"].attrs["description"] == "mean third coordinate of the tokens"
    assert attrs["status"] == "complete"


def test_new_process_is_named_in_errors():
    """The registered process is among the allowed values; its own key is checked by its
    declared constraint, and refused for another process (as a built-in key is for it)."""
    with pytest.raises(wflow.ConfigError, match="weights.process = 'nope'.*decay"):
        wflow.simulate({"weights": {"process": "nope"}})
    with pytest.raises(wflow.ConfigError, match=r"^weights.gamma = 'fast': must be a number > 0"):
        wflow.simulate({"weights": {"process": "decay", "gamma": "fast"}})
    with pytest.raises(wflow.ConfigError, match=(
            r"^weights.gamma = 1.0 with weights.process = 'ou': cannot apply \(only with "
            r"weights.process .*'decay'.*\); the keys of process 'ou' are rate, mean, noise_var")):
        wflow.simulate({"weights": {"process": "ou", "gamma": 1.0}})
    with pytest.raises(wflow.ConfigError, match=(
            r"^weights.noise_var = 0.5 with weights.process = 'decay': cannot apply \(only with "
            r"weights.process = 'ou'\); the keys of process 'decay' are gamma$")):
        wflow.simulate({"weights": {"process": "decay", "noise_var": 0.5}})


def test_new_process_keys_are_declared_once():
    """The key declared on the class is in the table (validation, defaults, the generated
    reference) only through the class; runs of other processes do not carry it."""
    from wflow import config as C

    assert C.validate({"weights": {"process": "decay"}})["weights"]["gamma"] == 0.5
    assert C.validate({"weights": {"process": "decay", "gamma": 2}})["weights"]["gamma"] == 2.0
    assert "gamma" not in C.validate({})["weights"]  # an OU run stores nothing of the plug-in
    assert C.validate({"weights": {"process": "ou", "gamma": 0.5}}) == C.validate({})
    ref = config_files.markdown_table()
    assert ("| `weights.gamma` | `0.5` | a number > 0 | decay rate γ of the weights (only with "
            "weights.process ") in ref
    assert "weights.gamma" not in config_files.markdown_reference()  # wflow's own file
    # an override that changes the process drops the keys the new process does not read
    cfg = C.resolve({"weights": {"process": "decay", "gamma": 2.0}}, ["weights.process=ou"])
    assert cfg["weights"]["process"] == "ou" and "gamma" not in cfg["weights"]
    back = C.resolve(C.resolve(None, ["weights.noise_var=0.5"]), ["weights.process=decay"])
    assert back["weights"]["gamma"] == 0.5 and back["weights"]["noise_var"] == 2.0


def test_a_process_declaring_defaults_only_is_read_by_their_types():
    """The older form, ``params = {name: default}``: each key checked by the type of its
    default, present only with its process."""
    from wflow import config as C

    @register_process
    class Pulse(Decay):
        name = "pulse-test"
        params = {"pulse": 1.0, "pulse_every": 3}

    w = C.validate({"weights": {"process": "pulse-test", "pulse_every": 5}})["weights"]
    assert (w["pulse"], w["pulse_every"]) == (1.0, 5)
    with pytest.raises(wflow.ConfigError, match=r"^weights.pulse_every = 1.5: must be an integer"):
        C.validate({"weights": {"process": "pulse-test", "pulse_every": 1.5}})
    assert "pulse" not in C.validate({})["weights"]


def test_a_process_may_not_declare_a_key_of_the_configuration():
    from wflow import config as C
    from wflow.model.processes import PROCESSES

    @register_process
    class Shared(Decay):
        name = "shared-test"
        params = {"shared_path": True}

    try:
        with pytest.raises(wflow.ConfigError, match="declares the key 'weights.shared_path'"):
            C.validate({"weights": {"process": "shared-test"}})
    finally:
        PROCESSES.pop("shared-test")
    assert C.validate({})["weights"]["shared_path"] is False


class TwoHalfSteps:
    """A stepper declared here: two explicit Euler steps of Δt/2 (order 1, two field
    evaluations), reporting one series of its own, declared beside it (once, with the class)."""

    name, order = "euler2-test", 1
    series = (register_series("half_steps_test", "Euler half steps of the last step", "count"),)

    def step(self, ctx):
        euler = RungeKutta(EULER)
        Y = euler.advance(ctx.velocity, euler.advance(ctx.velocity, ctx.X, ctx.dt / 2, ctx.k1),
                          ctx.dt / 2)
        return Y, {"half_steps_test": np.full(len(ctx.X), 2.0)}


def test_new_stepper_and_its_series(tmp_path):
    register_stepper("euler2-test", lambda solver_config: TwoHalfSteps(),
                     doc="two Euler half steps (order 1)", stages=2)
    try:
        cfg = {**_cfg(), "solver": {**_cfg()["solver"], "method": "euler2-test"}}
        res = wflow.simulate(cfg)
        np.testing.assert_array_equal(res.half_steps_test[1:], 2.0)
        np.testing.assert_allclose(np.linalg.norm(res.X, axis=-1), 1.0, atol=1e-12)
        path = driver.run_to_file(cfg, tmp_path / "s.h5")
        with h5py.File(path) as f:
            assert f["series/half_steps_test"].attrs["description"] == (
                "Euler half steps of the last step")
    finally:
        STEPPERS.pop("euler2-test")


class DecayStudy(Study):
    """A study declared here: the decay rate γ of the process above, swept; the user series
    and the energy at T summarised."""

    name = "decay-test-study"
    question = "how does the decay rate of the weights change the energy at T?"
    summary_columns = (("mean_z_final", "mean_z", "final"),)

    def base(self, scale):
        return {**_cfg(), "solver": {"T": 0.1, "dt": 0.01, "record_every": 5, "paths": 1}}

    def variants(self, base, scale):
        return expand_grid(base, {"weights.gamma": [0.5, 4.0]}, name="decay")

    def summarize(self, data):
        return summary_table(data, ("energy", "mean_z"))


def test_new_study_runs_the_new_process_and_series(tmp_path, mean_z):
    register_study(DecayStudy)
    try:
        r = run_study("decay-test-study", tmp_path, scale="quick")
    finally:
        STUDIES.pop(DecayStudy.name)
    assert r.table["run"] == ["decay-gamma=0.5", "decay-gamma=4"]
    for path, gamma in zip(r.paths, (0.5, 4.0)):
        cfg, arrays, _ = io.read(path)
        assert cfg["weights"]["gamma"] == gamma  # the process's own key reached the run
        np.testing.assert_allclose(arrays["D"][-1], np.exp(-gamma * 0.1) * arrays["D"][0],
                                   rtol=1e-12)
        assert "mean_z" in arrays and np.all(np.isfinite(arrays["mean_z"]))
        # the study's own summary column reached the sweep summary, one row per path
        assert r.data.column("mean_z_final", Path(path).stem)[0] == arrays["mean_z"][-1, 0]


# A feature's configuration key with a cross-key rule: declared in the feature's own module
# (here, this file) with wflow.params.declare, placed in the table after a key of its choice;
# no edit of wflow/config. The built-in features do the same (model.layernorm in
# wflow/stepping/layernorm.py, solver.adaptive in wflow/stepping/adaptive.py, the [density]
# keys in wflow/stepping/density.py, model.diffusion in wflow/stepping/noise.py,
# model.interaction in wflow/model/interaction.py).

def _speed_cap_rule(cfg):
    """A speed cap needs an explicit tableau (a rule reading another section's key)."""
    cap, method = cfg["solver"]["speed_cap"], cfg["solver"]["method"]
    if cap > 0 and method == "jko":
        raise bad("solver.speed_cap", cap, f"must be 0 with solver.method = {method!r}")


@pytest.fixture
def speed_cap():
    declare(Param("solver.speed_cap", 0.0, Interval(0, None, "both"),
                  "largest token speed (0: none)", rule=_speed_cap_rule),
            after="solver.method")
    yield
    withdraw("solver.speed_cap")


def test_new_feature_key_and_rule_from_its_own_module(speed_cap):
    from wflow.config import schema

    keys = [p.key for p in schema.params()]
    assert keys[keys.index("solver.method") + 1] == "solver.speed_cap"  # its declared place
    assert wflow.config.validate(_cfg())["solver"]["speed_cap"] == 0.0  # the default
    with pytest.raises(ConfigError, match=r"^solver.speed_cap = 1.0: must be 0 with "
                                          r"solver.method = 'jko'$"):
        wflow.config.validate({**_cfg(), "solver": {**_cfg()["solver"], "method": "jko",
                                                     "speed_cap": 1.0}})
    assert "`solver.speed_cap`" in config_files.markdown_reference()  # the generated key table
    with pytest.raises(ValueError, match="already declared"):
        declare(Param("solver.speed_cap", 0.0, Interval(0, None, "both"), "twice"))


def test_a_withdrawn_feature_key_leaves_the_table(speed_cap):
    from wflow.config import schema

    withdraw("solver.speed_cap")
    assert "solver.speed_cap" not in [p.key for p in schema.params()]
    with pytest.raises(ConfigError, match="unknown key 'solver.speed_cap'"):
        wflow.config.validate({**_cfg(), "solver": {**_cfg()["solver"], "speed_cap": 1.0}})
