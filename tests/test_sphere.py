"""Sphere geometry: maps are inverse, distances exact, samplers on the sphere with the right law."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from wflow.geometry import sphere


def _pts(seed, n=50, d=4):
    return sphere.uniform(n, d, np.random.default_rng(seed))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.integers(2, 6), st.floats(1e-9, 3.1))
def test_exp_log_inverse(seed, d, r):
    rng = np.random.default_rng(seed)
    X = sphere.uniform(20, d, rng)
    U = sphere.project(X, rng.standard_normal((20, d)))
    U = r * U / np.linalg.norm(U, axis=1, keepdims=True)
    Y = sphere.exp_map(X, U)
    np.testing.assert_allclose(np.linalg.norm(Y, axis=1), 1, atol=1e-14)
    np.testing.assert_allclose(sphere.geodesic_distance(X, Y), r, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(sphere.log_map(X, Y), U, atol=1e-8 * max(1, r))


def test_small_angles_and_antipodes():
    X = _pts(1)
    U = sphere.project(X, np.random.default_rng(2).standard_normal(X.shape)) * 1e-12
    Y = sphere.exp_map(X, U)
    np.testing.assert_allclose(sphere.log_map(X, Y), U, rtol=0, atol=1e-15)
    np.testing.assert_allclose(sphere.geodesic_distance(X, Y), np.linalg.norm(U, axis=1), rtol=0, atol=1e-15)
    L = sphere.log_map(X, -X)
    np.testing.assert_allclose(np.linalg.norm(L, axis=1), np.pi, rtol=1e-12)
    np.testing.assert_allclose(np.sum(L * X, axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(sphere.geodesic_distance(X, -X), np.pi)


def test_retraction_second_order_agreement_with_exp():
    X = _pts(3)
    U = sphere.project(X, np.random.default_rng(4).standard_normal(X.shape))
    errs = [np.max(np.abs(sphere.retract(X, h * U) - sphere.exp_map(X, h * U))) for h in (1e-2, 5e-3)]
    assert 6 < errs[0] / errs[1] < 10  # O(h³) difference


def test_projection_tangent_and_idempotent():
    X = _pts(5)
    V = np.random.default_rng(6).standard_normal(X.shape)
    PV = sphere.project(X, V)
    np.testing.assert_allclose(np.sum(PV * X, 1), 0, atol=1e-15)
    np.testing.assert_allclose(sphere.project(X, PV), PV, atol=1e-15)


def test_uniform_moments():
    X = sphere.uniform(200_000, 3, np.random.default_rng(7))
    # E[x] = 0, E[x xᵀ] = I/d; standard errors ~ 1/sqrt(3N) and sqrt(4/45/N)
    assert np.max(np.abs(X.mean(0))) < 5 / np.sqrt(3 * 200_000)
    np.testing.assert_allclose(X.T @ X / len(X), np.eye(3) / 3, atol=5 * np.sqrt(4 / 45 / 200_000))


def test_vmf_mean_resultant():
    """E⟨μ, x⟩ = coth κ − 1/κ on S² (vMF)."""
    mu = np.array([0.0, 0.0, 1.0])
    for kappa in (0.5, 5.0, 50.0):
        X = sphere.von_mises_fisher(100_000, mu, kappa, np.random.default_rng(8))
        np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1, atol=1e-14)
        w = X @ mu
        expected = 1 / np.tanh(kappa) - 1 / kappa
        assert abs(w.mean() - expected) < 5 * w.std() / np.sqrt(len(w))


def test_octahedral():
    rng = np.random.default_rng(9)
    X = sphere.octahedral(6000, 3, rng, noise=0.05)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1, atol=1e-14)
    # every token is close to one of the six vertices, and each vertex gets ~1/6
    V = np.vstack([np.eye(3), -np.eye(3)])
    near = np.argmax(X @ V.T, axis=1)
    assert np.min(np.max(X @ V.T, axis=1)) > 0.8
    counts = np.bincount(near, minlength=6) / len(X)
    assert np.max(np.abs(counts - 1 / 6)) < 5 * np.sqrt(1 / 6 * 5 / 6 / 6000)
    X0 = sphere.octahedral(5, 3, rng, noise=0.0)
    assert np.all(np.isin(np.round(np.abs(X0)), [0.0, 1.0]))
