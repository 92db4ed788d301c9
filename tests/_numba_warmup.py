"""Compile the numba kernels once for all test workers (a cold cache costs ~2 min of CPU).

With ``-n 2`` each xdist worker would otherwise compile the same kernel specialisations
side by side the first time a test reaches them: twice the compilation CPU on a clean clone.
Here every worker walks the same list of kernel specialisations, each under its own file
lock, in its own order (worker ``k`` starts at a different end): a specialisation is compiled
by whichever worker takes its lock first and written to numba's on-disk cache
(``cache=True``); the other worker then finds it there and only loads it (~0.1 s). With two
workers each compiles about half; with a warm cache all of it is loading (~2 s per worker).

The list goes through the public entry points the tests use (:class:`AttentionModel` and
:func:`fused_pass`), so it compiles what they would compile and nothing else: e.g. one path
with untied values, whose value array numba sees as a separate (read-only) type today.
A specialisation left out here is still compiled lazily by the first test that needs it, by
that test's worker alone (test_kernels.py's BLAS tests compiled ~25 s of CPU that way).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import tempfile
import time

import numpy as np


def _case(rng, P, n, d, H):
    X = rng.standard_normal((P, n, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    A = rng.standard_normal((P, H, d, d))
    return X, A + np.swapaxes(A, -1, -2)


def _specs():
    """(name, thunk) per kernel specialisation, the most expensive to compile first."""
    from wflow import kernels as K
    from wflow.model.attention import AttentionModel

    rng = np.random.default_rng(0)
    X1, D1 = _case(rng, 1, 12, 3, 2)
    X2, D2 = _case(rng, 2, 12, 3, 2)
    Xb, Db = _case(rng, 2, K.BLAS_MIN_N + 1, K.BLAS_MIN_D, 2)
    vals = rng.standard_normal((2, 3, 3))
    w12, wb = np.full(12, 1 / 12), np.full(Xb.shape[1], 1 / Xb.shape[1])
    tied = AttentionModel(laplacian_heads=(1,))
    untied = AttentionModel(laplacian_heads=(1,), values=vals)
    single = AttentionModel(precision="float32")
    # the BLAS pair pass's other forms (through fused_pass, as tests/test_kernels.py calls
    # them): the libm exponential, the row blocks (causal mask or non-symmetric D_h, each
    # tile a separate call) and the row-maximum shift (β‖D‖ large)
    lap, Vb = np.array([True, False]), np.zeros_like(Db)
    Dn = rng.standard_normal(Db.shape)  # not symmetric

    def blas(D=Db, beta=1.0, causal=False, fast=True, w=None):
        return lambda: K.fused_pass(Xb, D, Vb, beta, 1, lap, causal, True, fast_exp=fast,
                                    weights=w)

    def both(*thunks):
        return lambda: [t() for t in thunks]

    return [
        ("float64", lambda: tied.evaluate(X2, D2)),
        ("float64 weighted", lambda: tied.evaluate(X2, D2, weights=w12)),
        ("float64 one path untied", lambda: untied.evaluate(X1, D1)),
        ("float64 one path untied weighted", lambda: untied.evaluate(X1, D1, weights=w12)),
        ("float32", lambda: single.evaluate(X2, D2)),
        ("BLAS", lambda: tied.evaluate(Xb, Db)),
        ("BLAS weighted", lambda: tied.evaluate(Xb, Db, weights=wb)),
        ("BLAS libm", blas(fast=False)),
        ("BLAS libm weighted", blas(fast=False, w=wb)),
        ("BLAS rows", both(*(blas(D, causal=D is Db, fast=f) for D in (Db, Dn)
                             for f in (True, False)))),
        ("BLAS rows weighted", both(*(blas(D, causal=D is Db, fast=f, w=wb) for D in (Db, Dn)
                                      for f in (True, False)))),
        ("BLAS row max", both(blas(beta=1e3), blas(beta=1e3, w=wb))),
        ("exponentials", lambda: (K.fast_exp_array(np.zeros(4)),
                                  K.fast_exp_array(np.zeros(4, np.float32)))),
    ]


def _lock_dir():
    """One lock directory per kernel source and numba cache location (two clones, or two
    cache directories, never wait for each other)."""
    from wflow import kernels as K

    key = f"{pathlib.Path(K.__file__).resolve()}|{os.environ.get('NUMBA_CACHE_DIR', '')}"
    tag = hashlib.sha1(key.encode()).hexdigest()[:12]
    path = pathlib.Path(tempfile.gettempdir()) / f"wflow-numba-warmup-{os.getuid()}-{tag}"
    path.mkdir(exist_ok=True)
    return path


def warm_up(worker: int, workers: int) -> list[tuple[str, float]]:
    """Compile (or load) every specialisation of :func:`_specs`, each under its file lock;
    worker ``k`` of ``workers`` walks the list forwards (even k) or backwards (odd k), from
    ``2⌊k/2⌋/workers`` of the way round. Returns
    (name, seconds) per specialisation."""
    import fcntl

    specs = _specs()
    start = (worker // 2 * 2 * len(specs)) // max(workers, 1)
    order = specs[start:] + specs[:start]
    if worker % 2:  # odd workers walk backwards: two workers meet in the middle
        order = order[::-1]
    locks = _lock_dir()
    times = []
    for name, thunk in order:
        t0 = time.perf_counter()
        with open(locks / (name.replace(" ", "_") + ".lock"), "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                thunk()
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        times.append((name, time.perf_counter() - t0))
    return times
