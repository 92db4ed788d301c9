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


SMALL = ["model.n=8", "model.heads=2", "solver.T=0.02", "solver.dt=0.01", "solver.paths=1"]

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
    rc_run, line_run = _line(capsys, ["run", "-q", *sets, "-o", str(tmp_path / "r.h5")])
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
    assert main(["run", "-q", *sets, "-o", str(tmp_path / "r.h5")]) == 0
