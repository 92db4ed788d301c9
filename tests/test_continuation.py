"""Continued runs: ``Simulation(config, tokens=rho)`` for a density and ``Study.continued``.

- a density run of T continued from its final cell averages for T more equals the run of 2T
  to the bit (S¹ with split diffusion; S² Voronoi): a density step is a function of the cell
  averages and Δt alone, so the same floating-point operations run in the same order;
- particles without noise and frozen weights: equal to round-off, not to the bit (given
  tokens are renormalised to unit rows, a change of at most one ulp, carried by the flow);
- a given density of the wrong shape, mass or sign, and a previous result without stored
  tokens, are refused with a ConfigError naming ``tokens``; nothing is written;
- a file-backed continuation records the previous file's name.
"""

from __future__ import annotations

import numpy as np
import pytest

from wflow.engine.run import Simulation, simulate
from wflow.errors import ConfigError
from wflow.storage import io
from wflow.studies import Study, final_state


def _density_cfg(T, d=2, cells=48):
    return {
        "model": {"d": d, "n": 8, "beta": 4.0, "heads": 1, "normalization": "none",
                  "sign": "ascent", "values": "identity", "diffusion": 2.5},
        "init": {"tokens": "vmf", "kappa": 4.0, "weights": "identity", "seed": 0},
        "weights": {"process": "frozen"},
        "solver": {"representation": "density", "method": "heun", "dt": 0.02, "T": T,
                   "record_every": 1, "paths": 1},
        "density": {"cells": cells, "diffusion_scheme": "split"},
        "diagnostics": {"ledger": False, "clustering": False},
        "output": {"store_tokens": True},
    }


@pytest.mark.parametrize("d, cells", [(2, 48), (3, 120)])
def test_density_continuation_is_the_longer_run(d, cells):
    whole = simulate(_density_cfg(0.8, d, cells))
    first = simulate(_density_cfg(0.4, d, cells))
    cont = Study().continued(_density_cfg(0.4, d, cells), first)
    assert np.array_equal(cont["rho"][0], first["rho"][-1])
    assert np.array_equal(cont["rho"][-1], whole["rho"][-1])
    # every record of the continuation is the whole run's record at the same step
    assert np.array_equal(cont["rho"], whole["rho"][len(first["t"]) - 1:])


def test_particle_continuation_is_the_longer_run():
    cfg = {"model": {"n": 16, "d": 3, "heads": 2, "beta": 1.5},
           "weights": {"process": "frozen"}, "init": {"seed": 3},
           "solver": {"method": "heun", "dt": 0.05, "T": 0.5, "record_every": 5, "paths": 2},
           "diagnostics": {"ledger": True}, "output": {"store_tokens": True}}
    whole = simulate({**cfg, "solver": {**cfg["solver"], "T": 1.0}})
    first = simulate(cfg)
    cont = Study().continued(cfg, first)
    # given tokens are renormalised to unit rows (a change of at most 1 ulp); the flow over
    # T = 0.5 carries it with a Lipschitz factor e^{O(β T)} ~ 3: a few ulp, bound 50 ulp
    assert np.max(np.abs(cont["X"][-1] - whole["X"][-1])) <= 50 * np.finfo(float).eps


@pytest.mark.parametrize("rho, what", [
    (np.full(47, 1 / (2 * np.pi)), "shape"),
    (np.full((3, 48), 1 / (2 * np.pi)), "shape"),
    (np.full(48, 1.01 / (2 * np.pi)), "mass"),
    (np.r_[-0.01, np.full(47, (1 + 0.01 * 2 * np.pi / 48) / (2 * np.pi) * 48 / 47)], "negative"),
    (np.r_[np.nan, np.full(47, 1 / (2 * np.pi))], "non-finite"),
])
def test_bad_density_refused(rho, what, tmp_path):
    with pytest.raises(ConfigError, match=f"tokens.*{what}"):
        Simulation(_density_cfg(0.1), tokens=rho)
    with pytest.raises(ConfigError):
        Study().continued(_density_cfg(0.1), (_density_cfg(0.1), {"t": np.zeros(1),
                                                                  "rho": rho[None]}),
                          tmp_path / "c.h5")
    assert not list(tmp_path.iterdir())


def test_density_start_per_path_and_mass_tolerance():
    cfg = _density_cfg(0.02)
    cfg["solver"]["paths"] = 2
    th = 2 * np.pi * (np.arange(48) + 0.5) / 48
    rho = np.stack([np.full(48, 1 / (2 * np.pi)), (1 + 0.3 * np.cos(th)) / (2 * np.pi)])
    sim = Simulation(cfg, tokens=rho)
    assert np.array_equal(sim.X0, rho)


def test_previous_without_tokens_refused():
    cfg = _density_cfg(0.04)
    cfg["output"]["store_tokens"] = False
    res = simulate(cfg)
    with pytest.raises(ConfigError, match="store_tokens"):
        final_state(res)


def test_file_continuation_records_its_start(tmp_path):
    first = tmp_path / "first.h5"
    from wflow.engine import driver

    driver.run_to_file(_density_cfg(0.2), first)
    out = Study().continued(_density_cfg(0.2), first, tmp_path / "second.h5")
    assert io.read_header(out)["status"] == io.COMPLETE
    from wflow.storage.reading import read

    cfg, arrays, attrs = read(out)
    assert attrs["continued_from"] == "first.h5"
    assert np.array_equal(arrays["rho"][0], final_state(first))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.h5", "second.h5"]
