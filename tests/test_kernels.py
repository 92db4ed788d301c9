"""The numba kernels (wflow.kernels) against the dense NumPy reference (wflow.kernels.reference)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numba
import numpy as np
import pytest
from bounds import U32, U64, assert_within, field_bounds, relative_bound

from wflow import kernels as K
from wflow.kernels import band3, blas, exp, fused, pool, routing, rows, sym3, target, workspace
from wflow.kernels.reference import field_reference

NORM_CODES = {m.name.lower(): int(m) for m in K.Norm}


def sym_route(X, D, beta=1.0, single=False, fast_exp=True, U=None, causal=False):
    """Whether the plan of (X; D) takes the symmetric d = 3 pass."""
    return K.plan(X, np.ascontiguousarray(D), beta, single=single, fast_exp=fast_exp, U=U,
                  causal=causal, threads=1).route.symmetric

NAMES = K.FieldPass._fields
assert NAMES == ("velocity", "partition", "gradient", "b_hat", "energy", "dissipation", "G2",
                 "G2_hm", "dE_dD", "ito_sum")
MASKED_DEFINED = ("velocity", "partition")
# the paper-companion case, copied into the repository (tests/data/companion_case.md)
COMPANION = pathlib.Path(__file__).resolve().parent / "data" / "companion_case.npz"


def sphere(rng, shape):
    X = rng.normal(size=shape)
    return X / np.linalg.norm(X, axis=-1, keepdims=True)


def sym(rng, shape, norm2=None):
    A = rng.normal(size=shape)
    D = A + np.swapaxes(A, -1, -2)
    if norm2 is not None:
        D *= norm2 / np.linalg.norm(D, ord=2, axis=(-2, -1))[..., None, None]
    return D


def make_case(rng, P, n, d, H, norm2=None):
    X = sphere(rng, (P, n, d))
    D = sym(rng, (P, H, d, d), norm2)
    V = rng.normal(size=(P, H, d, d))  # untied values: not symmetric
    return X, D, V


def reference(X, D, V, beta, norm, lap, causal, tied, u=U64, full=None):
    """Per path: the NumPy reference and the rounding-error bounds of every output.
    ``full``: under ``causal``, the unmasked references of the same case if already computed
    (the bounds read their magnitudes)."""
    out = []
    for p in range(X.shape[0]):
        Vp = None if tied else V[p]
        heads = np.flatnonzero(lap)
        ref = field_reference(X[p], D[p], beta, norm, heads, causal, Vp)
        if not causal:
            fp = ref
        else:
            fp = full[p] if full is not None else field_reference(X[p], D[p], beta, norm, heads,
                                                                  False, Vp)
        out.append((ref, field_bounds(X[p], D[p], beta, norm, heads, Vp, causal, fp, u,
                                      masked=ref if causal else None)))
    return out


def check(out, refs, causal):
    """Every output of ``fused_pass`` within its conditioning bound of the reference
    (tests/bounds.py); NaN where the causal mask leaves it undefined."""
    assert len(out) == len(NAMES)
    worst = 0.0
    for name, arr in zip(NAMES, out):
        assert arr.shape[0] == len(refs)
        for p, (ref, bound) in enumerate(refs):
            if causal and name not in MASKED_DEFINED:
                assert np.all(np.isnan(arr[p])), name
                continue
            worst = max(worst, assert_within(f"{name}[path {p}]", arr[p], ref[name], bound[name]))
    return worst


def check_agree(a, b, X, D, V, beta, code, lap, causal, tied, u=U64, refs=None):
    """Two kernel evaluations (different code paths, summation orders or precisions) agree
    within twice the conditioning bound (both sides round); ``u`` is the coarser round-off.
    ``refs``: :func:`reference` of the same case and ``u``, if already computed (its bounds)."""
    if refs is None:
        norm = {c: k for k, c in NORM_CODES.items()}[code]
        refs = reference(X, D, V, beta, norm, lap, causal, tied, u)
    for name, x, y in zip(NAMES, a, b):
        assert x.dtype == np.float64
        for p, (_, bound) in enumerate(refs):
            if causal and name not in MASKED_DEFINED:
                assert np.all(np.isnan(x[p])) and np.all(np.isnan(y[p])), name
                continue
            assert_within(f"{name}[path {p}]", x[p], y[p], 2 * bound[name])


def check_all_variants(X, D, V, beta, lap):
    """fused_pass vs the reference, within the conditioning bounds, for every normalisation,
    tied/untied values, with and without the causal mask, with the polynomial and the libm
    exponential."""
    for norm, code in NORM_CODES.items():
        for tied in (True, False):
            plain = None
            for causal in (False, True):
                refs = reference(X, D, V, beta, norm, lap, causal, tied, full=plain)
                plain = [r for r, _ in refs]
                for fast in (True, False):
                    out = K.fused_pass(X, D, V, beta, code, lap, causal, tied,
                                       want_ito=True, fast_exp=fast)
                    check(out, refs, causal)


@pytest.mark.parametrize("d", [2, 3, 8])
@pytest.mark.parametrize("H", [1, 4])
@pytest.mark.parametrize("beta", [0.1, 1.0, 25.0])
def test_fused_pass_matches_reference(d, H, beta):
    rng = np.random.default_rng(1000 * d + 10 * H + int(beta))
    P, n = 2, 23
    # β = 25: keep ‖D‖₂ modest so the unshifted dense reference does not overflow
    X, D, V = make_case(rng, P, n, d, H, norm2=2.0 if beta > 10 else None)
    lap = np.zeros(H, dtype=bool)
    if H > 1:
        lap[[0, H - 1]] = True
    check_all_variants(X, D, V, beta, lap)


# the ends of the BLAS range; the three β (one code path: fixed shifts, different
# conditioning) at d = 16 in the default run, at d = 64 only β = 1 (the dense reference of
# d = 64 costs ~5 s per β; the other two run with -m slow)
@pytest.mark.parametrize("d, beta", [(16, 0.1), (16, 1.0), (16, 25.0), (64, 1.0),
                                     pytest.param(64, 0.1, marks=pytest.mark.slow),
                                     pytest.param(64, 25.0, marks=pytest.mark.slow)])
def test_blas_pass_matches_reference(d, beta):
    """Large d (the BLAS pair pass, row blocks of blas._BLAS_ROWS: n spans three blocks)."""
    rng = np.random.default_rng(7000 + d + int(beta))
    P, n, H = 2, max(blas.BLAS_MIN_N, 2 * blas._BLAS_ROWS) + 22, 3
    assert K.plan_shapes(n, d, 1).route.blas
    X, D, V = make_case(rng, P, n, d, H, norm2=2.0 if beta > 10 else None)
    lap = np.array([True, False, True])
    check_all_variants(X, D, V, beta, lap)


def test_blas_pass_matches_numba_pass(monkeypatch):
    """The BLAS pair pass and the numba pair pass agree (d = 16, row-max shifts too)."""
    rng = np.random.default_rng(17)
    X, D, V = make_case(rng, 2, 300, 16, 3)
    assert K.plan_shapes(300, 16, 1).route.blas
    lap = np.array([False, True, False])
    for limit in (routing.FIXED_SHIFT_LIMIT, 0.0):
        monkeypatch.setattr(routing, "FIXED_SHIFT_LIMIT", limit)
        for causal in (False, True):
            a = K.fused_pass(X, D, V, 2.0, 1, lap, causal, False)
            b = K.fused_pass(X, D, V, 2.0, 1, lap, causal, False, route="rows")
            check_agree(a, b, X, D, V, 2.0, 1, lap, causal, False)


def test_paths_are_independent():
    """P = 2 with distinct weights: each path equals its own single-path evaluation."""
    rng = np.random.default_rng(7)
    X, D, V = make_case(rng, 2, 31, 3, 4)
    lap = np.array([False, True, False, False])
    out = K.fused_pass(X, D, V, 1.0, 1, lap, False, False)
    for p in range(2):
        one = K.fused_pass(X[p:p + 1], D[p:p + 1], V[p:p + 1], 1.0, 1, lap, False, False)
        for a, b in zip(out, one):
            np.testing.assert_array_equal(a[p], b[0])
    assert not np.allclose(out[0][0], out[0][1])


def test_want_ito_false():
    rng = np.random.default_rng(3)
    X, D, V = make_case(rng, 2, 17, 3, 2)
    lap = np.zeros(2, dtype=bool)
    full = K.fused_pass(X, D, V, 1.0, 0, lap, False, True, want_ito=True)
    part = K.fused_pass(X, D, V, 1.0, 0, lap, False, True, want_ito=False)
    assert np.all(np.isnan(part[-1]))
    for a, b in zip(full[:-1], part[:-1]):
        np.testing.assert_array_equal(a, b)


def stable_reference(X, D, beta):
    """Log-stable dense reference (row-max shifts, long double) of v (head), log Z and g/Z̄."""
    X = X.astype(np.longdouble)
    D = D.astype(np.longdouble)
    n = X.shape[0]
    S = beta * np.einsum("ia,hab,jb->hij", X, D, X)
    m = S.max(axis=2, keepdims=True)
    W = np.exp(S - m)
    s0 = W.sum(axis=2, keepdims=True)
    Pi = W / s0
    logZ = m[..., 0] + np.log(s0[..., 0] / n)
    DX = np.einsum("hab,jb->hja", D, X)
    A = np.einsum("hij,hja->hia", Pi, DX)
    A = A - np.einsum("hia,ia->hi", A, X)[..., None] * X[None]
    v = A.mean(axis=0)
    return v.astype(float), logZ.astype(float)


def test_large_logits_row_max_shift():
    """β = 50, ‖D‖₂ = 10: 2c = 1000 > 700, a fixed shift would underflow whole rows."""
    rng = np.random.default_rng(11)
    P, n, d, H, beta = 2, 40, 3, 4, 50.0
    X, D, V = make_case(rng, P, n, d, H, norm2=10.0)
    lap = np.zeros(H, dtype=bool)
    for fast in (True, False):
        out = K.fused_pass(X, D, V, beta, 0, lap, False, True, fast_exp=fast)
        for arr in out:
            assert np.all(np.isfinite(arr))
        assert np.all(out[1] > 0)
        for p in range(P):
            # logits ≤ 500 < 709: the dense reference is still finite here
            ref = field_reference(X[p], D[p], beta, "head")
            bound = field_bounds(X[p], D[p], beta, ref=ref)
            v, logZ = stable_reference(X[p], D[p], beta)
            assert_within("velocity (long double)", out[0][p], v, bound["velocity"])
            # a relative error ε of Z is an absolute error ε of log Z
            assert_within("log Z", np.log(out[1][p]), logZ, relative_bound(n, d, H, beta, D[p]))
            for name, arr in zip(NAMES, out):
                assert_within(name, arr[p], ref[name], bound[name])


def test_huge_logits_velocity_finite():
    """c = β‖D‖₂ = 1000: Z overflows (documented), the normalised velocity does not."""
    rng = np.random.default_rng(12)
    X, D, V = make_case(rng, 1, 30, 3, 2, norm2=10.0)
    out = K.fused_pass(X, D, V, 100.0, 0, np.zeros(2, bool), False, True)
    v, _ = stable_reference(X[0], D[0], 100.0)
    # the dense reference overflows here: the velocity bound of tests/bounds.py written out
    # (head normalisation, tied values: |w_h| ≤ ‖D_h‖₂, projected)
    Mv = 2 * np.mean(np.linalg.norm(D[0], 2, axis=(1, 2)))
    assert_within("velocity", out[0][0], v, relative_bound(30, 3, 2, 100.0, D[0]) * Mv)


def test_fixed_and_row_max_shift_agree(monkeypatch):
    rng = np.random.default_rng(5)
    X, D, V = make_case(rng, 2, 29, 3, 3)
    lap = np.array([False, False, True])
    a = K.fused_pass(X, D, V, 2.0, 1, lap, False, False)
    monkeypatch.setattr(routing, "FIXED_SHIFT_LIMIT", 0.0)  # force the per-row maximum
    b = K.fused_pass(X, D, V, 2.0, 1, lap, False, False)
    check_agree(a, b, X, D, V, 2.0, 1, lap, False, False)


@pytest.mark.parametrize("d, dtype, beta", [(3, np.float64, 1.0), (8, np.float64, 1.0),
                                            (3, np.float32, 1.0), (3, np.float64, 50.0),
                                            (32, np.float64, 1.0), (16, np.float64, 50.0)])
def test_thread_count_determinism(d, dtype, beta):
    """Bit-identical results with 1 and 2 threads (every kernel path: d = 3 fused, generic d,
    float32, row-max shifts, the BLAS pass for large d)."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("a single thread available")
    rng = np.random.default_rng(9)
    X, D, V = make_case(rng, 3, 301, d, 5, norm2=10.0 if beta > 10 else None)
    X = X.astype(dtype)
    lap = np.array([False, True, False, False, False])
    old = numba.get_num_threads()
    try:
        res = {}
        for nt in (1, 2):
            numba.set_num_threads(nt)
            res[nt] = [K.fused_pass(X, D, V, beta, code, lap, causal, False)
                       for code in (0, 1) for causal in (False, True)]
    finally:
        numba.set_num_threads(old)
    for r1, r2 in zip(res[1], res[2]):
        for a, b in zip(r1, r2):
            np.testing.assert_array_equal(a, b)


def test_paper_regime_threads_and_batches_identical():
    """The paper's regime (n = 200, H = 100, d = 3, P = 10, untied values, joint and head
    normalisation): P = 10 on one thread and two batches of 5 on two threads give the same
    bits (the tiles depend on d only; each head's epilogue runs right after its row sums)."""
    rng = np.random.default_rng(2024)
    P, n, d, H = 10, 200, 3, 100
    X, D, V = make_case(rng, P, n, d, H)
    lap = np.zeros(H, dtype=bool)
    lap[::7] = True
    old = numba.get_num_threads()
    nt2 = min(2, numba.config.NUMBA_NUM_THREADS)
    try:
        for code in (0, 1):
            numba.set_num_threads(1)
            whole = K.fused_pass(X, D, V, 1.0, code, lap, False, False)
            numba.set_num_threads(nt2)
            halves = [K.fused_pass(X[s], D[s], V[s], 1.0, code, lap, False, False)
                      for s in (slice(0, 5), slice(5, 10))]
            for name, a, b0, b1 in zip(NAMES, whole, *halves):
                np.testing.assert_array_equal(a, np.concatenate([b0, b1]), err_msg=name)
    finally:
        numba.set_num_threads(old)
    assert np.all(np.isfinite(whole.dE_dD)) and np.all(np.isfinite(whole.velocity))


_BLAS_CHILD = """
import sys
import numpy as np
from wflow import kernels as K
z = np.load(sys.argv[1])
out = K.fused_pass(z["X"], z["D"], z["V"], 1.0, 1, z["lap"], False, False)
np.savez(sys.argv[2], *out)
"""


def test_blas_thread_count_determinism(tmp_path):
    """Large d: bit-identical results whatever the BLAS thread count (a child process with
    OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = 1, and in-process threadpoolctl limits)."""
    rng = np.random.default_rng(19)
    X, D, V = make_case(rng, 2, 300, 48, 3)
    assert K.plan_shapes(300, 48, 1).route.blas
    lap = np.array([False, True, False])
    np.savez(tmp_path / "in.npz", X=X, D=D, V=V, lap=lap)
    out = K.fused_pass(X, D, V, 1.0, 1, lap, False, False)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(pathlib.Path(K.__file__).parents[1]),
                                         env.get("PYTHONPATH", "")])
    subprocess.run([sys.executable, "-c", _BLAS_CHILD, str(tmp_path / "in.npz"),
                    str(tmp_path / "out.npz")], check=True, env=env, timeout=600)
    child = np.load(tmp_path / "out.npz")
    for k, a in enumerate(out):
        assert a.tobytes() == child[f"arr_{k}"].tobytes(), NAMES[k]
    import threadpoolctl

    for nt in (1, 2):
        with threadpoolctl.threadpool_limits(nt):
            again = K.fused_pass(X, D, V, 1.0, 1, lap, False, False)
        for name, a, b in zip(NAMES, out, again):
            assert a.tobytes() == b.tobytes(), (name, nt)


def test_companion_case():
    """The fused pass against the paper's own simulation (tests/data): both sides round, so
    the bound is the conditioning bound of tests/bounds.py taken twice."""
    z = np.load(COMPANION)
    X, D = z["X"][None], z["D"][None]
    out = K.fused_pass(X, D, None, 1.0, 0, np.zeros(D.shape[1], bool), False, True)
    bound = field_bounds(z["X"], z["D"], 1.0)
    for k, name in ((0, "velocity"), (4, "energy"), (6, "G2")):
        assert_within(name, out[k][0], z[name], 2 * bound[name])


def test_fast_exp_accuracy():
    """Max relative error of the polynomial exponential ≤ 1e-14 on [-708, 709]."""
    rng = np.random.default_rng(0)
    x = np.concatenate([
        np.linspace(-708.0, 709.0, 200_001),
        rng.uniform(-708.0, 709.0, 200_000),
        rng.uniform(-1.0, 1.0, 50_000),
        np.linspace(-1e-6, 1e-6, 2001),
        [0.0, -0.0, 5e-324, -5e-324, 1e-300, -708.0, 709.0, np.log(2) / 2, -np.log(2) / 2],
        np.nextafter(709.0, 0.0) - np.arange(100) * 1e-13,
        -708.0 + np.arange(100) * 1e-13,
    ])
    got = K.fast_exp_array(x)
    ref = np.exp(x)
    err = np.max(np.abs(got - ref) / ref)
    assert err <= 1e-14, err
    assert K.fast_exp_array(np.array([0.0]))[0] == 1.0
    # clamped outside the range
    assert K.fast_exp_array(np.array([-1000.0]))[0] == K.fast_exp_array(np.array([-708.0]))[0]


def test_bad_inputs():
    rng = np.random.default_rng(1)
    X, D, V = make_case(rng, 1, 5, 3, 2)
    with pytest.raises(ValueError):
        K.fused_pass(X[0], D, V, 1.0, 0, np.zeros(2, bool), False, True)
    with pytest.raises(ValueError):
        K.fused_pass(X, D, V, 0.0, 0, np.zeros(2, bool), False, True)
    with pytest.raises(ValueError):
        K.fused_pass(X, D, V, 1.0, 3, np.zeros(2, bool), False, True)


def test_fast_exp32_accuracy():
    """float32 polynomial exponential on [-87, 88]: relative error ≲ 2 ulp."""
    x = np.concatenate([np.linspace(-87.0, 88.0, 400_001),
                        np.random.default_rng(2).uniform(-1, 1, 100_000)]).astype(np.float32)
    got = K.fast_exp_array(x)
    assert got.dtype == np.float32
    ref = np.exp(x.astype(np.float64))
    err = np.max(np.abs(got - ref) / ref)
    assert err <= 2.5e-7, err


@pytest.mark.parametrize("causal", [False, True])
def test_float32_pair_loop(causal):
    """float32 tokens (d = 3): the single-precision pair loop against float64, within the
    conditioning bound at float32's round-off (inputs identical: X rounded to float32 first)."""
    rng = np.random.default_rng(21)
    P, n, d, H = 2, 300, 3, 4
    X, D, V = make_case(rng, P, n, d, H)
    X32 = X.astype(np.float32)
    lap = np.array([False, True, False, False])
    for code in (0, 1, 2):
        o32 = K.fused_pass(X32, D, V, 1.0, code, lap, causal, False)
        o64 = K.fused_pass(X32.astype(np.float64), D, V, 1.0, code, lap, causal, False)
        check_agree(o32, o64, X32.astype(np.float64), D, V, 1.0, code, lap, causal, False, U32)


def test_float32_large_logits():
    """float32 with 2β‖D‖₂ > 80: row-max shifts, still finite and close."""
    rng = np.random.default_rng(22)
    X, D, V = make_case(rng, 1, 200, 3, 2, norm2=10.0)
    X32 = X.astype(np.float32)
    o32 = K.fused_pass(X32, D, V, 5.0, 0, np.zeros(2, bool), False, True)
    o64 = K.fused_pass(X32.astype(np.float64), D, V, 5.0, 0, np.zeros(2, bool), False, True)
    for a in o32:
        assert np.all(np.isfinite(a))
    check_agree(o32, o64, X32.astype(np.float64), D, V, 5.0, 0, np.zeros(2, bool), False, True, U32)


def test_threading_defaults_leave_user_settings():
    """Passive OpenMP waiting, OpenMP first, OpenBLAS workers that sleep at once, by default;
    whatever the user set wins."""
    import wflow

    omp_first = {"NUMBA_THREADING_LAYER_PRIORITY": "omp tbb workqueue",
                 "OPENBLAS_THREAD_TIMEOUT": "4"}
    env = {}
    wflow._threading_defaults(env)
    assert env == {"OMP_WAIT_POLICY": "passive", "WFLOW_OMP_DEFAULTS": "1", "KMP_BLOCKTIME": "0",
                   **omp_first}
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    wflow._threading_defaults(env)
    assert env == {"OMP_WAIT_POLICY": "ACTIVE", **omp_first}
    env = {"KMP_BLOCKTIME": "200", "NUMBA_THREADING_LAYER_PRIORITY": "tbb omp workqueue",
           "OPENBLAS_THREAD_TIMEOUT": "28"}
    wflow._threading_defaults(env)
    assert env == {"OMP_WAIT_POLICY": "passive", "WFLOW_OMP_DEFAULTS": "1", "KMP_BLOCKTIME": "200",
                   "NUMBA_THREADING_LAYER_PRIORITY": "tbb omp workqueue",
                   "OPENBLAS_THREAD_TIMEOUT": "28"}
    assert os.environ.get("OMP_WAIT_POLICY")  # set (or kept) at import


def test_threading_layer_priority_reaches_numba():
    """numba, imported after wflow in a fresh process, tries OpenMP before TBB (it would take
    TBB first wherever TBB is installed: slower beside busy processes)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_THREADING_LAYER")}
    code = ("import wflow\nfrom numba.core import config\n"
            "print(' '.join(config.THREADING_LAYER_PRIORITY))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["omp", "tbb", "workqueue"]


def test_spectral_norm_runs_lapack_on_one_blas_thread(monkeypatch):
    """From d = SPECTRAL_LIMIT_D on, the shift's eigenvalues are computed with BLAS limited to
    one thread (at d = 64 LAPACK otherwise wakes OpenBLAS's workers, which then spin for
    ≈ 0.1 s beside the pair pass); the values are LAPACK's either way."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    seen = []
    eig = np.linalg.eigvalsh

    def spy(a):
        seen.append(max(i["num_threads"] for i in threadpoolctl.threadpool_info()
                        if i["user_api"] == "blas"))
        return eig(a)

    monkeypatch.setattr(np.linalg, "eigvalsh", spy)
    rng = np.random.default_rng(97)
    for d in (routing.SPECTRAL_LIMIT_D, 64):
        A = rng.normal(size=(1, 2, d, d))
        D = A + np.swapaxes(A, -1, -2)
        np.testing.assert_array_equal(routing.spectral_norm(D), np.abs(eig(D)).max(axis=-1))
    assert seen == [1, 1]


def test_tile_partition_is_fixed():
    """The work items depend on d only (never on the thread count or the path batch)."""
    assert routing.tile_rows(3) == 8 and routing.tile_rows(8) == 8 and routing.tile_rows(9) == 16
    assert routing.tile_rows(64) == 64


def test_pad_granularity(monkeypatch):
    """Column padding: 16 only for targets surely without AVX2, else 32 (the symmetric
    pass's 8-float vectors); the padding of the loaded module is a multiple of the float64
    vectors it pads for."""
    from numba.core import config

    monkeypatch.setattr(config, "CPU_NAME", "generic")
    monkeypatch.setattr(config, "CPU_FEATURES", None)
    assert target._pad_granularity() == 16
    monkeypatch.setattr(config, "CPU_NAME", "skylake-avx512")
    assert target._pad_granularity() == 32
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,-avx512f")
    assert target._pad_granularity() == 32
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+avx512f")
    assert target._pad_granularity() == 32
    monkeypatch.setattr(config, "CPU_FEATURES", "+sse4.2,-avx,-avx2,-avx512f")
    assert target._pad_granularity() == 16
    # whole tokens: "-avx2vnni" (a host with AVX2 but not AVX-VNNI) is not "-avx2"
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,-avx2vnni,-avx512f")
    assert target._pad_granularity() == 32
    assert target._VW in (16, 32) and target._VW32 == 2 * target._VW and rows._CH % target._VW32 == 0


# ---------------------------------------------------------------------------------------------
# Weighted points [model §5b]
# ---------------------------------------------------------------------------------------------
def weighted_reference(X, D, V, beta, norm, lap, causal, tied, W):
    """Per path: the weighted NumPy reference and its conditioning bounds."""
    out = []
    for p in range(X.shape[0]):
        Vp = None if tied else V[p]
        heads = np.flatnonzero(lap)
        ref = field_reference(X[p], D[p], beta, norm, heads, causal, Vp, weights=W[p])
        full = ref if not causal else field_reference(X[p], D[p], beta, norm, heads, False, Vp,
                                                      weights=W[p])
        out.append((ref, field_bounds(X[p], D[p], beta, norm, heads, Vp, causal, full,
                                      weights=W[p], masked=ref if causal else None)))
    return out


def masses(rng, P, n, zeros=3):
    """Point masses: spread over two decades, a few exactly zero, summing to 1 per path."""
    W = 10.0 ** rng.uniform(-1, 1, size=(P, n))
    W[:, rng.choice(n, zeros, replace=False)] = 0.0
    return W / W.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("d", [2, 3, 16])
def test_weighted_pass_matches_reference(d):
    """Weighted points (columns e_ij → w_j e_ij and rows Σ_i w_i) equal the weighted NumPy
    reference within the conditioning bounds, every normalisation, tied and untied values,
    causal mask, both exponentials; d = 16 with n ≥ 256 runs the BLAS pair pass."""
    rng = np.random.default_rng(40 + d)
    P, H = 2, 3
    n = blas.BLAS_MIN_N + 9 if d == 16 else 29
    X, D, V = make_case(rng, P, n, d, H)
    W = masses(rng, P, n)
    lap = np.array([False, True, False])
    assert K.plan_shapes(n, d, 1).route.blas == (d == 16)
    combos = [(norm, tied, causal) for norm in NORM_CODES for tied in (True, False)
              for causal in (False, True)]
    if d == 16:  # the dense reference is the cost: each option once
        combos = [("head", True, False), ("joint", False, True), ("none", False, False)]
    for norm, tied, causal in combos:
        refs = weighted_reference(X, D, V, 1.5, norm, lap, causal, tied, W)
        for fast in ((True, False) if d != 16 else (True,)):
            out = K.fused_pass(X, D, V, 1.5, NORM_CODES[norm], lap, causal, tied,
                               fast_exp=fast, weights=W)
            check(out, refs, causal)


def test_blas_combine_matches_compiled_combine():
    """From d = BLAS_EPILOGUE_MIN_D the combine after the BLAS pair pass runs as matmuls per
    row block; on the same pair sums it agrees with the compiled per-row combine within twice
    the conditioning bound (each normalisation, tied and untied values, a Laplacian head, the
    causal mask), and with point masses it equals the weighted reference."""
    rng = np.random.default_rng(33)
    d = blas.BLAS_EPILOGUE_MIN_D
    P, n, H = 2, blas.BLAS_MIN_N + 57, 3
    X, D, V = make_case(rng, P, n, d, H)
    W = masses(rng, P, n)
    lap = np.array([True, False, False])
    # the matmul combine is the route from d = BLAS_EPILOGUE_MIN_D on, masses or not
    assert K.plan_shapes(n, d, H, P).route is K.Route.BLAS_COMBINE
    assert K.plan_shapes(n, d, H, P, weighted=True).route is K.Route.BLAS_COMBINE
    assert K.plan_shapes(n, d // 2, H, P).route is K.Route.BLAS
    for code, tied, causal in [(0, True, False), (1, False, True), (2, False, False)]:
        a = K.fused_pass(X, D, V, 1.0, code, lap, causal, tied)
        b = K.fused_pass(X, D, V, 1.0, code, lap, causal, tied, route="blas")
        check_agree(a, b, X, D, V, 1.0, code, lap, causal, tied)
    refs = weighted_reference(X, D, V, 1.0, "joint", lap, False, False, W)
    check(K.fused_pass(X, D, V, 1.0, 1, lap, False, False, weights=W), refs, False)


@pytest.mark.parametrize("d", [2, 3, 16])
def test_integer_weights_equal_repeated_particles(d):
    """Integer multiplicities k_j (normalised, w_j = k_j / Σk) give the field of the point set
    in which x_j is repeated k_j times: the velocity at every copy, and every sum (E, 𝒟, G²,
    G²_hm, ∂_D E, Itô) — within the conditioning bound of the longer (repeated) sum."""
    rng = np.random.default_rng(50 + d)
    n, H = (blas.BLAS_MIN_N + 3 if d == 16 else 31), 2
    X, D, V = make_case(rng, 1, n, d, H)
    k = rng.integers(1, 4, size=n)
    Xr = np.repeat(X, k, axis=1)
    lap = np.array([True, False])
    for code in (0, 1, 2):
        a = K.fused_pass(X, D, V, 1.0, code, lap, False, False, weights=(k / k.sum())[None])
        b = K.fused_pass(Xr, D, V, 1.0, code, lap, False, False)
        norm = {c: s for s, c in NORM_CODES.items()}[code]
        bound = field_bounds(Xr[0], D[0], 1.0, norm, (0,), V[0])
        for name in NAMES:
            x, y = getattr(a, name)[0], getattr(b, name)[0]
            if name in ("velocity", "gradient", "b_hat"):
                x = np.repeat(x, k, axis=0)
            elif name == "partition":
                x = np.repeat(x, k, axis=1)
            assert_within(f"{name} (repeated)", x, y, 2 * bound[name])


def test_weights_none_is_uniform_and_unweighted_code():
    """weights=None is w_j = 1/n (within the bounds: n·(1/n) need not round to 1), float32
    inputs with weights take the float64 pair loop, and bad masses are refused."""
    rng = np.random.default_rng(60)
    X, D, V = make_case(rng, 2, 40, 3, 2)
    lap = np.zeros(2, bool)
    a = K.fused_pass(X, D, V, 1.0, 0, lap, False, True)
    b = K.fused_pass(X, D, V, 1.0, 0, lap, False, True, weights=np.full(40, 1 / 40))
    check_agree(a, b, X, D, V, 1.0, 0, lap, False, True)
    W = masses(rng, 2, 40)
    c = K.fused_pass(X, D, V, 1.0, 0, lap, False, True, weights=W)
    c32 = K.fused_pass(X.astype(np.float32), D, V, 1.0, 0, lap, False, True, weights=W)
    c64 = K.fused_pass(X.astype(np.float32).astype(np.float64), D, V, 1.0, 0, lap, False, True,
                       weights=W)
    for name in NAMES:
        assert np.array_equal(getattr(c32, name), getattr(c64, name), equal_nan=True), name
    assert not np.array_equal(c.energy, a.energy)
    for bad in (np.full(39, 1 / 39), -W, np.where(W > 0.03, np.nan, W)):
        with pytest.raises(ValueError, match="weights"):
            K.fused_pass(X, D, V, 1.0, 0, lap, False, True, weights=bad)


def test_paper_regime_mixed_shifts_and_workspace():
    """n = 200, H = 20, d = 3: heads with the fixed shift and heads with the row-max shift
    (2β‖D_h‖₂ ≥ 700) in the same tile pass, causal and not: P = 4 on one thread equals two
    batches of 2 on two threads, and a pass with another shape in between (the reused
    row-sum workspace) changes nothing; the result agrees with the reference."""
    rng = np.random.default_rng(77)
    P, n, d, H = 4, 200, 3, 20
    X, D, V = make_case(rng, P, n, d, H, norm2=2.0)
    D[:, ::3] *= 200.0  # ‖D_h‖₂ = 400: the row-max shift for every third head
    beta = 1.0
    assert np.any(2 * beta * routing.spectral_norm(D) >= routing.FIXED_SHIFT_LIMIT)
    lap = np.zeros(H, dtype=bool)
    lap[1::5] = True
    old = numba.get_num_threads()
    nt2 = min(2, numba.config.NUMBA_NUM_THREADS)
    try:
        for causal in (False, True):
            numba.set_num_threads(1)
            whole = K.fused_pass(X, D, V, beta, 1, lap, causal, False)
            K.fused_pass(X[:1, :50], D[:1, :3], V[:1, :3], beta, 1, lap[:3], causal, False)
            numba.set_num_threads(nt2)
            halves = [K.fused_pass(X[s], D[s], V[s], beta, 1, lap, causal, False)
                      for s in (slice(0, 2), slice(2, 4))]
            again = K.fused_pass(X, D, V, beta, 1, lap, causal, False)
            for name, a, b0, b1, c in zip(NAMES, whole, *halves, again):
                np.testing.assert_array_equal(a, np.concatenate([b0, b1]), err_msg=name)
                np.testing.assert_array_equal(a, c, err_msg=name)
    finally:
        numba.set_num_threads(old)
    Xs, Ds, Vs = X[:1], D[:1] / 200.0, V[:1]  # the reference without shift: moderate logits
    out = K.fused_pass(Xs, Ds, Vs, beta, 1, lap, False, False)
    check(out, reference(Xs, Ds, Vs, beta, "joint", lap, False, False), False)


def test_exp2_shifted_accuracy():
    """The base-2 exponential of the symmetric loop: 2^y within 1e-15 relative on
    [−1021, 1023] (polynomial 6.7e-16, the 2^k scaling exact); e^x through y = x·log₂e within
    |x|·2^-52 + 1e-15 (the rounding of y, the conditioning of any base change)."""
    y = np.concatenate([np.linspace(-1021.0, 1023.0, 4001), [-0.5, 0.5, 0.0, -1e-300, 1e-300]])
    a = np.array([exp._exp2_shifted(v) for v in y])
    assert np.max(np.abs(a / np.exp2(y) - 1)) < 1e-15
    x = np.linspace(-700.0, 0.0, 3001)
    b = np.array([exp._exp2_shifted(v * exp._LOG2E) for v in x])
    assert np.all(np.abs(b / np.exp(x) - 1) <= np.abs(x) * 2.0**-52 + 1e-15)


def test_exp_shifted_is_exp_fast_in_range():
    """The unclamped exponential of the fixed-shift loops equals the clamped one bit for bit
    on [−708, 709] (where the clamp is inactive and k + 1023 fits the exponent field)."""
    x = np.concatenate([np.linspace(-708.0, 709.0, 4001), [-700.0, -1e-300, 0.0, 1e-300]])
    a = np.array([exp._exp_shifted(v) for v in x])
    np.testing.assert_array_equal(a, K.fast_exp_array(x))
    assert np.max(np.abs(a / np.exp(x) - 1)) < 1e-14

# ---------------------------------------------------------------------------------------------
# The tiled BLAS pair pass (tiles of blas._blas_tile_size(n); symmetric tiles in rounds)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("nb", range(1, 13))
def test_round_robin_pairs_each_block_pair_once(nb):
    """The rounds of the symmetric tiles: every pair I < J exactly once, no block twice in one
    round (the items of a round write disjoint rows), at most nb − 1 + nb % 2 rounds."""
    rounds = blas._round_robin(nb)
    pairs = [pr for rnd in rounds for pr in rnd]
    assert sorted(pairs) == [(i, j) for i in range(nb) for j in range(i + 1, nb)]
    for rnd in rounds:
        blocks = [b for pr in rnd for b in pr]
        assert len(blocks) == len(set(blocks))
    assert len(rounds) <= nb - 1 + nb % 2


def _dense_pair_sums(X, D, beta, shift, causal, U):
    """S0, SX, SI and their conditioning bounds from dense (n, n) arrays: positive terms
    u_j e_ij (e_ij |x_j|, e_ij (1 + C_ij²)) with a relative error at most
    ((d + 2) c + n + 4) ε from the logit (a d-term dot product times β‖D‖), the exponential
    and the sum; doubled."""
    P, n, d = X.shape
    H = D.shape[1]
    S0, SI, b0, bI = (np.empty((P, H, n)) for _ in range(4))
    SX, bX = np.empty((P, H, n, d)), np.empty((P, H, n, d))
    for p in range(P):
        C = X[p] @ X[p].T
        u = np.ones(n) if U is None else U[p, :n]
        for h in range(H):
            E = np.exp(beta * (X[p] @ D[p, h].T) @ X[p].T - shift[p, h]) * u
            if causal:
                E = np.tril(E)
            S0[p, h], SX[p, h], SI[p, h] = E.sum(1), E @ X[p], (E * (1 + C * C)).sum(1)
            g = 2 * ((d + 2) * shift[p, h] + n + 4) * np.finfo(float).eps
            b0[p, h], bX[p, h], bI[p, h] = g * S0[p, h], g * (E @ np.abs(X[p])), g * SI[p, h]
    return (S0, SX, SI), (b0, bX, bI)


@pytest.mark.parametrize("symmetric", [True, False])
def test_blas_tiles_pair_sums(monkeypatch, symmetric):
    """The pair sums of the tiled pass against dense sums within their conditioning bound:
    tiles of 64 with n = 300 (four full tiles and a ragged one of 44, an odd number of
    blocks: rounds with a bye), symmetric D (symmetric tiles) and not (row blocks), causal
    on and off, masses on and off, both exponentials."""
    monkeypatch.setattr(blas, "_BLAS_TILE", (64, 64))
    rng = np.random.default_rng(70 + symmetric)
    P, n, d, H, beta = 2, 300, 16, 3, 1.5
    X = sphere(rng, (P, n, d))
    D = sym(rng, (P, H, d, d)) if symmetric else rng.normal(size=(P, H, d, d))
    D /= np.sqrt(d)
    shift = beta * routing.spectral_norm(D)
    rowmax = np.zeros((P, H), dtype=bool)
    U = np.zeros((P, n + 20))
    U[:, :n] = n * masses(rng, P, n)
    for causal in (False, True):
        for u in (None, U):
            ref, bound = _dense_pair_sums(X, D, beta, shift, causal, u)
            for fast in (True, False):
                out = [np.full((P, H, n), np.nan), np.full((P, H, n, d), np.nan),
                       np.full((P, H, n), np.nan), np.full((P, H, n), np.nan)]
                blas._pair_pass_blas(X, D, beta, shift, rowmax, causal, True, fast, out,
                                  blas._blas_limits(), u)
                for name, a, r, b in zip(("S0", "SX", "SI"), out, ref, bound):
                    err = np.abs(a - r)
                    assert np.all(err <= b), (name, causal, u is None, fast,
                                              float(np.max(err / b)))
                np.testing.assert_array_equal(out[3], np.broadcast_to(shift[..., None],
                                                                      (P, H, n)))


def test_blas_tiles_match_reference(monkeypatch):
    """fused_pass through the tiled pass (tiles of 64, n = 300: a ragged last tile) equals the
    NumPy reference within the conditioning bounds: causal on and off, masses on and off,
    and a head with the row-maximum shift (the path then takes the row-block form)."""
    monkeypatch.setattr(blas, "_BLAS_TILE", (64, 64))
    rng = np.random.default_rng(80)
    P, n, d, H, beta = 2, 300, 16, 3, 1.0
    assert K.plan_shapes(n, d, 1).route.blas and blas._blas_tile_size(n) == 64
    X, D, V = make_case(rng, P, n, d, H, norm2=2.0)
    D[:, 0] *= 3.0  # head 0: shift 6, the others 2
    lap = np.array([False, True, False])
    W = masses(rng, P, n)
    for limit in (routing.FIXED_SHIFT_LIMIT, 8.0):  # 8: head 0 takes the row maximum
        monkeypatch.setattr(routing, "FIXED_SHIFT_LIMIT", limit)
        for causal in (False, True):
            for tied, w in ((True, None), (False, W)):
                if w is None:
                    refs = reference(X, D, V, beta, "joint", lap, causal, tied)
                else:
                    refs = weighted_reference(X, D, V, beta, "joint", lap, causal, tied, w)
                out = K.fused_pass(X, D, V, beta, 1, lap, causal, tied, weights=w)
                check(out, refs, causal)


def test_blas_numba_thread_count_determinism():
    """The tiled pass gives the same bits with 1 and 2 pool threads (other items per round,
    other head groups): symmetric tiles, the causal row blocks, masses."""
    rng = np.random.default_rng(90)
    X, D, V = make_case(rng, 2, 300, 32, 3)
    W = masses(rng, 2, 300)
    lap = np.array([True, False, False])
    old = numba.get_num_threads()
    if old < 2:
        pytest.skip("needs 2 numba threads")
    try:
        runs = []
        for nt in (1, 2):
            numba.set_num_threads(nt)
            runs.append([K.fused_pass(X, D, V, 1.0, 0, lap, causal, False, weights=w)
                         for causal in (False, True) for w in (None, W)])
    finally:
        numba.set_num_threads(old)
    for a, b in zip(*runs):
        for name, x, y in zip(NAMES, a, b):
            assert x.tobytes() == y.tobytes(), name


@pytest.mark.parametrize("n, H", [(1, 1), (7, 3), (200, 100), (1031, 2), (4096, 8), (16384, 1)])
def test_sym_bands_cover_rows_with_equal_work(n, H):
    """The row bands of the symmetric d = 3 pass: they partition 0..n in order, start at
    multiples of 4 (the row groups), number max(1, min(⌈32/H⌉, ⌊n/512⌋)), and carry about
    equal triangle work Σ_{i in band} (n − i) (within the rounding of 4 rows per edge)."""
    e = band3._sym_bands(n, H)
    nb = max(1, min(-(-32 // H), n // 512))
    assert e[0] == 0 and e[-1] == n and e.size == nb + 1
    assert np.all(np.diff(e) > 0) and np.all(e[:-1] % 4 == 0)
    work = np.array([sum(n - i for i in range(a, b)) for a, b in zip(e[:-1], e[1:])])
    assert np.all(np.abs(work - work.mean()) <= 4 * n + 8)


def _sym_sums(X, D, beta, bands):
    """The pair sums S0, SX, SI of the symmetric pass with the given bands."""
    P, n, d = X.shape
    H = D.shape[1]
    shift = beta * routing.spectral_norm(D)
    out = [np.full((P, H, n), np.nan), np.full((P, H, n, d), np.nan),
           np.full((P, H, n), np.nan), np.full((P, H, n), np.nan)]
    Xt = np.zeros((P, d, -(-n // target._VW) * target._VW))
    Xt[:, :, :n] = X.transpose(0, 2, 1)
    nb = bands.size - 1
    Cb = np.full((P, H, nb, 5, -(-n // target._VQ) * target._VQ), np.nan)  # every used slot is zeroed
    sym3._sym_pair_sums(Xt, D, beta, shift, bands, numba.get_num_threads(), Cb, *out,
                     np.ones(P, dtype=bool))
    if nb > 1:
        sym3._run_sym_reduce3(bands, Cb, out[0], out[1], out[2], numba.get_num_threads())
    np.testing.assert_array_equal(out[3], np.broadcast_to(shift[..., None], (P, H, n)))
    return out[:3], shift


@pytest.mark.parametrize("n, bands", [(1, [0, 1]), (5, [0, 5]), (13, [0, 13]), (64, [0, 64]),
                                      (203, [0, 8, 52, 120, 203]), (258, [0, 4, 256, 258])])
def test_sym_pass_pair_sums(n, bands):
    """Each unordered pair once (e_ij = e_ji, the diagonal half to the row and half to the
    column), for any bands: the row sums S0, SX equal the dense sums within their conditioning
    bound (:func:`_dense_pair_sums`); the Itô sums only in total over the rows of a head
    (row i holds S0_i plus twice its column half, Σ_{r ≤ i} e_ri C_ri², weight 1/2 at r = i),
    within the sum of the rows' bounds. Odd n, n below one vector, a short last row group, a
    band of one group and bands that end inside a vector."""
    rng = np.random.default_rng(90 + n)
    P, d, H, beta = 2, 3, 3, 2.0
    X = sphere(rng, (P, n, d))
    D = sym(rng, (P, H, d, d))
    (S0, SX, SI), shift = _sym_sums(X, D, beta, np.array(bands, dtype=np.int64))
    ref, bound = _dense_pair_sums(X, D, beta, shift, False, None)
    for name, a, r, b in zip(("S0", "SX"), (S0, SX), ref, bound):
        err = np.abs(a - r)
        assert np.all(err <= b), (name, float(np.max(err / b)))
    # the totals: positive terms, n more roundings in the sum over rows
    err = np.abs(SI.sum(-1) - ref[2].sum(-1))
    assert np.all(err <= bound[2].sum(-1) * (1 + n * np.finfo(float).eps)), \
        float(np.max(err / bound[2].sum(-1)))
    assert np.all(SI >= S0)  # S0 plus a sum of non-negative terms


@pytest.mark.parametrize("vq", [4, 8])
def test_sym_flat_weights_table(monkeypatch, vq):
    """The pair loop's weight table: for every group of rows i..i+3 of a band [i_lo, i_hi)
    and every vector of columns jv = jb, jb + vq, … < n_pad (jb = vq⌊i/vq⌋), the entry the
    loop reads (:func:`_sym_band3`: rows valid, first/last vector, o, r) is the weight of the
    pair (i + r, jv + m): 0 for rows ≥ i_hi, columns ≥ n or before the diagonal, 1/2 on it,
    1 after. The loop multiplies by the table only in first and last vectors (last: when n
    is not a multiple of vq) and in short groups: everywhere else the table holds ones. Both
    vector widths, whatever this machine compiles."""
    monkeypatch.setattr(band3, "_VQ", vq)
    monkeypatch.setattr(band3, "_SYM_FLAT_W", 16 * vq * vq)
    for n, i_lo, i_hi in ((vq, 0, vq), (200, 0, 200), (203, 0, 203), (13, 0, 13),
                          (203, 96, 150), (64, 8, 61)):
        npq = -(-n // vq) * vq
        Wf = np.full(16 * vq * vq, np.nan)
        band3._sym_flat_weights.py_func(Wf, n)
        for i in range(i_lo, i_hi, 4):
            jb = (i // vq) * vq
            v = min(4, i_hi - i) % 4
            for jv in range(jb, npq, vq):
                kind = (jv == jb) + 2 * (jv + vq >= npq)
                w0 = v * 4 * vq * vq + kind * vq * vq + (i - jb) * vq
                weighted = jv == jb or (npq != n and jv + vq >= npq) or v != 0
                for r in range(4):
                    j = jv + np.arange(vq)
                    rule = np.where(j > i + r, 1.0, np.where(j == i + r, 0.5, 0.0))
                    rule = np.where((j < n) & (i + r < i_hi), rule, 0.0)
                    got = Wf[w0 + r * vq:w0 + (r + 1) * vq]
                    np.testing.assert_array_equal(got if weighted else np.ones(vq), rule)


def _tree_sum(v):
    """A vector's lanes added as :func:`wflow.kernels.simd` promises: halves, then halves."""
    v = np.asarray(v, dtype=np.float64)
    while v.size > 1:
        v = v[:v.size // 2] + v[v.size // 2:]
    return v[0]


@pytest.mark.parametrize("lanes", [4, 8])
def test_simd_hsums_is_hsum_per_vector(lanes):
    """``hsums`` (the band's group end: 16 vectors reduced and stored as whole vectors by a
    transposing tree) gives, for every vector, the bits of ``hsum`` and of the halves tree
    in NumPy: the same additions in the same order, only regrouped across vectors. Values
    spread over 30 binades, so that any other order rounds differently somewhere."""
    from numba import njit

    from wflow.kernels.simd import vector_ops

    V = vector_ops(lanes, exp._ROUND_MAGIC, (1.0,))
    load, hsum, hsums = V.load, V.hsum, V.hsums

    @njit
    def both(a, out, one):
        L = lanes
        hsums(out, 3, (load(a, 0), load(a, L), load(a, 2 * L), load(a, 3 * L), load(a, 4 * L),
                       load(a, 5 * L), load(a, 6 * L), load(a, 7 * L), load(a, 8 * L),
                       load(a, 9 * L), load(a, 10 * L), load(a, 11 * L), load(a, 12 * L),
                       load(a, 13 * L), load(a, 14 * L), load(a, 15 * L)))
        for k in range(16):
            one[k] = hsum(load(a, k * L))

    rng = np.random.default_rng(5)
    for _ in range(20):
        a = rng.normal(size=16 * lanes) * 2.0 ** rng.integers(-15, 15, size=16 * lanes)
        out = np.full(16 + 3, np.nan)
        one = np.empty(16)
        both(a, out, one)
        ref = np.array([_tree_sum(a[k * lanes:(k + 1) * lanes]) for k in range(16)])
        np.testing.assert_array_equal(out[3:], ref)
        np.testing.assert_array_equal(one, ref)
        assert np.isnan(out[:3]).all()


@pytest.mark.parametrize("lanes", [4, 8])
def test_simd_load3_and_rounded_ops(lanes):
    """``load3`` splits ``lanes`` rows of a flat (rows, 3) array into its three components,
    and ``mul_rounded``, ``add_rounded``, ``sub``, ``div`` give lane by lane the bits of
    NumPy's scalar operations (each rounded on its own: the symmetric combine relies on it
    to have the scalar loop's bits)."""
    from numba import njit

    from wflow.kernels.simd import vector_ops

    V = vector_ops(lanes, exp._ROUND_MAGIC, (1.0,))
    load3, store, mul, add, sub, div = (V.load3, V.store, V.mul_rounded, V.add_rounded,
                                        V.sub, V.div)

    @njit
    def run(a, off, out):
        x, y, z = load3(a, off)
        store(out, 0, x)
        store(out, lanes, y)
        store(out, 2 * lanes, z)
        store(out, 3 * lanes, sub(div(add(mul(x, y), z), y), x))

    rng = np.random.default_rng(6)
    a = rng.normal(size=3 * lanes + 9) * 2.0 ** rng.integers(-20, 20, size=3 * lanes + 9)
    out = np.empty(4 * lanes)
    run(a, 6, out)
    rows = a[6:6 + 3 * lanes].reshape(lanes, 3)
    for q in range(3):
        np.testing.assert_array_equal(out[q * lanes:(q + 1) * lanes], rows[:, q])
    x, y, z = rows.T
    np.testing.assert_array_equal(out[3 * lanes:], (x * y + z) / y - x)


@pytest.mark.parametrize("n, i_lo, i_hi", [(200, 0, 200), (203, 0, 203), (13, 0, 13),
                                           (203, 96, 150), (64, 8, 61), (1100, 520, 1100),
                                           (5, 0, 5)])
def test_sym_flat_rows_layout_and_bits(n, i_lo, i_hi):
    """The band's row constants: group g of four rows holds q'_i = bl·D_h x_i (each product
    and sum rounded on its own: NumPy's bits) then x_i, row by row, the last group's missing
    rows repeating row i_hi − 1; the vectors of rows and the rows after them agree with the
    NumPy layout bit for bit, and nothing past the last group is written. The step count is
    every group's vectors from _VQ⌊i/_VQ⌋ to n_pad."""
    rng = np.random.default_rng(2 + n + i_lo)
    npq = -(-n // target._VQ) * target._VQ
    X = np.zeros((3, band3._sym_stride(npq)))
    X[:, :n] = rng.normal(size=(3, n))
    Dh = rng.normal(size=(3, 3))
    Dh = Dh + Dh.T
    ng = (i_hi - i_lo + 3) // 4
    Q = np.full(24 * ng + 8, np.nan)
    steps = band3._sym_flat_rows(X[0], X[1], X[2], Dh, 1.7, i_lo, i_hi, npq, Q)
    ref = np.full_like(Q, np.nan)
    for k in range(4 * ng):
        y = X[:, min(i_lo + k, i_hi - 1)]
        a = 24 * (k // 4) + 3 * (k % 4)
        ref[a:a + 3] = 1.7 * ((Dh[:, 0] * y[0] + Dh[:, 1] * y[1]) + Dh[:, 2] * y[2])
        ref[a + 12:a + 15] = y
    np.testing.assert_array_equal(Q, ref)
    assert steps == sum((npq - ((i_lo + 4 * g) // target._VQ) * target._VQ) // target._VQ for g in range(ng))


def _band_reference(X, D, beta, c, i_lo, i_hi):
    """NumPy: band [i_lo, i_hi)'s weighted pair sums of :func:`_sym_band3` (own band): the
    row parts (Σ_j ω e_ij, Σ_j ω e_ij x_j), S0, SX, SI = 2 C4 + S0 of its rows and the
    column sums C0 … C4 of every column (the later bands' rows read them)."""
    n = X.shape[0]
    E = np.exp(beta * X @ D @ X.T - c)
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    M = np.where(j > i, 1.0, np.where(j == i, 0.5, 0.0)) * ((i >= i_lo) & (i < i_hi))
    ME = M * E
    parts = np.concatenate([ME.sum(1)[:, None], ME @ X], axis=1)[i_lo:i_hi]
    S0 = ME.sum(1) + ME.sum(0)
    SX = ME @ X + ME.T @ X
    C4 = (ME * (X @ X.T) ** 2).sum(0)
    cols = np.concatenate([ME.sum(0)[None], (ME.T @ X).T, C4[None]])
    return parts, [a[i_lo:i_hi] for a in (S0, SX, 2 * C4 + S0)], cols


#: the bands of the symmetric pair loop's tests: a short last group, padding columns
#: (n = 203) and bands that start inside the token range
SYM_BANDS = ((200, 0, 200), (203, 0, 203), (203, 96, 150), (61, 8, 61))


def _literal_call(f, k, *args):
    """``f(*args)`` with argument ``k`` typed as a literal, through the compiled overload:
    numba's call from Python would type every argument first as a non-literal, fail at
    ``numba.literally`` and run the front end again, ~0.4 s for the pair loop, on every call."""
    tys = tuple(numba.types.literal(a) if i == k else numba.typeof(a)
                for i, a in enumerate(args))
    return f.compile(tys)(*args)


def _sym_band_outputs(variants, n, i_lo, i_hi, rng):
    """Run :func:`band3._sym_band3`'s variants ``(name, function, ito)`` on one random case
    (H = 2) over band [i_lo, i_hi): name → (row parts, outputs, column sums), and the case."""
    X, D, _ = make_case(rng, 1, n, 3, 2)
    Xt = fused._columns(X, target._VW)
    npq = -(-n // target._VQ) * target._VQ
    shift = routing.spectral_norm(D)
    G = np.full((n, npq), np.nan)
    band3._cos2_table(Xt[0, 0], Xt[0, 1], Xt[0, 2], n, G)
    outs = {}
    for name, f, ito in variants:
        W = np.full(band3._sym_flat_room(n), np.nan)
        band3._sym_flat_weights(W, n)
        C = np.zeros((5, npq))
        Rp = np.full((npq + 4, 4), np.nan)
        o = [np.zeros((2, n)), np.zeros((2, n, 3)), np.zeros((2, n)), np.zeros((2, n))]
        parts = np.zeros((2, i_hi - i_lo, 4))
        cols = np.zeros((2, 5, npq))
        for h in range(2):
            C[:] = 0.0
            _literal_call(f, 12, (Xt[0, 0], Xt[0, 1], Xt[0, 2]), D[0, h], 1.3, shift[0, h], n,
                          i_lo, i_hi, (C[0], C[1], C[2], C[3], C[4]), W, Rp, True,
                          tuple(a[h] for a in o), ito, G.reshape(-1), npq)
            parts[h] = Rp[i_lo:i_hi]
            cols[h] = C
        outs[name] = (parts, [a[:, i_lo:i_hi] for a in o], cols)
    return outs, X, D, shift


def _assert_same_bits(outs, name):
    for a, b in zip(outs[name][1], outs["loop"][1]):
        np.testing.assert_array_equal(a, b, err_msg=name)
    np.testing.assert_array_equal(outs[name][2], outs["loop"][2], err_msg=name)


def test_sym_band_against_numpy_and_same_bits():
    """The symmetric pair loop (one loop over every group's vectors, explicit vectors)
    against NumPy: row parts and outputs within the sums' rounding (terms added in groups of
    four, lanes and about n more: 4(n + 4)u of the sum of the terms' sizes; each term is at
    most e_ij (|x| ≤ 1, ⟨x_i, x_j⟩² ≤ 1), so of S0, three S0 for SI = 2·C4 + S0), plus the
    exponential's 7e-16 and the logits' rounding (|s − c| ≤ 2c, about 4·2c·u relative).
    Bands with a short last group, padding columns (n = 203) and bands that start inside the
    token range. And the same bits: Itô sums from the table (``ito`` = 2) and from the loop
    (1) (targets with FMA); S0 and SX without the Itô sums (``ito`` = 0). (Compiled without
    ``noalias``: :func:`test_sym_band_without_noalias_same_bits`, slow.)"""
    rng = np.random.default_rng(29)
    for n, i_lo, i_hi in SYM_BANDS:
        variants = [("loop", band3._sym_band3, 1), ("no ito", band3._sym_band3, 0)] + (
            [("table", band3._sym_band3, 2)] if target._HAS_FMA else [])
        outs, X, D, shift = _sym_band_outputs(variants, n, i_lo, i_hi, rng)
        for h in range(2):
            ref_parts, ref, ref_cols = _band_reference(X[0], D[0, h], 1.3, shift[0, h], i_lo,
                                                       i_hi)
            rel = 4 * (n + 4) * U64 + 8 * 2 * shift[0, h] * U64 + 1e-15
            tol = rel * ref[0]
            parts, got, cols = outs["loop"]
            # every column's sums over the band's rows (padding columns: exact zeros), the
            # Itô column computed (outs["loop"]: ito = 1)
            assert np.all(cols[h, :, n:] == 0.0)
            ctol = rel * ref_cols[0] + 1e-300
            assert np.all(np.abs(cols[h, :, :n] - ref_cols) <= ctol), \
                (n, i_lo, float(np.max(np.abs(cols[h, :, :n] - ref_cols) / ctol)))
            assert np.all(np.abs(parts[h] - ref_parts) <= tol[:, None])
            for a, r, k in zip(got, ref, (1, 1, 3)):
                t = k * (tol if a.ndim == 2 else tol[:, None])
                err = np.abs(a[h] - r)
                assert np.all(err <= t), (n, i_lo, float(np.max(err / t)))
            np.testing.assert_array_equal(outs["loop"][1][3][h], shift[0, h])  # RS = c_h
        if "table" in outs:
            _assert_same_bits(outs, "table")
        for a, b in zip(outs["no ito"][1][:2], outs["loop"][1][:2]):
            np.testing.assert_array_equal(a, b, err_msg="no ito")


@pytest.mark.slow  # compiles the loop a second time (~15 s), a specialisation nothing else uses
def test_sym_band_without_noalias_same_bits():
    """The symmetric pair loop compiled without ``noalias`` (numba's default pipeline) gives
    the bits of the cached kernel, on the bands of
    :func:`test_sym_band_against_numpy_and_same_bits` (which checks those against NumPy)."""
    from numba import njit

    plain = njit(error_model="numpy", boundscheck=False)(band3._sym_band3.py_func)
    rng = np.random.default_rng(29)
    for n, i_lo, i_hi in SYM_BANDS:
        outs, *_ = _sym_band_outputs([("loop", band3._sym_band3, 1), ("plain", plain, 1)],
                                     n, i_lo, i_hi, rng)
        _assert_same_bits(outs, "plain")


def test_sym_pass_matches_row_pass_and_reference(monkeypatch):
    """fused_pass through the symmetric pass equals the NumPy reference within the conditioning
    bounds, and the row pass within twice them, for every normalisation, tied and untied
    values and Laplacian heads (n = 1031, H = 2: two bands)."""
    rng = np.random.default_rng(91)
    X, D, V = make_case(rng, 2, 1031, 3, 2)
    assert sym_route(X, D)
    assert band3._sym_bands(1031, 2).size == 3
    lap = np.array([False, True])
    for norm, code in NORM_CODES.items():
        for tied in (True, False):
            a = K.fused_pass(X, D, V, 1.5, code, lap, False, tied)
            refs = reference(X, D, V, 1.5, norm, lap, False, tied)  # n = 1031: ≈ 0.5 s
            check(a, refs, False)
            b = K.fused_pass(X, D, V, 1.5, code, lap, False, tied, route="rows")
            check_agree(a, b, X, D, V, 1.5, code, lap, False, tied, refs=refs)


@pytest.mark.parametrize("P, n", [(3, 200), (1, 200), (1, 1031), (2, 605)])
def test_sym_pass_dE_dD_symmetric(P, n):
    """∂_D E = e^c Σ_ij e_ij x_i x_jᵀ is symmetric: the symmetric pass takes each block's six
    entries a ≤ b and mirrors them, so its ∂_D E is exactly symmetric in the fused (P ≥ threads),
    chained (P = 1) and multi-band (n = 1031) forms, and within the conditioning bound of the
    reference (which sums all nine entries). n = 605 and 1031: several blocks of
    ``_SYM_BLOCK_ROWS`` rows, the last one short and ending inside a vector."""
    assert n <= 256 or n % sym3._SYM_BLOCK_ROWS % 8 != 0
    rng = np.random.default_rng(17 + P + n)
    X, D, V = make_case(rng, P, n, 3, 3)
    lap = np.zeros(3, dtype=bool)
    assert K.takes_sym_pass(X, D, 1.2)
    out = K.fused_pass(X, D, None, 1.2, 0, lap, False, True)
    assert np.array_equal(out.dE_dD, np.swapaxes(out.dE_dD, -1, -2))
    assert not np.array_equal(out.dE_dD[..., 0, 1], out.dE_dD[..., 0, 2])  # (not trivially so)
    for p, (ref, bound) in enumerate(reference(X, D, V, 1.2, "head", lap, False, True)):
        assert_within(f"dE_dD[path {p}]", out.dE_dD[p], ref["dE_dD"], bound["dE_dD"])


@pytest.mark.parametrize("H", [16, 17, 37])
def test_sym_head_chunks(H):
    """The symmetric pass adds its heads in chunks of at most ``_SYM_CHUNK`` (sizes differing by
    at most one, covering every head once); with several chunks (H = 17: 9 + 8, H = 37:
    12 + 12 + 13) the fused form (P ≥ threads) still equals the NumPy reference within the
    conditioning bounds, and the row pass within twice them."""
    nc = sym3._sym_chunks(H)
    assert nc == -(-H // sym3._SYM_CHUNK)
    starts = [sym3._sym_chunk_start(H, nc, c) for c in range(nc + 1)]
    assert starts[0] == 0 and starts[-1] == H
    sizes = np.diff(starts)
    assert sizes.max() <= sym3._SYM_CHUNK and sizes.max() - sizes.min() <= 1
    rng = np.random.default_rng(97 + H)
    X, D, V = make_case(rng, 2, 40, 3, H)
    lap = np.arange(H) % 3 == 0
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)  # P = 2 ≥ threads: the fused form, items (path, chunk)
        for norm, code in NORM_CODES.items():
            a = poisoned(K.fused_pass, X, D, V, 1.5, code, lap, False, True)
            refs = reference(X, D, V, 1.5, norm, lap, False, True)
            check(a, refs, False)
            b = K.fused_pass(X, D, V, 1.5, code, lap, False, True, route="rows")
            check_agree(a, b, X, D, V, 1.5, code, lap, False, True, refs=refs)
    finally:
        numba.set_num_threads(old)


def test_sym_shift_in_the_items_same_bits(monkeypatch):
    """When a Frobenius bound shows the fixed shift below its limit (``_sym3_precheck`` = 1)
    the symmetric pass's items compute their own shifts c_h = β‖D_h‖₂: the same bits as the
    shifts computed before the pass (precheck forced to 2), in the fused (P ≥ threads) and
    chained (P = 1, two threads) forms. The precheck: 0 for an asymmetric D, 2 when
    2β‖D‖_F reaches the limit though 2β‖D‖₂ does not (D = a·I: ‖D‖_F = √3 a), and then the
    pass still applies with the shifts computed first."""
    rng = np.random.default_rng(98)
    lim = routing.FIXED_SHIFT_LIMIT
    old = numba.get_num_threads()
    nt2 = min(2, numba.config.NUMBA_NUM_THREADS)
    real = sym3._sym3_precheck
    try:
        for P, nt in ((3, 1), (1, nt2)):
            X, D, V = make_case(rng, P, 50, 3, 20)
            lap = np.arange(20) % 4 == 0
            numba.set_num_threads(nt)
            assert real(D, 1.3, lim) == 1
            a = K.fused_pass(X, D, V, 1.3, 1, lap, False, False)
            monkeypatch.setattr(routing, "_sym3_precheck", lambda D, beta, limit: 2)
            b = K.fused_pass(X, D, V, 1.3, 1, lap, False, False)
            monkeypatch.setattr(routing, "_sym3_precheck", real)
            for name, x, y in zip(NAMES, a, b):
                np.testing.assert_array_equal(x, y, err_msg=name)
    finally:
        numba.set_num_threads(old)
    X, D, V = make_case(rng, 1, 30, 3, 2)
    Dn = D.copy()
    Dn[0, 1, 2, 0] += 1e-12
    assert real(Dn, 1.0, lim) == 0
    a = 0.6 * lim / 2.0  # 2β‖D‖₂ = 0.6 limit, 2β‖D‖_F ≈ 1.04 limit
    Di = np.broadcast_to(a * np.eye(3), (1, 2, 3, 3)).copy()
    assert real(Di, 1.0, lim) == 2
    assert K.takes_sym_pass(X, Di, 1.0)
    got = K.fused_pass(X, Di, V, 1.0, 0, np.zeros(2, bool), False, True)
    check(got, reference(X, Di, V, 1.0, "head", np.zeros(2, bool), False, True), False)


def test_num_threads_is_numbas_setting():
    """The pass reads numba's thread count without its process lock: the same value as
    ``numba.get_num_threads()``, thread-local like it (a Dask worker thread sets its own)."""
    import threading

    old = numba.get_num_threads()
    seen = {}

    def other():
        numba.set_num_threads(1)
        seen["other"] = (pool._num_threads(), numba.get_num_threads())

    try:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert seen["other"] == (1, 1)
        assert pool._num_threads() == numba.get_num_threads() == min(2, numba.config.NUMBA_NUM_THREADS)
    finally:
        numba.set_num_threads(old)


def test_sym_pass_only_where_it_applies():
    """The symmetric pass needs e_ij = e_ji: symmetric D, the fixed shift on every head, no
    mask, uniform masses, float64 and the polynomial exponential, d = 3, n ≤ SYM_MAX_N."""
    rng = np.random.default_rng(92)
    X, D, _ = make_case(rng, 1, 50, 3, 2)
    assert sym_route(X, D)
    Dn = D.copy()
    Dn[0, 0, 0, 1] += 1e-3
    assert not sym_route(X, Dn)
    assert not sym_route(X, D, beta=1e3)  # row-max shift
    assert not sym_route(X, D, causal=True)
    assert not sym_route(X, D, U=np.ones((1, 64)))
    assert not sym_route(X, D, single=True)
    assert not sym_route(X, D, fast_exp=False)
    assert not K.plan_shapes(K.SYM_MAX_N + 1, 3, 2).route.symmetric
    assert K.plan_shapes(K.SYM_MAX_N, 3, 2).route.symmetric
    # takes_sym_pass (its shortcut: the precheck's Frobenius bound) says what the route says:
    # bound below the limit (1), spectral norm needed (2: ‖D‖_F above, ‖D‖_2 below), too large
    # for the fixed shift, not symmetric, float32, causal
    D2 = D * (330.0 / np.linalg.norm(D[0, 0]))  # 2β‖D‖_F ≈ 660 for β = 1
    big = D * 1e3
    for Dc, beta in ((D, 1.0), (D2, 1.0), (D2, 1.1), (big, 1.0), (Dn, 1.0)):
        pre = sym3._sym3_precheck(Dc, beta, routing.FIXED_SHIFT_LIMIT)
        want = sym_route(X, Dc, beta)
        assert K.takes_sym_pass(X, Dc, beta) == want, (pre, beta)
    assert sym3._sym3_precheck(D, 1.0, routing.FIXED_SHIFT_LIMIT) == 1
    assert sym3._sym3_precheck(D2, 1.1, routing.FIXED_SHIFT_LIMIT) == 2
    assert not K.takes_sym_pass(X.astype(np.float32), D, 1.0)
    assert not K.takes_sym_pass(X, D, 1.0, causal=True)


def test_sym_pass_threads_and_batches_identical():
    """The symmetric pass with several bands (n = 1031, H = 2: two bands; column sums per band
    added in band order): bit-identical with 1 and 2 threads and for a path alone or in a
    batch of 3."""
    rng = np.random.default_rng(93)
    X, D, V = make_case(rng, 3, 1031, 3, 2)
    lap = np.array([True, False])
    old = numba.get_num_threads()
    nt2 = min(2, numba.config.NUMBA_NUM_THREADS)
    try:
        numba.set_num_threads(1)
        whole = K.fused_pass(X, D, V, 1.0, 0, lap, False, False)
        numba.set_num_threads(nt2)
        again = K.fused_pass(X, D, V, 1.0, 0, lap, False, False)
        alone = [K.fused_pass(X[p:p + 1], D[p:p + 1], V[p:p + 1], 1.0, 0, lap, False, False)
                 for p in range(3)]
    finally:
        numba.set_num_threads(old)
    for k, name in enumerate(NAMES):
        np.testing.assert_array_equal(whole[k], again[k], err_msg=name)
        np.testing.assert_array_equal(whole[k], np.concatenate([a[k] for a in alone]),
                                      err_msg=name)


def poisoned(fn, X, D, *args, **kw):
    """``fn(X, D, *args, **kw)`` with the reused row-sum workspace of the fused pass filled with NaN
    first: a pass that read a row sum before it was written would not see the previous call's
    (equal) values."""
    for a in workspace._row_sum_arrays(D.shape[0], D.shape[1], X.shape[1], X.shape[2]):
        a.fill(np.nan)
    for _, chunks in getattr(workspace._WORKSPACE, "sym3_chunks", []):  # the fused form's chunk sums
        chunks.fill(np.nan)
    return fn(X, D, *args, **kw)


@pytest.mark.parametrize("n, H, P", [(200, 7, 3), (37, 2, 1), (61, 3, 6), (45, 37, 3)])
def test_sym_fused_form_same_bits(n, H, P):
    """The per-path fused form of the symmetric pass (pair sums and combine head by head, used
    when there are at least as many paths as threads) and the chained form (items (path, head);
    the thread that completes a path's last head runs its combine, used with fewer paths than
    threads) give the same bits, on one thread and on two (the chained form's hand-over
    between threads: many paths of few heads, repeated)."""
    rng = np.random.default_rng(94 + n)
    X, D, V = make_case(rng, P, n, 3, H)
    lap = np.zeros(H, dtype=bool)
    lap[::2] = True
    assert K.sym_band_count(n, H) == 1
    old = numba.get_num_threads()
    nt2 = min(2, numba.config.NUMBA_NUM_THREADS)
    res = []
    try:
        for nt in (1, nt2):
            numba.set_num_threads(nt)
            for route in ("sym3", "sym3-chain"):
                for _ in range(3 if nt > 1 else 1):
                    res.append([poisoned(K.fused_pass, X, D, V, 1.0, code, lap, False, tied,
                                         route=route)
                                for code in (0, 1, 2) for tied in (True, False)])
    finally:
        numba.set_num_threads(old)
    for other in res[1:]:
        for a, b in zip(res[0], other):
            for name, x, y in zip(NAMES, a, b):
                np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.parametrize("n, H, P, route", [(203, 3, 2, "sym3"), (203, 3, 2, "sym3-chain"),
                                            (1100, 1, 1, "sym3-bands")])
def test_sym_pass_without_ito_same_bits(n, H, P, route):
    """Without the Itô sum the symmetric pass compiles a loop without ⟨x_i, x_j⟩²; every other
    output keeps its bits (the sums it shares with the Itô loop are the same operations in the
    same order): fused and unfused forms, one band and two (n = 1100, H = 1)."""
    rng = np.random.default_rng(95 + n)
    X, D, V = make_case(rng, P, n, 3, H)
    lap = np.zeros(H, dtype=bool)
    lap[0] = True
    assert sym_route(X, D)
    assert K.sym_band_count(n, H) == (2 if n == 1100 else 1)
    a = K.fused_pass(X, D, V, 1.0, 0, lap, False, True, want_ito=True, route=route)
    b = K.fused_pass(X, D, V, 1.0, 0, lap, False, True, want_ito=False, route=route)
    assert np.all(np.isfinite(a.ito_sum)) and np.all(np.isnan(b.ito_sum))
    for name, x, y in zip(NAMES, a, b):
        if name != "ito_sum":
            np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.parametrize("n, d, P, route", [(203, 3, 3, "sym3"), (203, 3, 3, "sym3-chain"),
                                            (40, 8, 2, None)])
def test_per_path_ito_flags(n, d, P, route):
    """``want_ito`` per path: the paths that want it get the Itô sum of an all-paths call, the
    others NaN, and every other output keeps its bits: the symmetric pass (fused and unfused
    forms, which skip the Itô loop path by path) and the row pass (d = 8, all paths)."""
    rng = np.random.default_rng(96 + n + d)
    X, D, V = make_case(rng, P, n, d, 2)
    lap = np.array([True, False])
    assert K.takes_sym_pass(X, D, 1.0) == (d == 3)
    flags = np.arange(P) % 2 == 0
    a = K.fused_pass(X, D, V, 1.0, 0, lap, False, True, want_ito=True, route=route)
    b = K.fused_pass(X, D, V, 1.0, 0, lap, False, True, want_ito=flags, route=route)
    np.testing.assert_array_equal(b.ito_sum[flags], a.ito_sum[flags])
    assert np.all(np.isfinite(a.ito_sum)) and np.all(np.isnan(b.ito_sum[~flags]))
    for name, x, y in zip(NAMES, a, b):
        if name != "ito_sum":
            np.testing.assert_array_equal(x, y, err_msg=name)
    with pytest.raises(ValueError, match="want_ito has shape"):
        K.fused_pass(X, D, V, 1.0, 0, lap, False, True, want_ito=np.ones(P + 1, bool))


def test_general3_spectral_norm_closed_form():
    """‖D‖₂ of general 3 × 3 matrices in closed form (√λ_max of DᵀD) against LAPACK's singular
    values: within √ε relative (the arccos near a double singular value), mostly a few ε; no
    over- or underflow at extreme scales; a symmetric head in a non-symmetric batch gets the
    same value as in a symmetric batch; zero and NaN heads."""
    rng = np.random.default_rng(96)
    D = rng.normal(size=(30, 40, 3, 3)) * rng.lognormal(0, 2, size=(30, 40, 1, 1))
    D[0, 0] = np.diag([3.0, 3.0, 1.0])
    D[0, 1] = [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    D[0, 2] = 1e-200 * D[1, 2]
    D[0, 3] = 1e150 * D[1, 3]
    D[0, 4] = 0.0
    D[0, 5] = np.eye(3) + 1e-9 * D[1, 5]  # nearly a triple singular value
    S = D[2] + np.swapaxes(D[2], -1, -2)
    D[2] = S
    got = routing.spectral_norm(D)
    ref = np.linalg.norm(D, ord=2, axis=(-2, -1))
    eps = np.finfo(float).eps
    rel = np.abs(got - ref) / np.where(ref > 0, ref, 1.0)
    assert np.all(rel <= np.sqrt(eps)), float(rel.max())
    assert np.median(rel) <= 4 * eps
    assert got[0, 4] == 0.0
    np.testing.assert_array_equal(got[2], routing.spectral_norm(S[None])[0])
    bad = D[:1, :2].copy()
    bad[0, 1, 0, 1] = np.nan
    assert not np.isfinite(routing.spectral_norm(bad)[0, 1])


def test_sym3_spectral_norm_closed_form():
    """‖D‖₂ of symmetric 3 × 3 matrices in closed form (the fixed shift c_h = β‖D_h‖₂) against
    LAPACK's eigenvalues: the trigonometric form is exact up to rounding amplified by the
    arccos, |d arccos r| = |dr| / √(1 − r²), so the bound is a few ε‖D‖_F / √(1 − r²) (capped at
    √ε near a double eigenvalue); diagonal and exactly repeated cases are exact."""
    rng = np.random.default_rng(95)
    A = rng.normal(size=(40, 50, 3, 3)) * rng.lognormal(0, 2, size=(40, 50, 1, 1))
    D = A + np.swapaxes(A, -1, -2)
    D[0, 0] = 2.0 * np.eye(3)
    D[0, 1] = np.diag([1.0, 1.0, -3.0])
    D[0, 2] = np.eye(3) + 1e-9 * D[1, 2]  # nearly a triple eigenvalue
    D[0, 3] = np.diag([4.0, -4.0, 1.0])
    got = routing.spectral_norm(D)
    lam = np.linalg.eigvalsh(D)
    ref = np.abs(lam).max(-1)
    eps = np.finfo(float).eps
    q = np.trace(D, axis1=-2, axis2=-1) / 3
    B = D - q[..., None, None] * np.eye(3)
    pp = np.sqrt((B ** 2).sum((-2, -1)) / 6)
    r = np.clip(np.linalg.det(B / np.where(pp > 0, pp, 1)[..., None, None]) / 2, -1, 1)
    fro = np.sqrt((D ** 2).sum((-2, -1)))
    bound = 16 * eps * fro / np.sqrt(np.maximum(1 - r ** 2, eps)) + 4 * eps * ref
    assert np.all(np.abs(got - ref) <= bound), float(np.max(np.abs(got - ref) / bound))
    np.testing.assert_array_equal(got[0, :2], [2.0, 3.0])
    assert got[0, 3] == 4.0


def test_row_sum_workspace_keeps_two_shapes():
    """The row-sum workspace of the fused pass keeps the arrays of the last two shapes (calls
    alternating between two sizes reuse them) and drops older ones."""
    a = workspace._row_sum_arrays(2, 3, 40, 3)
    b = workspace._row_sum_arrays(1, 2, 50, 3)
    assert workspace._row_sum_arrays(2, 3, 40, 3)[0] is a[0]
    assert workspace._row_sum_arrays(1, 2, 50, 3)[1] is b[1]
    assert a[1].shape == (2, 3, 40, 3) and b[0].shape == (1, 2, 50)
    workspace._row_sum_arrays(3, 1, 30, 3)  # a third shape: the least recent (2, 3, 40) goes
    assert workspace._row_sum_arrays(1, 2, 50, 3)[0] is b[0]
    assert workspace._row_sum_arrays(2, 3, 40, 3)[0] is not a[0]


@pytest.mark.parametrize("opts", ["_NOALIAS", "_ALIGNED"])
def test_kernel_pipeline_aligns_the_frame(opts):
    """The hot loop kernels are compiled with their stack frame aligned to one AVX-512 register
    (LLVM ``alignstack``, :func:`wflow.kernels.target._kernel_pipeline`): their vector spills
    are then aligned whatever the caller's stack depth. This numba supports the hook, and a
    function compiled with it carries the attribute and computes the same result."""
    from numba import njit

    kw = getattr(target, opts)
    assert kw, "numba lost the lowering hook: the kernels' spills are unaligned again"

    def f(a, b):
        s = 0.0
        for i in range(a.size):
            s += a[i] * b[i]
        return s

    g = njit(error_model="numpy", **kw)(f)
    a, b = np.arange(5.0), np.ones(5)
    assert g(a, b) == f(a, b) == 10.0
    ir = g.inspect_llvm(g.signatures[0])
    assert f"alignstack={target._STACK_ALIGN}" in ir or f"alignstack({target._STACK_ALIGN})" in ir


def test_forced_routes_and_their_conditions():
    """``route=`` forces a route where its conditions hold: the three symmetric forms give the
    same bits, the row pass agrees within twice the conditioning bound; a route whose
    conditions fail is refused. The plan from shapes names the route the pass takes."""
    rng = np.random.default_rng(99)
    X, D, V = make_case(rng, 2, 61, 3, 3)
    lap = np.array([True, False, False])
    natural = K.plan(X, D, 1.0, single=False, fast_exp=True, U=None, causal=False, threads=1)
    assert natural.route is K.Route.SYM3 and natural.band_count == 1
    assert K.plan_shapes(61, 3, 3, 2).route is natural.route
    a = K.fused_pass(X, D, V, 1.0, "joint", lap, False, False)
    for route in ("sym3", K.Route.SYM3_CHAIN):
        b = K.fused_pass(X, D, V, 1.0, K.Norm.JOINT, lap, False, False, route=route)
        for name, x, y in zip(NAMES, a, b):
            np.testing.assert_array_equal(x, y, err_msg=name)
    b = K.fused_pass(X, D, V, 1.0, 1, lap, False, False, route="rows")
    check_agree(a, b, X, D, V, 1.0, 1, lap, False, False)
    for route, kw in (("sym3", {"causal": True}), ("sym3-bands", {}), ("rows32", {}),
                      ("sym3", {"weights": np.full(61, 1 / 61)})):
        kw = {"causal": False, **kw}
        causal = kw.pop("causal")
        with pytest.raises(ValueError, match="route"):
            K.fused_pass(X, D, V, 1.0, 1, lap, causal, False, route=route, **kw)
    with pytest.raises(ValueError):
        K.fused_pass(X, D, V, 1.0, 1, lap, False, False, route="nope")
    assert K.plan_shapes(2000, 3, 8).route is K.Route.SYM3_BANDS
    assert K.plan_shapes(50, 3, 2, single=True).route is K.Route.ROWS32
    assert K.plan_shapes(50, 3, 2, single=True, weighted=True).route is K.Route.ROWS
    assert K.plan_shapes(50, 3, 2, causal=True).route is K.Route.ROWS


def test_norm_names_and_codes():
    """The normalisation is a :class:`Norm`, its lower-case name or its code."""
    assert [K.Norm.of(s) for s in ("head", "joint", "none")] == [0, 1, 2]
    assert K.Norm.of(2) is K.Norm.NONE and K.Norm.of(K.Norm.JOINT) is K.Norm.JOINT
    for bad in ("rows", 3):
        with pytest.raises(ValueError):
            K.Norm.of(bad)


def test_cache_guard_stamps_every_kernel_with_the_package():
    """numba's cache of a kernel is keyed by its own file's source and by a digest of every
    module of the package (a cached kernel links and inlines code of other modules)."""
    from numba.core import caching

    from wflow.kernels import _cache

    assert caching.CacheImpl._locator_classes[0] is _cache.PackageLocator
    stamp = exp._exp_fast._cache._cache_file._source_stamp
    assert isinstance(stamp, tuple) and stamp[1] == _cache.package_digest()
