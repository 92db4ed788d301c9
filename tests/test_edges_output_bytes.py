"""The size of a result file: a checkpoint rewrites its slot in place (the file does not grow
with the number of checkpoints), and ``output_bytes`` is an upper bound of the file written,
at most 30 % above it."""

from __future__ import annotations

import os

import pytest
from test_io import tiny

from wflow.engine import driver


@pytest.mark.parametrize("n", [12, 100])
def test_checkpoints_do_not_grow_the_file(tmp_path, n):
    """51 checkpoints against 3: the file differs by less than 1 kB a checkpoint (each
    rewrote its string attributes and recreated its step-ledger memo: ~4.5 kB)."""
    sizes = []
    for every in (25, 1):
        cfg = tiny(**{"model.n": n, "solver.T": 0.5, "output.checkpoint_every": every,
                      "solver.backend": "numba"})
        p = driver.run_to_file(cfg, tmp_path / f"r{every}.h5")
        sizes.append(os.path.getsize(p))
    assert sizes[1] - sizes[0] < 48 * 1024, sizes
