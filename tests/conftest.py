import os

import numpy as np
import pytest
from hypothesis import settings

from wflow import sphere

BACKENDS = ["numpy", "numba"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def random_case(n=7, d=3, H=2, seed=0, scale=1.0):
    """Random tokens on the sphere and random symmetric weights (H, d, d)."""
    rng = np.random.default_rng(seed)
    X = sphere.uniform(n, d, rng)
    A = rng.standard_normal((H, d, d))
    D = scale * (A + A.transpose(0, 2, 1)) / 2
    return X, D


def small_config(**over):
    """A tiny, fast run configuration (nested dict of [model §10])."""
    cfg = {
        "model": {"d": 3, "n": 12, "beta": 1.0, "heads": 3},
        "init": {"seed": 7},
        "weights": {"process": "ou"},
        "solver": {"method": "euler", "dt": 0.01, "T": 0.2, "record_every": 5, "paths": 2},
        "diagnostics": {"ledger": True},
        "output": {"store_tokens": True},
    }
    for key, val in over.items():
        sec, k = key.split(".")
        cfg.setdefault(sec, {})[k] = val
    return cfg


# ---------------------------------------------------------------- hypothesis profiles
# "ci" (selected when CI is set, as .ci/run does): derandomised, so a failure in CI reproduces
# with the same examples on any machine; no example database. "dev": random examples, kept in
# .hypothesis/ so a failure found locally is replayed first. No deadline in either: the first
# example compiles numba kernels.
settings.register_profile("ci", derandomize=True, database=None, deadline=None,
                          print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
