"""wflow.lab.bench: the benchmark runs and its table has the expected shape (no timing checks)."""

from __future__ import annotations

import numpy as np
import pytest

from wflow import kernels as _kernels
from wflow.lab.bench import COLUMNS, TINY_CASES, format_table, numpy_dense_field, run_bench


@pytest.fixture
def quick_exp_rate(monkeypatch):
    """run_bench's exponential-rate measurement over ~0.02 s instead of ~0.3 s (the tests
    check that the rate and the fraction of it are reported, not their values)."""
    real = _kernels.fast_exp_rate
    monkeypatch.setattr(_kernels, "fast_exp_rate", lambda seconds=0.02: real(seconds=seconds))


def test_run_bench_tiny(quick_exp_rate):
    rows = run_bench(tiny=True, torch=False)
    assert len(rows) == 4 * len(TINY_CASES)
    for r in rows:
        assert set(COLUMNS) <= set(r)
    impls = [r["impl"] for r in rows]
    assert impls == ["wflow", "wflow, no Itô", "numpy", "torch"] * len(TINY_CASES)
    for r in rows:
        if r["impl"] == "torch":
            assert r["status"].startswith("skipped")
        else:
            assert r["status"] == "ok"
            assert r["time_per_step_s"] > 0
            assert r["pair_heads_per_s"] > 0
    for r in rows[2::4]:  # the numpy baseline agrees with the kernel
        assert r["max_rel_diff_velocity"] < 1e-10
    for r in rows[1::4]:  # the velocity does not depend on the Itô sum
        assert r["max_rel_diff_velocity"] == 0.0
    for r in rows[0::4] + rows[1::4]:
        assert r["wflow_speedup_vs_numpy"] > 0
        assert r["exp_rate"] > 0 and r["exp_bound_fraction"] > 0
    table = format_table(rows)
    header = table.splitlines()[0]
    for col in ("case", "impl", "time/step", "pair-heads/s", "wflow vs numpy", "wflow vs torch",
                "traced MB", "maxrss MB", "status", "of exp bound"):
        assert col in header
    assert len(table.splitlines()) >= 2 + len(rows)


def test_skip_rule_for_large_dense():
    """n = 100 000 (seconds even for the kernel): the dense baselines are skipped."""
    from wflow.lab import bench

    assert bench._numpy_bytes(100_000, 4, 3, 1) > bench.DENSE_LIMIT_BYTES
    assert bench._torch_bytes(100_000, 4, 3, 1) > bench.DENSE_LIMIT_BYTES
    assert bench._numpy_bytes(4096, 8, 3, 1) < bench.DENSE_LIMIT_BYTES


def test_explicit_cases_and_formatting(quick_exp_rate):
    rows = run_bench(cases=[(40, 2, 3)], torch=True, repeats=1)
    assert [r["impl"] for r in rows] == ["wflow", "wflow, no Itô", "numpy", "torch"]
    assert rows[0]["P"] == 1
    assert rows[3]["status"].startswith(("ok", "skipped"))
    assert "(40, 2, 3) P=1" in format_table(rows)


def test_numpy_dense_matches_kernel():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2, 30, 3))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    A = rng.normal(size=(2, 3, 3, 3))
    D = A + np.swapaxes(A, -1, -2)
    a = numpy_dense_field(X, D, 1.0)
    b = _kernels.fused_pass(X, D, None, 1.0, 0, np.zeros(3, bool), False, True)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-11, atol=1e-13)


def test_time_section6_smoke():
    from wflow.lab.bench import time_section6

    rows = time_section6(heads=(2,), T=0.025, paths=1)
    assert len(rows) == 1
    r = rows[0]
    assert r["H"] == 2 and r["steps"] == 5 and r["seconds"] > 0
    assert r["projected_seconds_T_full"] > r["seconds"]


def test_fast_exp_rate_positive():
    assert _kernels.fast_exp_rate(seconds=0.05) > 0


def test_busy_neighbour_stops_by_itself():
    import subprocess
    import sys

    from wflow.lab import contention

    subprocess.run([sys.executable, "-c", contention._BUSY, "0.2"], check=True, timeout=60)


def test_contention_table_format():
    from wflow.lab.contention import format_contention_table

    rows = [{"case": "alone", "seconds": 2.0, "ratio": 1.0, "goal": float("nan"), "against": ""},
            {"case": "beside 1 busy process", "seconds": 3.0, "ratio": 1.5, "goal": 1.8,
             "against": "alone", "load_before": 0.5}]
    text = format_contention_table(rows, T=20.0)
    assert "beside 1 busy process" in text and "≤1.80" in text and "1.50x" in text


@pytest.mark.slow
def test_contention_bench_smoke():
    """Every case runs (fresh processes, tiny T); no timing assertion."""
    from wflow.lab.contention import contention_bench

    rows = contention_bench(T=0.05, ks=(1,), neighbour_seconds=60)
    assert [r["case"] for r in rows] == ["alone", "alone, OMP_WAIT_POLICY=active",
                                         "beside 1 busy process", "3 runs in a row",
                                         "3 runs started together"]
    assert all(r["seconds"] > 0 for r in rows)


def test_paired_rates_small_cases():
    """The paired measurement of the two #10 ratios runs on small cases and reports medians
    inside their quartiles (no timing checks)."""
    from wflow.lab.bench import format_paired, paired_rates

    res = paired_rates(cases=((40, 3, 3, 2), (96, 2, 3)), rounds=3, exp_seconds=0.005)
    assert res["rounds"] == 3 and res["cases"] == [(40, 3, 3, 2), (96, 2, 3, 1)]
    for key in ("ratio_ab", "ratio_b_exp"):
        lo, hi = res[key + "_q"]
        assert 0 < lo <= res[key] <= hi
    assert min(res["rate_a"], res["rate_b"], res["exp_rate"]) > 0
    text = format_paired(res)
    assert "(40, 3, 3) P=2 ÷ (96, 2, 3) P=1 pair rate" in text and "goal ≥ 0.9" in text
