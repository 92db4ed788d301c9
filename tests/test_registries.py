"""Declarations that cannot lie, and registries instead of hand-kept copies.

- A weight process states whether it is deterministic: no default, a class that does not
  declare it is refused at registration; :func:`wflow.model.processes.is_deterministic` is
  the one predicate of the configuration's rules and of the run, and agrees with the built
  process (OU is deterministic exactly when g² = 0, oscillating whatever its stated
  noise_var).
- The stage count of every stepper comes from its declaration (a tableau's stages), and the
  memory and time estimates read it; ``solver.method``'s description and the process lists of
  the messages come from the registries.
- A name is registered once, in every registry, with the same one-line refusal
  (:func:`wflow.registry.register`).
- :mod:`wflow.model.weights` keeps no names of :mod:`wflow.model.processes` (no circle, no
  shim).
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import wflow
from wflow import config as C
from wflow.config import schema
from wflow.engine import memory, series, timing
from wflow.errors import ConfigError
from wflow.model import weights
from wflow.model.processes import (
    PROCESSES,
    Frozen,
    deterministic_text,
    general_processes,
    get_process,
    is_deterministic,
    make_process,
    register_process,
)
from wflow.model.weights import WeightProcess, _batch
from wflow.params import Interval, Param
from wflow.registry import duplicate_message
from wflow.stepping.integrators import EULER, TABLEAUX, ButcherTableau, register_tableau
from wflow.stepping.registry import (
    SDE_ORDERS,
    STEPPER_SERIES,
    STEPPERS,
    register_series,
    register_stepper,
    stepper_stages,
)
from wflow.studies import STUDIES, Study, register_study

ROOT = Path(__file__).resolve().parents[1]
ADAPTIVE = {"solver": {"adaptive": True, "method": "dopri5", "T": 0.1, "dt": 0.01}}


class Undeclared(WeightProcess):
    """A random walk that does not say whether it draws: the form the issue's plug-in had."""

    name = "undeclared-test"

    def drift(self, D, t):
        return np.zeros(np.shape(D))

    def step(self, D, t, dt, rngs=None):
        return _batch(D) + np.stack([g.standard_normal(np.shape(D)[1:]) for g in rngs])


class Jitter(WeightProcess):
    r"""A stochastic plug-in: :math:`D_{k+1} = D_k + \varepsilon\sqrt{\Delta t}\,S`, S a
    symmetrised standard normal matrix per head (declared: ``deterministic = False``)."""

    name = "jitter-test"
    deterministic = False
    accepts_general = True
    params = (Param("jitter", 0.1, Interval(0, None, "neither"), "jitter-test: ε"),)

    @classmethod
    def from_config(cls, spec, H, d, dt):
        proc = cls()
        proc.eps = float(spec.get("jitter", 0.1))
        return proc

    def drift(self, D, t):
        return np.zeros(np.shape(D))

    def step(self, D, t, dt, rngs=None):
        D = _batch(D)
        xi = np.stack([g.standard_normal(D.shape[1:]) for g in rngs])
        return D + self.eps * np.sqrt(dt) * (xi + np.swapaxes(xi, -1, -2)) / 2


@pytest.fixture
def jitter():
    register_process(Jitter)
    yield Jitter
    PROCESSES.pop(Jitter.name)


# ----------------------------------------------------------------------- deterministic


def test_a_process_that_does_not_declare_deterministic_is_refused():
    with pytest.raises(TypeError, match=r"^register_process: Undeclared does not declare "
                                        r"'deterministic' \(True: .*; False: .*\)$"):
        register_process(Undeclared)
    assert Undeclared.name not in PROCESSES
    # named by its module path, it is refused the same way (one line naming the class)
    with pytest.raises(ValueError, match=r"Undeclared does not declare 'deterministic'"):
        get_process(f"{__name__}:Undeclared")
    with pytest.raises(ConfigError, match=r"^weights.process = .*Undeclared does not declare"):
        make_process({"process": f"{__name__}:Undeclared"}, 1, 3, 0.1)


def test_every_builtin_process_declares_deterministic_in_its_own_class():
    builtin = {n: c for n, c in PROCESSES.items() if c.__module__.startswith("wflow.")}
    assert {"frozen", "ou", "oscillating", "layers", "file", "imported"} <= set(builtin)
    for name, cls in builtin.items():
        assert isinstance(vars(cls).get("deterministic"), bool), name
    assert "deterministic" not in vars(WeightProcess)  # no default to inherit


@pytest.mark.parametrize("spec, expected", [
    ({"process": "frozen"}, True),
    ({"process": "ou"}, False),  # the default g² = 2
    ({"process": "ou", "noise_var": 0.5, "scheme": "exact"}, False),
    ({"process": "ou", "noise_var": 0.0}, True),
    ({"process": "ou", "noise_var": 0, "scheme": "exact"}, True),
    ({"process": "oscillating", "noise_var": 0.0}, True),
    ({"process": "oscillating"}, True),
])
def test_is_deterministic_is_the_built_processs_answer(spec, expected):
    """The configuration's answer (from the table, nothing built) is the built process's
    ``deterministic``, and a deterministic process's step draws nothing."""
    assert is_deterministic(spec["process"], spec) is expected
    proc = make_process(spec, 2, 3, 0.1)
    assert proc.deterministic is expected
    if expected:  # no generator needed: a step that drew would fail
        D0 = np.tile(np.eye(3), (1, 2, 1, 1))
        assert np.all(np.isfinite(proc.step(D0, 0.0, 0.1, rngs=None)))


def test_is_deterministic_of_a_validated_table():
    """The [weights] table of a validated configuration, as the rules and the run see it."""
    for over, expected in ((["weights.noise_var=0"], True), ([], False),
                           (['weights.process="oscillating"', "weights.noise_var=0"], True)):
        w = C.resolve(None, over)["weights"]
        assert is_deterministic(w["process"], w) is expected
        assert make_process(w, 2, 3, 0.005).deterministic is expected


def test_validate_refuses_adaptive_steps_with_noisy_ou_weights():
    """``wflow validate --set solver.adaptive=true --set solver.method=dopri5`` of the default
    (OU, g² = 2) run: refused, naming the deterministic processes from the registry; with
    g² = 0 accepted."""
    msg = (r"^weights.process = 'ou': must be a deterministic process \('frozen', "
           r"'oscillating', 'layers', 'file', 'imported'.*, 'ou' with weights.noise_var = 0\) "
           r"with solver.adaptive = true: ")
    with pytest.raises(ConfigError, match=msg):
        C.validate(ADAPTIVE)
    cfg = C.validate({**ADAPTIVE, "weights": {"noise_var": 0.0}})
    assert cfg["solver"]["adaptive"] and cfg["weights"]["noise_var"] == 0.0


def test_a_stochastic_plugin_under_adaptive_steps_is_refused_by_validate_and_run(jitter):
    cfg = {**ADAPTIVE, "weights": {"process": "jitter-test"}}
    with pytest.raises(ConfigError) as by_validate:
        C.validate(cfg)
    with pytest.raises(ConfigError) as by_run:
        wflow.simulate(cfg)
    for exc in (by_validate, by_run):
        text = str(exc.value)
        assert "\n" not in text
        assert text.startswith("weights.process = 'jitter-test': must be a deterministic process")
    assert "'jitter-test'" not in deterministic_text()
    # with fixed steps it runs, and its noise moves D
    res = wflow.simulate({"model": {"n": 6, "heads": 1}, "weights": {"process": "jitter-test"},
                          "solver": {"T": 0.05, "dt": 0.01, "paths": 1},
                          "output": {"store_weights": True}})
    assert np.abs(res.D[-1] - res.D[0]).max() > 0


# ----------------------------------------------------------------------- messages, docs


def test_process_lists_in_messages_come_from_the_registry(jitter):
    """"accepts general D" is the processes' ``accepts_general``: a plug-in declaring it is
    named, a built-in without it is not."""
    assert "'jitter-test'" in general_processes() and "'oscillating'" not in general_processes()
    with pytest.raises(ConfigError, match=r"keeps D_h symmetric; allowed: .*'imported'.*"
                                          r"'jitter-test'$"):
        make_process({"process": "oscillating"}, 1, 3, 0.1, interaction="general")
    with pytest.raises(ConfigError, match=r"^weights.process = 'oscillating': keeps D_h "
                                          r"symmetric: .* allowed are .*'jitter-test'$"):
        C.validate({"model": {"interaction": "general"}, "init": {"weights": "gaussian"},
                    "weights": {"process": "oscillating"}})


def test_method_description_is_every_steppers_declared_doc():
    doc = schema.param("solver.method").doc
    for name, entry in STEPPERS.items():
        if entry.factory.__module__.startswith("wflow."):
            assert f"{name}: {entry.doc}" in doc
    assert "dopri5: Dormand–Prince (order 5(4))" in doc  # an embedded pair, order from its tableau


def test_sde_orders_are_read_from_the_steppers():
    assert dict(SDE_ORDERS) == {n: e.sde_order for n, e in STEPPERS.items()
                                if e.sde_order is not None}
    assert "euler" in SDE_ORDERS and "rk4" not in SDE_ORDERS


# ----------------------------------------------------------------------- stages


def test_stages_are_the_tableaux_stages():
    for name, tab in TABLEAUX.items():
        assert stepper_stages(name) == tab.stages == len(tab.b)
    assert (stepper_stages("bs32"), stepper_stages("dopri5"), stepper_stages("tsit5")) == (4, 7, 7)
    assert stepper_stages("jko") == stepper_stages("euler_unprojected") == 1
    with pytest.raises(ValueError, match=r"^method = 'nope': allowed values are euler, "):
        stepper_stages("nope")


@pytest.mark.parametrize("method", ["heun", "rk4", "bs32", "dopri5", "tsit5", "ssprk3"])
def test_memory_and_time_estimates_count_the_declared_stages(method):
    r"""The state holds 3 copies of (P, n, d) per stage: relative to Euler (1 stage) the
    estimate grows by :math:`8 \cdot 3\,P n d\,(s - 1)` bytes; the work is proportional
    to s."""
    base = {"model": {"n": 40, "d": 3, "heads": 2}, "solver": {"paths": 2, "T": 0.1, "dt": 0.01},
            "diagnostics": {"ledger": False}}
    euler = C.validate(base)
    cfg = C.validate({**base, "solver": {**base["solver"], "method": method}})
    s = TABLEAUX[method].stages
    nd = 2 * 40 * 3
    grow = memory.estimate(cfg).parts["state"] - memory.estimate(euler).parts["state"]
    assert grow == 8 * 3 * nd * (s - 1)
    assert timing.sizes(cfg).evals == s * timing.sizes(euler).evals  # E = N s, no ledger


# ----------------------------------------------------------------------- duplicates


def _refused(by, what, name):
    return "^" + duplicate_message(by, what, name).replace("(", r"\(").replace(")", r"\)") + "$"


def test_a_process_registered_twice_is_refused():
    again = type("Frozen2", (Frozen,), {"name": "frozen", "deterministic": True})
    with pytest.raises(ValueError, match=_refused("register_process", "weight process", "frozen")):
        register_process(again)
    assert PROCESSES["frozen"] is Frozen
    with pytest.raises(ValueError, match="already registered"):
        register_process(replace=False)(again)
    register_process(again, replace=True)
    try:
        assert get_process("frozen") is again
    finally:
        register_process(Frozen, replace=True)
    assert PROCESSES["frozen"] is Frozen


def test_an_entry_point_whose_module_registers_its_process_loads_once(monkeypatch):
    """An installed package's entry point: loading its module runs ``@register_process``;
    finding the class registered is not a second registration."""
    from importlib import metadata

    class Loaded(Frozen):
        name = "entry-point-test"

    class EntryPoint:
        name, group = "entry-point-test", "wflow.model.processes"

        def load(self):  # importing the module registers the class
            return register_process(Loaded)

    monkeypatch.setattr(metadata, "entry_points", lambda group=None: [EntryPoint()])
    try:
        assert get_process("entry-point-test") is Loaded
        assert get_process("entry-point-test") is Loaded  # now from the registry
    finally:
        PROCESSES.pop("entry-point-test", None)


def test_a_stepper_registered_twice_is_refused():
    entry = STEPPERS["rk4"]
    with pytest.raises(ValueError, match=_refused("register_stepper", "stepper", "rk4")):
        register_stepper("rk4", lambda solver_config: None, doc="another", stages=2)
    assert STEPPERS["rk4"] is entry
    tab = ButcherTableau("euler", ((0.0,),), (1.0,), (0.0,), 1)
    with pytest.raises(ValueError, match=_refused("register_stepper", "stepper", "euler")):
        register_tableau(tab, "a second Euler")
    assert TABLEAUX["euler"] is EULER and STEPPERS["euler"].sde_order == 1
    register_stepper("rk4", lambda solver_config: None, doc="another", stages=2, replace=True)
    try:
        assert stepper_stages("rk4") == 2
    finally:
        STEPPERS["rk4"] = entry


def test_a_stepper_declares_its_doc_and_stages():
    with pytest.raises(TypeError):  # both are required: no default to lie
        register_stepper("undeclared-test", lambda solver_config: None)
    with pytest.raises(TypeError, match=r"^register_stepper: 'x-test' needs stages"):
        register_stepper("x-test", lambda solver_config: None, doc="x", stages=0)
    with pytest.raises(TypeError, match=r"^register_stepper: 'x-test' needs a one-line doc"):
        register_stepper("x-test", lambda solver_config: None, doc="two\nlines", stages=1)
    assert "undeclared-test" not in STEPPERS and "x-test" not in STEPPERS


def test_a_series_registered_twice_is_refused():
    described = STEPPER_SERIES["jko_iterations"]
    with pytest.raises(ValueError, match=_refused("register_series", "series", "jko_iterations")):
        register_series("jko_iterations", "another")
    assert STEPPER_SERIES["jko_iterations"] == described
    energy = series.SERIES["energy"]
    with pytest.raises(ValueError, match=_refused("add_series", "series", "energy")):
        series.add_series("energy", "point", "another", "energy", fn=lambda ctx: ctx.X[..., 0])
    assert series.SERIES["energy"] is energy
    series.add_series("twice-test", "point", "one", "dimensionless", fn=lambda ctx: 0)
    try:
        with pytest.raises(ValueError, match="already registered"):
            series.add_series("twice-test", "point", "two", "dimensionless", fn=lambda ctx: 0)
        series.add_series("twice-test", "point", "two", "dimensionless", fn=lambda ctx: 0,
                          replace=True)
        assert series.describe("twice-test") == ("two", "dimensionless")
    finally:
        series.remove_series("twice-test")


def test_a_study_registered_twice_is_refused():
    energy = STUDIES["energy"]

    class Again(Study):
        name = "energy"
        question = "a second study of that name?"

    with pytest.raises(ValueError, match=_refused("register_study", "study", "energy")):
        register_study(Again)
    assert STUDIES["energy"] is energy


# ----------------------------------------------------------------------- no shim


def test_weights_keeps_no_names_of_the_processes():
    """The protocol module imports nothing of :mod:`wflow.model.processes` and answers for
    none of its names (they are imported from there)."""
    for name in ("DrivenOU", "OrnsteinUhlenbeck", "make_process", "PROCESSES", "register_process"):
        assert not hasattr(weights, name)
    assert not hasattr(weights, "__getattr__")
    tree = ast.parse((ROOT / "wflow" / "model" / "weights.py").read_text("utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and m.startswith("wflow.model.processes") for m in imported)
    assert "import_module" not in (ROOT / "wflow" / "model" / "weights.py").read_text("utf-8")
