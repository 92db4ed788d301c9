"""`wflow validate` refuses what `wflow run` refuses, with the same one line and exit 2: the
validation builds the run (:class:`wflow.engine.run.Simulation`) without running it, so every
rule of the configuration, of the weight process, of the model and of the stepper applies
to both."""

import numpy as np
import pytest

from wflow.cli import main
from wflow.model.processes import PROCESSES, register_process
from wflow.model.weights import WeightProcess


class NoisyDecay(WeightProcess):
    r"""A stochastic plug-in: :math:`dD = -D\,dt + 0.1\,dW` (Euler–Maruyama)."""

    name = "noisy-decay-refusals"
    deterministic = False

    @classmethod
    def from_config(cls, spec, H, d, dt):
        return cls()

    def drift(self, D, t):
        return -np.asarray(D, dtype=float)

    def step(self, D, t, dt, rngs=None):
        D = np.asarray(D, dtype=float)
        xi = np.stack([r.standard_normal(D.shape[1:]) for r in rngs])
        return D - dt * D + 0.1 * np.sqrt(dt) * xi


@pytest.fixture(scope="module", autouse=True)
def noisy_process():
    register_process(NoisyDecay)
    yield
    PROCESSES.pop(NoisyDecay.name, None)


SMALL = ["model.n=8", "model.heads=2", "solver.T=0.02", "solver.dt=0.01", "solver.paths=1",
         "output.path='r.h5'"]

#: configurations `wflow run` refuses before its first step, each for its own reason
REFUSED = {
    "stochastic plug-in, adaptive": ["weights.process='noisy-decay-refusals'",
                                     "solver.adaptive=true", "solver.method='dopri5'"],
    "OU with noise, adaptive": ["solver.adaptive=true", "solver.method='dopri5'"],
    "nGPT, adaptive": ["model.layernorm='ngpt'", "weights.process='frozen'",
                       "solver.adaptive=true", "solver.method='bs32'"],
    "pre-LN with the ledger": ["model.layernorm='pre'", "diagnostics.ledger=true"],
    "density in d = 4": ["model.d=4", "solver.representation='density'",
                         "solver.method='ssprk3'", "init.tokens='uniform'"],
    "token noise with JKO": ["model.diffusion=0.1", "solver.method='jko'"],
    "general D with JKO": ["model.interaction='general'", "init.weights='gaussian'",
                           "solver.method='jko'"],
    "values file missing": ["weights.process='file'", "weights.file='no_such_file.npz'"],
    # 10¹¹ steps, each a record: refused by the disk estimate before anything is allocated
    "T = 1e9, every step recorded": ["solver.T=1e9", "solver.record_every=1"],
    "T = 1e300": ["solver.T=1e300"],
}


def _line(capsys, argv):
    rc = main(argv)
    _, err = capsys.readouterr()
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and "Traceback" not in err, err
    return rc, lines[0]


@pytest.mark.parametrize("case", list(REFUSED))
def test_validate_refuses_what_run_refuses(case, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sets = [a for s in SMALL + REFUSED[case] for a in ("--set", s)]
    rc_run, line_run = _line(capsys, ["run", "-q", *sets])
    rc_val, line_val = _line(capsys, ["validate", *sets])
    assert rc_run == 2 and rc_val == 2
    assert line_val == line_run
    assert not (tmp_path / "r.h5").exists()


def test_a_deterministic_plug_in_passes_both(capsys, tmp_path, monkeypatch):
    """The refusal above is of the noise, not of plug-ins under adaptive steps."""
    monkeypatch.chdir(tmp_path)
    sets = [a for s in SMALL + ["weights.process='frozen'", "solver.adaptive=true",
                                "solver.method='dopri5'"] for a in ("--set", s)]
    assert main(["validate", *sets]) == 0
    assert main(["run", "-q", *sets]) == 0


# ------------------------------------------------------- every recorded series is checked
@pytest.fixture
def broken_series():
    """A user series that overflows (inf) from t = 0.02 on, and one that is NaN there."""
    from wflow.engine import series

    series.add_series("overflowing_test", "point", "inf after t = 0.015", "dimensionless",
                      fn=lambda c: np.full(c.X.shape[0], np.inf if c.t > 0.015 else 1.0))
    yield "overflowing_test"
    series.remove_series("overflowing_test")


def test_an_infinite_series_stops_the_run(broken_series, capsys, tmp_path, monkeypatch):
    """Not only the energy and the tokens: any recorded series that overflows stops the run
    with one line naming it, the step and the time (exit 1), the file marked failed."""
    monkeypatch.chdir(tmp_path)
    sets = [a for s in SMALL + ["solver.T=0.05", "solver.record_every=1"] for a in ("--set", s)]
    rc, line = _line(capsys, ["run", "-q", *sets])
    assert rc == 1
    assert "infinite overflowing_test at step 2 (t = 0.02)" in line, line


def test_documented_nans_do_not_stop_a_run():
    """General D_h (no energy), the causal mask (no energy, no mobility), adaptive steps (no
    ledger, no left-point sums) and the first record's empty per-step ledger: NaN by
    declaration, the runs complete."""
    import wflow

    base = {"model": {"n": 8, "heads": 2}, "solver": {"T": 0.04, "dt": 0.01, "paths": 1,
                                                      "record_every": 2},
            "diagnostics": {"w2": True}}
    for over in ({"model": {"interaction": "general"}, "init": {"weights": "gaussian"},
                  "diagnostics": {"ledger": False}},
                 {"model": {"mask": "causal"}, "diagnostics": {"ledger": False}},
                 {"weights": {"process": "frozen"}, "solver": {"adaptive": True,
                                                              "method": "dopri5"}}):
        cfg = {k: {**base.get(k, {}), **over.get(k, {})} for k in {*base, *over}}
        res = wflow.simulate(cfg)
        assert np.all(np.isfinite(res.X))
