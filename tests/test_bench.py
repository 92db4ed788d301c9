"""``wflow bench`` and the benchmark suite (``benchmarks/``): the baselines agree with the
kernel, the suites produce rows of the results schema, a result round-trips through its JSON
file, the table renders and ``docs/performance.md`` shows the newest saved result. No timing
checks: speed is what the benchmarks themselves report, as ratios."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import wflow
from benchmarks import internals, results, suites
from benchmarks.run import run
from wflow.cli.bench import (
    case_arrays,
    dense_attention,
    format_quick_table,
    import_torch,
    numpy_dense_field,
    quick_bench,
    torch_sdpa,
)

TINY = ((40, 3, 3, 2), (24, 2, 8, 1))


@pytest.mark.parametrize("case", TINY)
def test_numpy_twin_matches_kernel(case):
    X, D = case_arrays(case, np.random.default_rng(0))
    twin = numpy_dense_field(X, D, 1.0)
    fast = wflow.AttentionModel(beta=1.0).evaluate(X, D)
    names = ("velocity", "partition", "gradient", "b_hat", "energy", "dissipation", "G2",
             "G2_hm", "dE_dD", "ito_sum")
    for name, a in zip(names, twin):
        np.testing.assert_allclose(a, getattr(fast, name), rtol=1e-11, atol=1e-13, err_msg=name)


def test_torch_baseline_matches_dense_softmax():
    torch, _ = import_torch()
    if torch is None:
        pytest.skip("torch not installed (the bench extra)")
    X, D = case_arrays((30, 2, 3, 2), np.random.default_rng(1))
    with torch.no_grad():
        a = torch_sdpa(torch, X, D, 1.0).numpy()
    for p in range(2):
        np.testing.assert_allclose(a[p], dense_attention(X[p], D[p], 1.0), rtol=1e-10, atol=1e-12)


def test_quick_bench_table():
    rows = quick_bench(cases=TINY, torch=False, repeats=1)
    assert [r["case"] for r in rows] == ["(40, 3, 3) P=2", "(24, 2, 8) P=1"]
    for r in rows:
        assert r["wflow_s"] > 0 and r["numpy_ratio"] > 0 and r["rel_diff"] < 1e-10
        assert r["torch_s"] is None and r["torch_ratio"] is None
    text = format_quick_table(rows)
    header = text.splitlines()[0]
    for col in ("case (n, H, d)", "wflow", "numpy twin", "numpy ÷ wflow", "torch ÷ wflow"):
        assert col in header
    assert "(24, 2, 8) P=1" in text and "torch left out" in text


def _check_rows(rows):
    for r in rows:
        assert tuple(r) == results.SCHEMA["row"]
        assert r["ratio"] is None or r["ratio"] > 0
        json.dumps(r, allow_nan=False)  # strict JSON


def test_field_suite_rows():
    rows = suites.field_suite(cases=TINY, torch=False, repeats=1)
    _check_rows(rows)
    assert [r["what"] for r in rows[:2]] == ["time: numpy twin ÷ wflow",
                                             "time: wflow ÷ wflow without Itô sum"]
    assert len(rows) == 2 * len(TINY) + 1
    for numpy_row, ito_row in zip(rows[0:-1:2], rows[1:-1:2]):
        assert numpy_row["status"] == "ok" and numpy_row["data"]["rel_diff_v"] < 1e-10
        assert ito_row["data"]["rel_diff_v"] == 0.0  # v does not depend on the Itô sum
    assert rows[-1]["case"] == "every case" and rows[-1]["status"] == "skipped: torch left out"


def test_field_suite_with_torch():
    torch, _ = import_torch()
    if torch is None:
        pytest.skip("torch not installed (the bench extra)")
    rows = suites.field_suite(cases=TINY[:1], repeats=1)
    assert [r["what"] for r in rows] == ["time: numpy twin ÷ wflow", "time: torch SDPA ÷ wflow",
                                         "time: wflow ÷ wflow without Itô sum"]
    assert rows[1]["ratio"] > 0 and rows[1]["data"]["rel_diff_a"] < 1e-10


def test_dense_baselines_skipped_where_they_do_not_fit(monkeypatch):
    monkeypatch.setattr(suites, "DENSE_LIMIT_BYTES", 1.0)
    rows = suites.field_suite(cases=TINY[:1], torch=False, repeats=1)
    assert rows[0]["status"].startswith("skipped: n×n arrays") and rows[0]["ratio"] is None
    assert rows[1]["ratio"] > 0


def test_routes_agree_and_name_the_kernel_choice():
    rows = suites.routes_suite(quick=True, repeats=1)
    _check_rows(rows)
    assert [r["data"]["route"] for r in rows] == ["sym", "blas"]
    assert rows[0]["data"]["taken_by_kernel"] == "sym"
    for r in rows:
        assert r["data"]["rel_diff_v"] < 1e-10


def test_fused_pass_adapter_forces_each_route():
    X, D = case_arrays((16, 2, 3, 1), np.random.default_rng(2))
    v = [internals.fused_pass(X, D, route=r)[0] for r in internals.ROUTES]
    for w in v[1:]:
        np.testing.assert_allclose(w, v[0], rtol=1e-10, atol=1e-14)
    with pytest.raises(ValueError, match="route"):
        internals.fused_pass(X, D, route="fast")
    assert internals.route_taken(X, D) == "sym"
    assert internals.exp_rate(0.005) > 0


def test_paired_medians_inside_quartiles():
    rows = suites.paired_suite(quick=True)
    _check_rows(rows)
    assert rows[0]["case"] == "(40, 3, 3) P=2 ÷ (96, 2, 3) P=1"
    for r in rows:
        lo, hi = r["ratio_q"]
        assert 0 < lo <= r["ratio"] <= hi and r["goal"] == "≥ 0.9"


def test_noise_suite_quick_steps_on_the_one_substep_density_step():
    rows = suites.noise_suite(quick=True, steps=1, repeats=1)
    _check_rows(rows)
    assert [r["suite"] for r in rows] == ["noise"] * 3
    assert rows[0]["goal"] == "≤ 1.05" and rows[1]["goal"] == rows[2]["goal"] == "≤ 1.5"
    # the explicit row is timed where the diffusive step takes one CFL substep, as its
    # noiseless twin does; the split row at the transport's step
    assert rows[1]["data"]["substeps"] == [1, 1] and rows[1]["data"]["dt"] <= 0.0025
    assert rows[2]["data"]["dt"] == 0.0025
    assert all(r["ratio"] > 0 for r in rows)


def test_section6_suite_quick():
    rows = suites.section6_suite(quick=True)
    _check_rows(rows)
    assert [r["what"] for r in rows] == ["end to end, ledger off", "end to end, ledger on"]
    assert all(r["seconds"] > 0 and r["data"]["tasks_s"] for r in rows)


def test_result_round_trip(tmp_path):
    res = run(("steps",), quick=True, note="a test")
    assert tuple(res) == results.SCHEMA["result"]
    assert res["rows"][0]["suite"] == "steps" and res["seconds"] > 0
    res["rows"].append(results.row("field", "(1, 1, 3) P=1", "nothing", float("nan"),
                                   ratio_q=(1.0, float("inf")), data={"t": (np.float64(2.0),)}))
    path = results.save(res, tmp_path)
    assert path.name == results.file_name(res) and path.name.startswith(res["date"][:10])
    back = results.load(path)
    assert back == json.loads(json.dumps(back, allow_nan=False))
    assert back["rows"][-1]["ratio"] is None and back["rows"][-1]["ratio_q"] == [1.0, None]
    assert back["rows"][-1]["data"] == {"t": [2.0]}
    assert back["machine"] == res["machine"] and back["commit"] == res["commit"]
    assert results.latest(tmp_path) == path
    bad = dict(back)
    del bad["machine"]
    with pytest.raises(ValueError, match="machine"):
        results.validate(bad)
    with pytest.raises(ValueError, match="schema"):
        results.validate({**back, "schema": results.VERSION + 1})


@pytest.mark.parametrize("goal, ratio, met", [
    ("≥ 0.9", 0.95, True), ("≥ 0.9", 0.85, False), ("> 1: taken (SYM_MAX_N)", 1.7, True),
    ("≤ 1: not taken (BLAS_MIN_D)", 3.3, False), ("≤ 1.80", 1.5, True), ("", 2.0, None),
    ("≥ 0.9", None, None)])
def test_goal_met(goal, ratio, met):
    assert results.goal_met(results.row("s", "c", "w", ratio, goal=goal)) is met


def test_machine_info():
    m = results.machine_info()
    assert m["logical_cpus"] >= 1 and m["python"] and m["versions"]["numpy"]
    assert not set(m["cpu_flags"]) & set(m["cpu_flags_absent"])


def _result():
    res = results.new_result(("field",), note="shared machine")
    res["rows"] = [results.row("field", "(8, 1, 3) P=1", "time: numpy twin ÷ wflow", 12.345,
                               seconds=2e-4),
                   results.row("paired", "a ÷ b", "pair-heads/s: a ÷ b", 0.95,
                               ratio_q=(0.9, 1.0), goal="≥ 0.9")]
    res["load"]["after"] = [1.0, 2.0, 3.0]
    return res


def test_render_table_and_write_doc(tmp_path):
    res = _result()
    text = results.render_table(res)
    lines = text.splitlines()
    assert lines[0].startswith(f"- result: {results.file_name(res)}, suites field")
    assert lines[1].startswith(f"- commit: `{res['commit'][:12]}`")
    assert lines[3].startswith("- CPU flags: ")
    assert lines[5] == "- load: 1-minute load average " + (
        f"{res['load']['before'][0]:.2f}" if res["load"]["before"] else "unknown") + \
        " at the start of the run, 1.00 at its end; shared machine"
    assert lines[7].startswith("| suite | case")
    assert "| field | (8, 1, 3) P=1 | time: numpy twin ÷ wflow | 12 | - | - | 200 µs | ok |" in text
    assert "| 0.95 (0.90–1.00) | ≥ 0.9 | yes |" in text
    doc = tmp_path / "p.md"
    doc.write_text(f"# P\n\n{results.BEGIN}\nold\n{results.END}\n\nrest\n")
    results.write_doc(res, doc)
    once = doc.read_text()
    assert "old" not in once and text in once and once.endswith(f"{results.END}\n\nrest\n")
    results.write_doc(res, doc)
    assert doc.read_text() == once
    doc.write_text("no markers")
    with pytest.raises(ValueError, match="markers"):
        results.write_doc(res, doc)


def test_a_scale_result_goes_to_its_own_section(tmp_path):
    """The ``scale`` suite alone has its own markers; the default suites' table stays."""
    main, scale = _result(), _result()
    scale["suites"] = ["scale"]
    scale["rows"] = [results.row("scale", "S2 n=1e+06 H=10 beta=5 D=general",
                                 "spectral seconds ÷ goal 5 s", 0.8, goal="≤ 1", seconds=4.0)]
    assert (results.section(main), results.section(scale)) == ("main", "scale")
    (b, e), (bs, es) = results.MARKERS["main"], results.MARKERS["scale"]
    doc = tmp_path / "p.md"
    doc.write_text(f"{b}\nold\n{e}\n\nmiddle\n\n{bs}\nold scale\n{es}\n")
    results.write_doc(main, doc)
    results.write_doc(scale, doc)
    text = doc.read_text()
    assert "old" not in text
    assert text.index(results.render_table(main)) < text.index("middle") \
        < text.index(results.render_table(scale))
    for r, name in ((main, "a.json"), (scale, "b.json")):
        (tmp_path / name).write_text(json.dumps(r))
    assert results.latest(tmp_path).name == "a.json"
    assert results.latest(tmp_path, of="scale").name == "b.json"


@pytest.mark.parametrize("of", sorted(results.MARKERS))
def test_performance_page_shows_the_newest_saved_result(of):
    path = results.latest(of=of)
    assert path is not None, f"no saved result of section {of} in benchmarks/results/"
    table = results.render_table(results.load(path), f"`{path.name}`")
    assert table in results.DOC.read_text(encoding="utf-8"), \
        "docs/performance.md is not the newest result: run python -m benchmarks.render"


def test_busy_neighbour_stops_by_itself():
    import subprocess
    import sys

    from benchmarks import contention

    subprocess.run([sys.executable, "-c", contention._BUSY, "0.2"], check=True, timeout=60)


def test_contention_table_format():
    from benchmarks.contention import format_contention_table

    rows = [{"case": "alone", "seconds": 2.0, "ratio": 1.0, "goal": math.nan, "against": ""},
            {"case": "beside 1 busy process", "seconds": 3.0, "ratio": 1.5, "goal": 1.8,
             "against": "alone", "load_before": 0.5}]
    text = format_contention_table(rows, T=20.0)
    assert "beside 1 busy process" in text and "≤1.80" in text and "1.50x" in text


@pytest.mark.slow
def test_contention_rows_smoke():
    """Every case runs (fresh processes, tiny T); no timing assertion."""
    from benchmarks.contention import contention_rows

    rows = contention_rows(quick=True)
    _check_rows(rows)
    assert [r["what"] for r in rows] == [
        "wall time: alone", "wall time: alone ÷ alone, OMP_WAIT_POLICY=active",
        "wall time: beside 1 busy process ÷ alone", "wall time: 3 runs in a row ÷ alone",
        "wall time: 3 runs started together ÷ 3 in a row"]
    assert all(r["seconds"] > 0 for r in rows)
