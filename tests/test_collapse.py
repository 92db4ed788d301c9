"""Collapsing converged clusters (``wflow.studies._collapse``): the weighted field against the
full field of coincident tokens and wflow's attention with key biases, the merged fraction
from the reduced state, and the escape time against the full system."""

import copy

import numpy as np
import pytest

from wflow.model.attention import attention_update
from wflow.studies._collapse import escape_time, merged_fraction, study_tokens, weighted_field


def _unit(rng, n, d):
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


@pytest.mark.parametrize("d", [2, 3, 5])
def test_weighted_field_is_the_full_field_of_coincident_tokens(d):
    """Tokens stacked m_k at each of K points: the full field (all masses 1) at each copy is
    the weighted field of the K points with masses m_k, to round-off (softmax sums of ≤ 32
    terms of size ≤ 1: 1e-14); and it is wflow's attention with key biases log m_k, projected."""
    rng = np.random.default_rng(3)
    K, beta = 6, 7.0
    Y = _unit(rng, K, d)
    m = np.array([1, 4, 2, 7, 3, 5])
    idx = np.repeat(np.arange(K), m)
    full = weighted_field(Y[idx], np.ones(idx.size), beta)
    red = weighted_field(Y, m, beta)
    np.testing.assert_allclose(full, red[idx], rtol=0, atol=1e-14)
    u = attention_update(Y, np.eye(d)[None], np.eye(d)[None], beta=beta, key_bias=np.log(m))
    ref = u - np.sum(u * Y, axis=1, keepdims=True) * Y
    np.testing.assert_allclose(red, ref, rtol=0, atol=1e-14)


def test_merged_fraction_counts_the_pairs_of_the_full_system():
    rng = np.random.default_rng(5)
    Y = _unit(rng, 5, 3)
    Y[1] = Y[0] + 1e-3 * _unit(rng, 1, 3)[0]
    Y[1] /= np.linalg.norm(Y[1])  # cosine ≈ 1 − 5e-7 > 0.999 with Y[0]
    m = np.array([3, 2, 4, 1, 6])
    X = np.repeat(Y, m, axis=0)
    n = len(X)
    count = np.sum(X @ X.T > 0.999) - n
    assert merged_fraction(Y, m) == pytest.approx(count / (n * (n - 1)), abs=1e-15)


@pytest.mark.parametrize("d, beta, seed", [(2, 4.0, 3), pytest.param(2, 5.0, 3, marks=pytest.mark.slow),
                                           pytest.param(3, 4.0, 5, marks=pytest.mark.slow), (3, 5.0, 3)])
def test_collapsed_escape_time_is_the_full_systems(d, beta, seed):
    """n = 12 uniform tokens: τ with collapse (δ = 1e-13) against the full system (no merging),
    both DOP853 at rtol = 1e-10: relative agreement 1e-7 (the tolerance, amplified by the
    plateau); δ = 1e-11 moves τ by < 1e-7 too."""
    X0 = _unit(np.random.default_rng(seed), 12, d)
    full = escape_time(X0, beta, T=1e4, collapse=False)
    red = escape_time(X0, beta, T=1e4)
    assert np.isfinite(full["tau"]) and np.isfinite(red["t_collapsed"])
    assert red["tau"] == pytest.approx(full["tau"], rel=1e-7)
    assert escape_time(X0, beta, T=1e4, delta=1e-11)["tau"] == pytest.approx(red["tau"], rel=1e-7)


@pytest.mark.slow
def test_collapsed_escape_time_is_wflows_on_the_study_systems():
    """The study's S¹ systems at β = 5: wflow's full solver (dopri5, rtol = atol = 1e-9)
    against the collapsed τ, relative 1e-6."""
    from wflow.engine.run import simulate
    from wflow.studies import StudyOptions, get_study

    cfg = copy.deepcopy(dict(get_study("metastability").tasks(StudyOptions(scale="full")))
                        ["meta-d2-b5"])
    cfg["solver"].update(method="dopri5", rtol=1e-9, atol=1e-9, T=3000.0, paths=4,
                         event_tol=1e-8)
    ref = np.asarray(simulate(cfg)["event_time"], dtype=float)[-1]
    X = study_tokens(2, 5.0, 4)
    new = np.array([escape_time(X[p], 5.0, T=3000.0)["tau"] for p in range(4)])
    fin = ref <= 3000.0
    assert np.all(np.isfinite(new) == fin)
    np.testing.assert_allclose(new[fin], ref[fin], rtol=1e-6)
