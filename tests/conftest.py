import atexit
import gc
import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import settings

from wflow.geometry import sphere

BACKENDS = ["numpy", "numba"]

# POT (``import ot``: the W2 diagnostics and the mean-field studies) imports every array
# library it finds to register a backend; torch (installed for the `bench` extra) costs
# ~4 s of CPU per process. wflow hands POT NumPy arrays only (its NumPy backend), so the
# tests, and the subprocesses they start, skip the torch backend.
os.environ.setdefault("POT_BACKEND_DISABLE_PYTORCH", "1")
os.environ.setdefault("WFLOW_STRICT_FIGURES", "1")  # every figure a test draws: no clipped text
# the rates `wflow run` saves for `wflow validate` go to a folder of this process, not ~/.cache
_CACHE = tempfile.mkdtemp(prefix="wflow-cache-")
atexit.register(shutil.rmtree, _CACHE, True)
os.environ["WFLOW_CACHE_DIR"] = _CACHE


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


# ---------------------------------------------------------------- numba kernels, compiled once
# Under xdist (the default `-n 2`) every worker compiles or loads all kernel specialisations
# before its first test, each under a file lock, so that on a cold cache (a clean clone) each is
# compiled by one worker only, not by both side by side (tests/_numba_warmup.py).
# WFLOW_TEST_WARMUP=0 turns it off, =1 forces it without xdist.
@pytest.fixture(scope="session", autouse=True)
def _numba_kernels_compiled_once():
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    flag = os.environ.get("WFLOW_TEST_WARMUP", "")
    if flag == "0" or (workers < 2 and flag != "1"):
        return
    from _numba_warmup import warm_up

    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    warm_up(int(worker[2:]) if worker[2:].isdigit() else 0, max(workers, 1))


# ---------------------------------------------------------------- xdist: groups and their order
# `--dist loadfile` (pyproject.toml) keeps a test file in one worker (its module fixtures, e.g.
# the shared Dask LocalCluster, made once). Here the files that import torch and transformers
# (~4 s of CPU for a process) form one group, so one worker imports them.
HF_FILES = ("test_bench.py", "test_checkpoint.py", "test_checkpoint_flow.py",
            "test_checkpoint_run.py", "test_general.py")
# The groups go to the workers in the order of the collection (`--no-loadscope-reorder`): the
# longest first (some hold a few long tests: last, one worker would run them while the other
# waits), then the others, most tests first. A group missing here only starts later.
LONG_FIRST = ("test_spectral", "hf", "test_study_uniform", "test_sweep", "test_plotting",
              "test_edges_resume", "test_memory", "test_cli", "test_kernels",
              "test_diffusion", "test_spectral_runs", "test_spectral_ledger", "test_io",
              "test_noise", "test_study_asymmetry", "test_intervals", "test_density_spectral",
              "test_adaptive_checkpoint", "test_study_regimes")


def _group(path):
    """The xdist group of a test file (a ``pathlib.Path``, or a node id's file part)."""
    name = str(path).rsplit("/", 1)[-1]
    return "hf" if name in HF_FILES else name.removesuffix(".py")


def pytest_collection_modifyitems(config, items):
    groups = {}
    for item in items:
        groups.setdefault(_group(item.path), []).append(item)
    rank = {g: i for i, g in enumerate(LONG_FIRST)}
    order = sorted(groups, key=lambda g: (rank.get(g, len(rank)), -len(groups[g])))
    items[:] = [item for g in order for item in groups[g]]


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the groups of :func:`_group` for files."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class GroupScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid):
            return _group(nodeid.split("::", 1)[0])

    return GroupScheduling(config, log)


# ---------------------------------------------------------------- garbage collection
# `wflow.cli.main` ends every command with a full `gc.collect()` (h5py's leftovers released while
# its quiet hooks are installed). In a test worker that has imported the whole stack (numba,
# dask, matplotlib, torch, ...) a full collection walks some 4·10⁵ objects, ~0.3 s, and the
# tests call `main` hundreds of times. Before the first test of each file the collector runs
# once and whatever is alive then moves to the permanent generation (`gc.freeze`), so later
# collections walk only the objects made since: what a test leaves behind is still collected.
_FROZEN_AT = [None]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.path != _FROZEN_AT[0]:
        _FROZEN_AT[0] = item.path
        gc.collect()
        gc.freeze()


# ---------------------------------------------------------------- hypothesis profiles
# "ci" (selected when CI is set, as .ci/run does): derandomised, so a failure in CI reproduces
# with the same examples on any machine; no example database. "dev": random examples, kept in
# .hypothesis/ so a failure found locally is replayed first. No deadline in either: the first
# example compiles numba kernels.
settings.register_profile("ci", derandomize=True, database=None, deadline=None,
                          print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


# ---------------------------------------------------------------- no silent skips
# A skip is allowed only for a documented optional dependency (docs/testing.md): torch, in the
# `bench` extra; and for the `slow` real full-disk test, which mounts a small tmpfs and so needs
# root (tests/test_write_errors.py). Everything else the suite needs is installed by
# `pip install -e ".[test]"`, so under CI (or WFLOW_STRICT_SKIPS=1) any other skip fails the
# run.
OPTIONAL_DEPENDENCIES = ("torch",)
ALLOWED_SKIP_REASONS = OPTIONAL_DEPENDENCIES + ("needs root to mount a small tmpfs",)
_bad_skips = []


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = str(report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr)
        if not any(allowed in reason for allowed in ALLOWED_SKIP_REASONS):
            _bad_skips.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session, exitstatus):
    strict = os.environ.get("CI") or os.environ.get("WFLOW_STRICT_SKIPS")
    if strict and _bad_skips and exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter):
    if _bad_skips and (os.environ.get("CI") or os.environ.get("WFLOW_STRICT_SKIPS")):
        terminalreporter.write_line("skips not allowed (only these reasons may skip: "
                                    f"{ALLOWED_SKIP_REASONS}):", red=True)
        for line in _bad_skips:
            terminalreporter.write_line(f"  {line}", red=True)
