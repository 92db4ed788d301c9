"""The radial part ρ_i = ⟨x_i, u_i⟩ of the output before the projection [model §1c] from the
row sums of the field pass: against the dense NumPy twin on every route of the kernels
(symmetric d = 3 in its three forms, the float64 and float32 row passes, the BLAS pair pass
and its matmul combine, the key-bias and factored passes), for general D, the causal mask,
Laplacian heads, untied values, point masses, the three normalisations and summed heads; the
other outputs of the pass unchanged by it; its bits independent of the thread count; and a
placement step that never forms the dense (H, n, n) softmax."""

import numba
import numpy as np
import pytest

from wflow import kernels as K
from wflow.geometry import sphere
from wflow.kernels import reference as R
from wflow.model import layernorm
from wflow.model.attention import AttentionModel, Factored


def _case(seed, P, n, d, H, general=False, scale=1.0):
    rng = np.random.default_rng(seed)
    X = sphere.normalize(rng.standard_normal((P, n, d)))
    D = scale * rng.standard_normal((P, H, d, d)) / np.sqrt(d)
    if not general:
        D = 0.5 * (D + np.swapaxes(D, -1, -2))
    V = rng.standard_normal((P, H, d, d)) / np.sqrt(d)
    return X, D, V


def _dense(X, D, V, beta, norm, lap, causal, weights=None, interaction="symmetric",
           key_bias=None):
    """ρ path by path from the dense reference (V None: tied)."""
    H = D.shape[1]
    laps = tuple(int(h) for h in np.flatnonzero(lap))
    return np.stack([R.field_reference(
        X[p], D[p], beta, norm, laps, causal, None if V is None else V[p],
        weights=None if weights is None else weights[p], interaction=interaction,
        key_bias=None if key_bias is None else key_bias[p])["radial"] for p in range(len(X))]
    ) if H else None


def _tol(rho_ref, rel):
    return rel * max(1.0, np.abs(rho_ref).max())


# (route, n, d, H, P, float32): each forced route where its conditions hold
ROUTES = [("sym3", 40, 3, 3, 2, False), ("sym3-chain", 40, 3, 3, 2, False),
          ("sym3-bands", 1024, 3, 2, 1, False), ("rows", 37, 3, 3, 2, False),
          ("rows", 30, 5, 2, 2, False), ("rows32", 45, 3, 3, 2, True),
          ("blas", 64, 8, 2, 1, False), ("blas-combine", 64, 40, 2, 1, False)]


@pytest.mark.parametrize("route,n,d,H,P,single", ROUTES)
@pytest.mark.parametrize("norm", ["head", "joint", "none"])
def test_radial_on_every_route_is_the_dense_twin(route, n, d, H, P, single, norm):
    """ρ of the pass (tied values, the route forced) against the dense reference; the
    float32 pair loop within its ~1e-6; the velocity and partition with it are the pass's."""
    X, D, _ = _case(1, P, n, d, H)
    lap = np.zeros(H, dtype=bool)
    rho = np.full((P, n), np.nan)
    Xk = X.astype(np.float32) if single else X
    out = K.fused_pass(Xk, D, None, 1.2, norm, lap, False, True, route=route, radial=rho)
    ref = _dense(X, D, None, 1.2, norm, lap, False)
    np.testing.assert_allclose(rho, ref, rtol=0, atol=_tol(ref, 2e-5 if single else 1e-12))
    plain = K.fused_pass(Xk, D, None, 1.2, norm, lap, False, True, route=route)
    for name, a, b in zip(K.FieldPass._fields, out, plain):
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_symmetric_pass_keeps_its_bits_with_the_radial_part():
    """With ρ requested the symmetric pass runs in its chained form: every output has the
    bits of the fused form (the route the same call takes without ρ)."""
    X, D, _ = _case(2, 3, 64, 3, 4)
    lap = np.zeros(4, dtype=bool)
    rho = np.empty((3, 64))
    fast = K.fused_pass(X, D, None, 1.0, "head", lap, False, True, route="sym3")
    with_rho = K.fused_pass(X, D, None, 1.0, "head", lap, False, True, radial=rho)
    for name, a, b in zip(K.FieldPass._fields, fast, with_rho):
        np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.parametrize("norm,laps,causal,general,tied,weighted", [
    ("head", (1,), False, False, False, False),
    ("joint", (0, 2), False, True, False, False),
    ("none", (), True, True, False, False),
    ("head", (2,), True, False, True, False),
    ("none", (1,), False, False, False, True),
    ("joint", (), False, True, True, True),
])
@pytest.mark.parametrize("d,n", [(3, 33), (6, 29), (12, 220)])
def test_radial_general_masked_laplacian_untied_weighted(norm, laps, causal, general, tied,
                                                         weighted, d, n):
    """The pass's ρ against the dense reference for general D, the causal mask, Laplacian
    heads, untied values and point masses (d = 3 row pass, generic d, the BLAS route)."""
    P, H = 2, 3
    X, D, V = _case(3, P, n, d, H, general=general)
    lap = np.zeros(H, dtype=bool)
    lap[list(laps)] = True
    w = None
    if weighted:
        w = np.random.default_rng(4).uniform(0.0, 2.0, (P, n))
        w /= w.sum(axis=1, keepdims=True)
    rho = np.empty((P, n))
    K.fused_pass(X, D, None if tied else V, 0.9, norm, lap, causal, tied, weights=w,
                 interaction="general" if general else "symmetric", radial=rho)
    ref = _dense(X, D, None if tied else V, 0.9, norm, lap, causal, weights=w,
                 interaction="general" if general else "symmetric")
    np.testing.assert_allclose(rho, ref, rtol=0, atol=_tol(ref, 1e-12))


@pytest.mark.parametrize("norm", ["head", "joint", "none"])
def test_radial_with_key_bias(norm):
    """The key-bias pass combines the heads' ρ_h as their outputs [model §1b]."""
    P, n, d, H = 2, 31, 4, 3
    X, D, V = _case(5, P, n, d, H, general=True)
    kb = np.random.default_rng(6).standard_normal((P, H, n))
    lap = np.array([False, True, False])
    rho = np.empty((P, n))
    K.fused_pass(X, D, V, 1.1, norm, lap, False, False, interaction="general", key_bias=kb,
                 radial=rho)
    ref = _dense(X, D, V, 1.1, norm, lap, False, interaction="general", key_bias=kb)
    np.testing.assert_allclose(rho, ref, rtol=0, atol=_tol(ref, 1e-12))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("combine,norm", [("mean", "joint"), ("sum", "none"), ("sum", "head")])
def test_model_output_factored_and_summed(backend, combine, norm):
    """:meth:`AttentionModel.output` with a factored D of rank r < d (the factored pass)
    and summed heads: v and ρ are those of the dense reference, u = v + ρx."""
    P, n, d, H, r = 2, 26, 6, 3, 2
    rng = np.random.default_rng(8)
    X = sphere.normalize(rng.standard_normal((P, n, d)))
    DF = Factored(rng.standard_normal((P, H, r, d)), rng.standard_normal((P, H, r, d)), 2.0)
    V = rng.standard_normal((H, d, d)) / np.sqrt(d)
    model = AttentionModel(beta=0.8, normalization=norm, laplacian_heads=(1,), values=V,
                           backend=backend, interaction="general", head_combine=combine)
    v, rho = model.output(X, DF)
    Dd = DF.dense()
    refs = [R.field_reference(X[p], Dd[p], 0.8, norm, (1,), False, V, interaction="general",
                              head_combine=combine) for p in range(P)]
    ref = np.stack([x["radial"] for x in refs])
    np.testing.assert_allclose(rho, ref, rtol=0, atol=_tol(ref, 1e-12))
    np.testing.assert_allclose(v, np.stack([x["velocity"] for x in refs]), rtol=0,
                               atol=1e-12 * max(1.0, np.abs(v).max()))


@pytest.mark.parametrize("params", [
    dict(normalization="head"),
    dict(normalization="joint", laplacian_heads=(0,)),
    dict(normalization="none", causal=True, head_combine="sum"),
    dict(normalization="head", interaction="general", head_combine="sum"),
    dict(normalization="joint", precision="float32"),
])
def test_layernorm_radial_is_the_dense_twin(params):
    """:func:`layernorm.radial` (the model's pass) against :func:`layernorm.radial_reference`
    (dense NumPy), and :func:`layernorm.output` = v + ρx with P_x u = v."""
    general = params.get("interaction") == "general"
    X, D, V = _case(9, 2, 50, 3, 4, general=general)
    model = AttentionModel(beta=1.4, values=V[0], **params)
    rho = layernorm.radial(model, X, D)
    ref = layernorm.radial_reference(model, X, D)
    rel = 2e-5 if params.get("precision") == "float32" else 1e-12
    np.testing.assert_allclose(rho, ref, rtol=0, atol=_tol(ref, rel))
    u = layernorm.output(model, X, D)
    # (float32: the pass projects onto the tokens rounded to float32)
    tol = (1e-6 if params.get("precision") == "float32" else 1e-13) * np.abs(u).max()
    np.testing.assert_allclose(sphere.project(X, u), model.velocity(X, D), rtol=0, atol=tol)
    np.testing.assert_allclose(np.einsum("pia,pia->pi", u, X), rho, rtol=0, atol=tol)


@pytest.mark.parametrize("d,n,single", [(3, 200, False), (3, 301, False), (3, 120, True),
                                        (8, 301, False), (40, 256, False)])
def test_radial_bits_independent_of_threads(d, n, single):
    """ρ bit-identical with 1 and 2 threads (symmetric pass, row passes, BLAS routes)."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("a single thread available")
    X, D, V = _case(10, 3, n, d, 4)
    Xk = X.astype(np.float32) if single else X
    lap = np.array([False, True, False, False])
    old = numba.get_num_threads()
    res = {}
    try:
        for nt in (1, 2):
            numba.set_num_threads(nt)
            res[nt] = []
            for norm in ("head", "joint"):
                for tied in (True, False):
                    rho = np.empty((3, n))
                    K.fused_pass(Xk, D, V, 1.0, norm, lap, False, tied, radial=rho)
                    res[nt].append(rho)
    finally:
        numba.set_num_threads(old)
    for a, b in zip(res[1], res[2]):
        np.testing.assert_array_equal(a, b)


def test_placement_output_forms_no_dense_softmax(monkeypatch):
    """A placement's output u on the numba backend comes from the field pass: the dense
    (H, n, n) logits of the reference are never formed."""
    X, D, _ = _case(11, 2, 40, 3, 3)
    model = AttentionModel(beta=1.0)
    want = layernorm.output(model, X, D)

    def dense(*a, **k):
        raise AssertionError("the dense reference was called")

    monkeypatch.setattr(R, "_logits", dense)
    np.testing.assert_array_equal(layernorm.output(model, X, D), want)


def test_radial_bad_array():
    """An output array of the wrong shape or type is refused, naming ``radial``."""
    X, D, _ = _case(12, 1, 10, 3, 2)
    lap = np.zeros(2, dtype=bool)
    for bad in (np.empty((1, 9)), np.empty((1, 10), dtype=np.float32), np.empty((1, 20))[:, ::2]):
        with pytest.raises(ValueError, match="radial"):
            K.fused_pass(X, D, None, 1.0, "head", lap, False, True, radial=bad)


def test_placements_suite_rows():
    """The benchmark suite's rows (quick): one per placement against post-LN, in the
    results schema, with the goal ≤ 1.3 and positive times."""
    from benchmarks import results
    from benchmarks.placements import PLACEMENTS, placements_suite
    from benchmarks.suites import DEFAULT_SUITES, SUITES

    assert SUITES["placements"] is placements_suite and "placements" in DEFAULT_SUITES
    rows = placements_suite(quick=True, repeats=1)
    res = results.new_result(("placements",))
    res["rows"] = rows
    results.validate(res)
    assert [r["what"] for r in rows] == [f"time per step: {p} ÷ post" for p in PLACEMENTS]
    for r in rows:
        assert r["suite"] == "placements" and r["goal"] == "≤ 1.3"
        assert r["ratio"] > 0 and r["seconds"] > 0 and r["data"]["post_step_s"] > 0
