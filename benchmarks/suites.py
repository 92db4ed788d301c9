r"""The benchmark suites: each returns rows of :func:`benchmarks.results.row`, every ratio
taken between implementations timed in the same run, interleaved (rounds that call each
once, the order rotated every round: :func:`wflow.cli.bench.time_interleaved`).

``field``
    One field evaluation (velocity and every diagnostic) by wflow against the dense NumPy
    twin and PyTorch SDPA (the baselines of ``wflow bench``), and against wflow without the
    Itô sum (a drift evaluation: the ledger's second pass, Runge–Kutta stages).
``routes``
    The kernel's pair-pass routes against each other at the thresholds that choose them:
    the symmetric d = 3 pass against the row pass (``SYM_MAX_N``), the tiled BLAS pass
    against the row pass on both sides of ``BLAS_MIN_D`` and ``BLAS_MIN_N``.
``paired``
    The two goals of the kernel's rate: the pair rate of the paper's regime against the
    large-n case, and the large-n rate against the rate of the polynomial exponential,
    each ratio formed within one round.
``steps``
    A full simulation step (Euler, OU weights, every diagnostic, the exact ledger) on the
    numba backend against the NumPy reference backend.
``noise``
    A step with token noise (particles) and with diffusion (the S² density) against the
    same step without it [model §5b, §6b].
``memory``
    One step at n = 100 000 in a fresh process: seconds and peak resident memory.
``run``
    ``wflow run`` of the embedded default in a fresh process, with an empty numba cache
    (compiling) against a warm one.
``general``
    The general pass [model §1b] (non-symmetric D, untied values, the velocity only) against
    a dense NumPy softmax attention and PyTorch SDPA when installed; the factored pass at a
    trained-model shape against the whole attention block (projections, softmax, output
    projection) in NumPy and in PyTorch when installed.
``placements`` (:mod:`benchmarks.placements`)
    The default run's step under pre-LN, peri-LN, nGPT and Mix-LN against post-LN
    [model §1c].
``density``
    One step of a density run on S¹ and S² (N = 4096 … 65536 cells) with the spectral
    summation against the direct weighted pass [model §2s, §5b]; minutes, run only when named.
``scale`` (:mod:`benchmarks.scale`)
    The spectral summation from n = 10³ to 10⁷ on S¹ and S² against exact sums and the
    direct pass; minutes to hours, run only when named.
``contention`` (:mod:`benchmarks.contention`), ``section6`` and ``estimate``
    (:mod:`benchmarks.estimate`: ``wflow validate``'s time estimate against the measured
    time, n = 16 … 2000, d = 2 … 64)
    Minutes each; run only when named.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import tracemalloc

import numpy as np

from benchmarks import internals
from benchmarks.contention import child_env, contention_rows
from benchmarks.estimate import estimate_suite
from benchmarks.placements import placements_suite
from benchmarks.results import row
from benchmarks.scale import scale_suite
from wflow.cli.bench import (
    case_arrays,
    case_label,
    dense_attention,
    import_torch,
    numpy_dense_field,
    time_interleaved,
    torch_sdpa,
)

#: (n, H, d, P): the paper's n = 200 with P = 10 Monte Carlo paths, large n, large d.
FIELD_CASES = ((200, 10, 3, 10), (200, 100, 3, 10), (4096, 8, 3, 1), (2048, 8, 64, 1),
               (100_000, 4, 3, 1))
#: Small cases (``--quick`` and the tests).
QUICK_FIELD_CASES = ((64, 4, 3, 2), (48, 3, 8, 1))
#: Dense baselines above this estimated footprint are skipped (n = 100 000: 480 GB).
DENSE_LIMIT_BYTES = 4e9

#: (case, route compared with the row pass, the constant it tests).
ROUTE_CASES = (((200, 100, 3, 10), "sym", "SYM_MAX_N"), ((4096, 8, 3, 1), "sym", "SYM_MAX_N"),
               ((32768, 4, 3, 1), "sym", "SYM_MAX_N"),
               ((2048, 8, 8, 1), "blas", "BLAS_MIN_D"), ((200, 10, 8, 10), "blas", "BLAS_MIN_N"),
               ((128, 8, 16, 1), "blas", "BLAS_MIN_N"), ((200, 10, 4, 10), "blas", "BLAS_MIN_D"))
QUICK_ROUTE_CASES = (((64, 4, 3, 2), "sym", "SYM_MAX_N"), ((64, 2, 8, 1), "blas", "BLAS_MIN_D"))
_ROUTE_NAMES = {"sym": "symmetric pass", "blas": "BLAS pair pass"}

#: The paired goals: (the paper's regime, the large-n case).
PAIRED_CASES = ((200, 100, 3, 10), (4096, 8, 3, 1))
QUICK_PAIRED_CASES = ((40, 3, 3, 2), (96, 2, 3, 1))

#: (n, H, d, P, r) of the general suite: r = 0 a dense non-symmetric D, else factored of rank r.
GENERAL_CASES = ((4096, 8, 3, 1, 0), (200, 100, 3, 10, 0), (512, 12, 768, 1, 64))
QUICK_GENERAL_CASES = ((64, 4, 3, 2, 0), (48, 2, 16, 1, 4))

#: (n, H, d, P) of the full-step suite.
STEP_CASES = ((200, 10, 3, 10), (200, 100, 3, 10), (4096, 8, 3, 1))
QUICK_STEP_CASES = ((32, 2, 3, 2),)


def _repeats(work):
    """Timed rounds by the pair-heads of one call: 7, 3 or 1."""
    if work < 2e8:
        return 7
    if work < 5e9:
        return 3
    return 1


def _traced_mb(fn):
    """Peak of :mod:`tracemalloc` during one call of ``fn`` (the NumPy and Python
    allocations; not numba's scratch buffers), in MB."""
    was = tracemalloc.is_tracing()
    if not was:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        fn()
        return (tracemalloc.get_traced_memory()[1] - base) / 1e6
    finally:
        if not was:
            tracemalloc.stop()


def _rel(a, b):
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


# ---------------------------------------------------------------------- field
def field_suite(quick=False, torch=True, seed=0, beta=1.0, cases=None, repeats=None):
    """wflow's field evaluation against the NumPy twin, PyTorch SDPA and itself without the
    Itô sum; three rows per case.

    Parameters
    ----------
    quick : bool
        :data:`QUICK_FIELD_CASES` instead of :data:`FIELD_CASES`.
    torch : bool
        Include PyTorch when it imports.
    seed, beta : int, float
        Input draw and inverse temperature.
    cases : iterable of tuple, optional
        (n, H, d, P) cases instead.
    repeats : int, optional
        Rounds per case (default by size, :func:`_repeats`).

    Returns
    -------
    list of dict
        Rows ``numpy twin ÷ wflow``, ``torch SDPA ÷ wflow``, ``wflow ÷ wflow without Itô
        sum`` per case (times; without PyTorch one skipped row for every case, at the end);
        ``data`` holds the times, pair-heads per second, the relative differences of v and
        the traced memory.
    """
    import wflow

    cases = cases or (QUICK_FIELD_CASES if quick else FIELD_CASES)
    torch_mod, reason = import_torch() if torch else (None, "torch left out")
    model = wflow.AttentionModel(beta=float(beta))
    rng = np.random.default_rng(seed)
    rows = []
    for case in cases:
        rows += _field_case(model, tuple(int(c) for c in case), rng, beta, torch_mod, repeats)
    if torch_mod is None:  # one row says so for every case
        rows.append(row("field", "every case", "time: torch SDPA ÷ wflow",
                        status=f"skipped: {reason}"))
    return rows


def _field_case(model, case, rng, beta, torch_mod, repeats):
    n, H, d, P = case
    X, D = case_arrays(case, rng)
    work = float(P) * n * n * H
    reps = repeats or _repeats(work)
    numpy_bytes = 6.0 * n * n * 8  # W, the Itô weights and a few (n, n) temporaries
    torch_bytes = 2.0 * P * H * n * n * 8  # SDPA's math kernel: the (P, H, n, n) weights twice

    def run_torch():
        with torch_mod.no_grad():
            return torch_sdpa(torch_mod, X, D, beta)

    names = ["wflow", "no_ito"]
    fns = [lambda: model.evaluate(X, D), lambda: model.evaluate(X, D, want_ito=False)]
    Xs = X[:, : min(n, 512)]  # the warm-ups compile on a slice when the case is big
    warm = [lambda: model.evaluate(Xs, D), lambda: model.evaluate(Xs, D, want_ito=False)]
    if numpy_bytes <= DENSE_LIMIT_BYTES:
        names.append("numpy")
        fns.append(lambda: numpy_dense_field(X, D, beta))
        warm.append(lambda: numpy_dense_field(X[:, :8], D, beta))
    if torch_mod is not None and torch_bytes <= DENSE_LIMIT_BYTES:
        names.append("torch")
        fns.append(run_torch)
        warm.append(run_torch)
    ts, outs = time_interleaved(fns, reps, warm)
    t = dict(zip(names, ts))
    out = dict(zip(names, outs))
    v = out["wflow"].velocity
    traced = {k: _traced_mb(f) for k, f in zip(names, fns) if k != "torch"} if reps > 1 else {}
    label = case_label(case)
    base = {"work_pair_heads": work, "repeats": reps, "wflow_s": t["wflow"],
            "wflow_pair_heads_per_s": work / t["wflow"],
            "wflow_traced_MB": traced.get("wflow")}
    rows = []
    if "numpy" in t:
        rows.append(row("field", label, "time: numpy twin ÷ wflow", t["numpy"] / t["wflow"],
                        seconds=t["wflow"],
                        data={**base, "numpy_s": t["numpy"],
                              "rel_diff_v": _rel(out["numpy"][0], v),
                              "numpy_traced_MB": traced.get("numpy")}))
    else:
        rows.append(row("field", label, "time: numpy twin ÷ wflow", seconds=t["wflow"],
                        status=f"skipped: n×n arrays need ~{numpy_bytes / 1e9:.0f} GB",
                        data=base))
    if "torch" in t:
        a = out["torch"].numpy()
        rel = (_rel(a, np.stack([dense_attention(X[p], D[p], beta) for p in range(P)]))
               if n <= 1024 else None)
        rows.append(row("field", label, "time: torch SDPA ÷ wflow", t["torch"] / t["wflow"],
                        seconds=t["wflow"], status="ok (attention outputs only)",
                        data={**base, "torch_s": t["torch"], "rel_diff_a": rel}))
    elif torch_mod is not None:
        rows.append(row("field", label, "time: torch SDPA ÷ wflow", seconds=t["wflow"],
                        status=f"skipped: attention weights need ~{torch_bytes / 1e9:.0f} GB",
                        data=base))
    rows.append(row("field", label, "time: wflow ÷ wflow without Itô sum",
                    t["wflow"] / t["no_ito"], seconds=t["wflow"],
                    data={**base, "no_ito_s": t["no_ito"],
                          "rel_diff_v": _rel(out["no_ito"].velocity, v)}))
    return rows


# ---------------------------------------------------------------------- routes
def routes_suite(quick=False, seed=0, beta=1.0, cases=None, repeats=None):
    """Each special pair-pass route against the row pass, interleaved (the benchmark of the
    kernel's thresholds ``SYM_MAX_N``, ``BLAS_MIN_D`` and ``BLAS_MIN_N``).

    Returns
    -------
    list of dict
        One row per case: ``time: row pass ÷ <route>`` (above 1: the route is faster), its
        goal above 1 where the kernel takes the route by itself and at most 1 where it does
        not; ``data`` holds the kernel's choice and the relative difference of v.
    """
    cases = cases or (QUICK_ROUTE_CASES if quick else ROUTE_CASES)
    rng = np.random.default_rng(seed)
    rows = []
    for case, route, constant in cases:
        case = tuple(int(c) for c in case)
        n, H, d, P = case
        X, D = case_arrays(case, rng)
        work = float(P) * n * n * H
        fns = [lambda X=X, D=D: internals.fused_pass(X, D, beta, route="rows"),
               lambda X=X, D=D, r=route: internals.fused_pass(X, D, beta, route=r)]
        ts, outs = time_interleaved(fns, repeats or _repeats(work))
        taken = internals.route_taken(X, D, beta)
        goal = (f"> 1: taken ({constant})" if taken == route
                else f"≤ 1: not taken ({constant})")
        rows.append(row("routes", case_label(case), f"time: row pass ÷ {_ROUTE_NAMES[route]}",
                        ts[0] / ts[1], goal=goal, seconds=ts[1],
                        data={"rows_s": ts[0], "route_s": ts[1], "route": route,
                              "taken_by_kernel": taken,
                              "rel_diff_v": _rel(outs[1][0], outs[0][0])}))
    return rows


# ---------------------------------------------------------------------- paired
def paired_suite(quick=False, rounds=15, exp_seconds=0.05, seed=0, beta=1.0, cases=None):
    r"""The kernel's two rate goals, each ratio formed within one round.

    Each round times one field evaluation of ``cases[0]`` (a), one of ``cases[1]`` (b)
    (each the second of two calls in a row: a case does not pay for the other having
    evicted its data from the caches) and a short run of the polynomial exponential, in
    rotating order, and forms

    .. math:: \rho_{ab} = \frac{\text{pair-heads/s}(a)}{\text{pair-heads/s}(b)},\qquad
        \rho_{b,\exp} = \frac{\text{pair-heads/s}(b)}{\text{exponentials/s}}.

    A host whose speed drifts over minutes moves the three measurements of a round
    together; the medians and quartiles over the rounds are reported.

    Returns
    -------
    list of dict
        Two rows, goal ≥ 0.9 each.
    """
    import wflow

    cases = [tuple(int(v) for v in c) for c in (cases or (QUICK_PAIRED_CASES if quick
                                                          else PAIRED_CASES))]
    rounds = 3 if quick else rounds
    exp_seconds = 0.005 if quick else exp_seconds
    model = wflow.AttentionModel(beta=float(beta))
    rng = np.random.default_rng(seed)
    calls = []
    for case in cases:
        X, D = case_arrays(case, rng)
        calls.append((lambda X=X, D=D: model.evaluate(X, D), float(case[3]) * case[0] ** 2 * case[1]))
    (fa, wa), (fb, wb) = calls
    fa()
    fb()
    internals.exp_rate(exp_seconds)  # compiled, warm

    def timed(f):
        f()
        t0 = time.perf_counter()
        f()
        return time.perf_counter() - t0

    rates = np.empty((rounds, 3))
    for r in range(rounds):
        for k in range(3):
            j = (k + r) % 3
            rates[r, j] = (wa / timed(fa) if j == 0 else wb / timed(fb) if j == 1
                           else internals.exp_rate(exp_seconds))
    ab = rates[:, 0] / rates[:, 1]
    be = rates[:, 1] / rates[:, 2]
    a, b = (case_label(c) for c in cases)
    data = {"rounds": rounds, "rate_a": float(np.median(rates[:, 0])),
            "rate_b": float(np.median(rates[:, 1])), "exp_rate": float(np.median(rates[:, 2]))}
    return [row("paired", f"{a} ÷ {b}", "pair-heads/s: a ÷ b", float(np.median(ab)),
                ratio_q=np.quantile(ab, [0.25, 0.75]), goal="≥ 0.9", data=data),
            row("paired", b, "pair-heads/s ÷ exponentials/s", float(np.median(be)),
                ratio_q=np.quantile(be, [0.25, 0.75]), goal="≥ 0.9", data=data)]


# ---------------------------------------------------------------------- steps
def _step_config(n, H, d, P, backend, ledger=True):
    return {"model": {"n": n, "d": d, "heads": H},
            "solver": {"dt": 0.005, "T": 1.0, "record_every": 200, "paths": P,
                       "backend": backend},
            "diagnostics": {"ledger": ledger, "clustering": False},
            "output": {"store_tokens": False}}


def _runner(cfg):
    """A function that times ``k`` steps of a configuration from its initial state, warm
    (its first step run once: compilation), and the result of that first step."""
    sim = internals.simulation(cfg)
    first = sim.run(stop_after=1)

    def steps(k):
        st = sim.initial_state()
        t0 = time.perf_counter()
        sim.run(state=st, stop_after=k)
        return (time.perf_counter() - t0) / k
    return steps, first


def _step_runner(case, backend):
    """A function that times ``steps`` steps of a case from its initial state, warm."""
    return _runner(_step_config(*case, backend))[0]


def steps_suite(quick=False, steps=5, numpy_steps=2, cases=None, repeats=3):
    """A full step with every diagnostic and the exact ledger, numba backend against the
    NumPy reference backend (``solver.backend = "numpy"``: n × n arrays per head),
    interleaved over ``repeats`` rounds.

    Returns
    -------
    list of dict
        One row per case, ``time: numpy backend ÷ wflow`` per step.
    """
    cases = cases or (QUICK_STEP_CASES if quick else STEP_CASES)
    rows = []
    for case in cases:
        case = tuple(int(c) for c in case)
        n, H, d, P = case
        wf = _step_runner(case, "numba")
        need = 8.0 * H * n * n * 8  # the reference holds a few (H, n, n) arrays
        if need > DENSE_LIMIT_BYTES:
            ts, _ = time_interleaved([lambda wf=wf: wf(steps)], repeats, [])
            rows.append(row("steps", case_label(case), "time per step: numpy backend ÷ wflow",
                            seconds=ts[0], status=f"skipped: (H, n, n) arrays need "
                                                  f"~{need / 1e9:.0f} GB",
                            data={"wflow_step_s": ts[0]}))
            continue
        nf = _step_runner(case, "numpy")
        ts, _ = time_interleaved([lambda wf=wf: wf(steps), lambda nf=nf: nf(numpy_steps)],
                                 repeats, [])
        rows.append(row("steps", case_label(case), "time per step: numpy backend ÷ wflow",
                        ts[1] / ts[0], seconds=ts[0],
                        data={"wflow_step_s": ts[0], "numpy_step_s": ts[1]}))
    return rows


# ---------------------------------------------------------------------- noise
#: (n, H, d, P) of the token-noise rows: the paper's regime and large n [model §6b].
NOISE_CASES = ((200, 10, 3, 10), (4096, 8, 3, 1))
QUICK_NOISE_CASES = ((32, 2, 3, 2),)
#: S² density cells of the diffusion rows, and the quick size [model §5b].
DIFFUSION_CELLS = 4096
QUICK_DIFFUSION_CELLS = 256
#: Token diffusion ν of both kinds of rows.
NOISE_NU = 0.1


def _density_config(cells, nu, dt, scheme="explicit"):
    return {"model": {"d": 3, "heads": 1, "diffusion": nu},
            "solver": {"representation": "density", "method": "ssprk3", "dt": dt, "T": 64 * dt,
                       "record_every": 1},
            "density": {"cells": cells, "diffusion_scheme": scheme},
            "init": {"tokens": "vmf"}, "diagnostics": {"ledger": False}}


def _density_runner(cfg):
    """:func:`_runner` of a density run, and the CFL substeps its first step takes."""
    steps, first = _runner(cfg)
    return steps, int(first["cfl_substeps"][-1, 0])


def noise_suite(quick=False, steps=5, repeats=5, cases=None, cells=None, nu=NOISE_NU):
    r"""The cost of noise on the tokens, interleaved with the noiseless run in each round.

    Particles [model §6b]: a full step (projected Euler–Maruyama, OU weights, every
    diagnostic, the exact ledger with its token-noise split) at ν = ``nu`` against the same
    step at ν = 0; the noise adds O(nd) work to the O(n²Hd) field, goal ≤ 1.05.
    Density on S² [model §5b]: one SSP-RK3 step of ``cells`` Voronoi cells with the diffusion
    flux against the step without it, (a) explicit diffusion at the largest Δt (halved from
    0.0025) at which the diffusive step needs one substep — the step the scheme allows,
    :math:`\Delta t \lesssim h^2/(4\nu)` — and (b) Strang-split diffusion at the transport's
    Δt = 0.0025; goal ≤ 1.5 each.

    Returns
    -------
    list of dict
        One row per particle case and two density rows; ``data`` holds the seconds per step
        and the substeps.
    """
    cases = cases or (QUICK_NOISE_CASES if quick else NOISE_CASES)
    cells = int(cells or (QUICK_DIFFUSION_CELLS if quick else DIFFUSION_CELLS))
    rows = []
    for case in cases:
        case = tuple(int(c) for c in case)
        runners = []
        for diff in (nu, 0.0):
            cfg = _step_config(*case, "numba")
            cfg["model"]["diffusion"] = diff
            runners.append(_runner(cfg)[0])
        ts, _ = time_interleaved([lambda f=f: f(steps) for f in runners], repeats, [])
        rows.append(row("noise", case_label(case), f"time per step: ν = {nu:g} ÷ ν = 0",
                        ts[0] / ts[1], goal="≤ 1.05", seconds=ts[0],
                        data={"noisy_step_s": ts[0], "noiseless_step_s": ts[1]}))
    dt = 0.0025
    while True:
        with_nu, sub = _density_runner(_density_config(cells, nu, dt))
        if sub == 1 or dt < 1e-6:
            break
        dt /= 2
    without, sub0 = _density_runner(_density_config(cells, 0.0, dt))
    split, sub_s = _density_runner(_density_config(cells, nu, 0.0025, "split"))
    plain, sub_p = _density_runner(_density_config(cells, 0.0, 0.0025))
    ts, _ = time_interleaved([lambda: with_nu(steps), lambda: without(steps),
                              lambda: split(steps), lambda: plain(steps)], repeats, [])
    label = f"S², N = {cells}"
    rows.append(row("noise", label, f"density step, explicit diffusion ν = {nu:g} ÷ none "
                                    f"(Δt = {dt:g}, its one-substep step)",
                    ts[0] / ts[1], goal="≤ 1.5", seconds=ts[0],
                    data={"dt": dt, "diffusive_s": ts[0], "plain_s": ts[1],
                          "substeps": [sub, sub0]}))
    rows.append(row("noise", label, f"density step, split diffusion ν = {nu:g} ÷ none "
                                    "(Δt = 0.0025, the transport's)",
                    ts[2] / ts[3], goal="≤ 1.5", seconds=ts[2],
                    data={"dt": 0.0025, "diffusive_s": ts[2], "plain_s": ts[3],
                          "substeps": [sub_s, sub_p]}))
    return rows


# ---------------------------------------------------------------------- density
#: cells of the density rows (S¹ and S²), and the quick size [model §5b, §2s]
DENSITY_CELLS = (4096, 16384, 65536)
QUICK_DENSITY_CELLS = (256,)
#: above this many cells a step is timed once, with one path (the direct one takes minutes)
DENSITY_ONCE_ABOVE = 4096


def _spectral_density_config(d, cells, summation, paths=None):
    """The embedded default as a density run on S^{d-1} (a uniform start: a law the
    density takes) with the field's sums ``summation`` (and ``paths`` paths if given)."""
    cfg = {"model": {"d": d},
           "solver": {"representation": "density", "summation": summation},
           "init": {"tokens": "uniform"}, "density": {"cells": cells}}
    if paths is not None:
        cfg["solver"]["paths"] = int(paths)
    return cfg


def _flagged(sim):
    """The largest flagged fraction of the spectral field at the start (over the paths)."""
    dm = sim.model
    rho = np.asarray(sim.X0)
    _, rep = dm.model.evaluate_spectral(dm.points(rho.shape[0]), sim.D0,
                                        weights=dm.grid.masses(rho))
    return float(np.max(rep.flagged)), int(np.max(rep.degree))


def density_suite(quick=False, cells=None, spheres=(2, 3), repeats=3, once_above=None,
                  paths=None):
    r"""One step of a density run [model §5b] (the embedded default with
    ``solver.representation = "density"``, a uniform start, ``density.cells`` = N; every
    diagnostic and the ledger) with the field's sums by spectral summation [model §2s]
    against the direct weighted pass, in the same process, interleaved over ``repeats``
    rounds; above ``once_above`` cells each step is timed once and with one path (the direct
    one takes minutes; both routes cost in proportion to the paths). Both are compiled on a
    small mesh first. ``paths``: ``solver.paths`` for every N if given. Run only when named.

    Returns
    -------
    list of dict
        One row per sphere and N, ``time per step: direct ÷ spectral``; ``data`` holds the
        seconds, the degree L and the flagged fraction at the start.
    """
    cells = tuple(int(c) for c in (cells or (QUICK_DENSITY_CELLS if quick else DENSITY_CELLS)))
    once_above = DENSITY_ONCE_ABOVE if once_above is None else int(once_above)
    rows = []
    for d in spheres:
        for summ in ("spectral", "direct"):  # compile on a small mesh
            internals.simulation(_spectral_density_config(d, 64, summ)).run(stop_after=1)
        for N in cells:
            once = N > once_above
            P = paths if paths is not None else (1 if once else None)
            sims = [internals.simulation(_spectral_density_config(d, N, s, P))
                    for s in ("spectral", "direct")]
            steps = [lambda s=s: s.run(state=s.initial_state(), stop_after=1) for s in sims]
            ts, _ = time_interleaved(steps, 1 if once else repeats, [] if once else None)
            flagged, L = _flagged(sims[0])
            label = f"S{d - 1}, N = {N}" + ("" if P is None else f", P = {P}")
            rows.append(row("density", label, "time per density step: direct ÷ spectral sums",
                            ts[1] / ts[0], seconds=ts[0],
                            status="ok: timed once" if once else "ok",
                            data={"spectral_s": ts[0], "direct_s": ts[1], "degree": L,
                                  "flagged": flagged, "rounds": 1 if once else repeats}))
    return rows


# ---------------------------------------------------------------------- memory
_MEMORY_CHILD = (
    "import json, resource, sys, time\n"
    "from benchmarks import internals\n"
    "sim = internals.simulation(json.loads(sys.argv[1]))\n"
    "sim.run(stop_after=0)\n"
    "t0 = time.perf_counter(); sim.run(stop_after=1); t = time.perf_counter() - t0\n"
    "hwm = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')]\n"
    "mb = hwm[0] / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
    "print(json.dumps([t, mb]))\n"
)


def memory_suite(quick=False, n=100_000, H=4, d=3, ledger=True):
    """One full step at ``n`` tokens in a fresh process: seconds and peak RSS (the child's
    VmHWM: ``ru_maxrss`` would carry the parent's high-water mark across fork and exec).

    Returns
    -------
    list of dict
        One row; ``data`` holds the seconds and the peak in MB (no ratio: nothing dense
        fits at this n).
    """
    import json

    if quick:
        n = 2000
    cfg = _step_config(n, H, d, 1, "numba", ledger)
    out = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, json.dumps(cfg)], env=child_env(),
                         capture_output=True, text=True, check=True)
    t, mb = json.loads(out.stdout.strip().splitlines()[-1])
    return [row("memory", case_label((n, H, d, 1)),
                "one step with the ledger (3 field evaluations), fresh process", seconds=t,
                status=f"ok: peak RSS {mb:.0f} MB", data={"step_s": t, "peak_rss_MB": mb})]


# ---------------------------------------------------------------------- run
def _wflow_run(cache, workdir, T=None):
    # its own numba cache, and its own folder for the rate a run saves for `wflow validate`
    env = dict(child_env(), NUMBA_CACHE_DIR=cache, WFLOW_CACHE_DIR=workdir)
    cmd = [sys.executable, "-m", "wflow.cli", "run", "-q", "--overwrite", "-o",
           os.path.join(workdir, "r.h5")]
    if T is not None:
        cmd += ["--set", f"solver.T={T}"]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0


def run_suite(quick=False, warm_runs=2):
    """``wflow run`` of the embedded default, a fresh process each: with an empty numba
    cache (compiling every kernel it uses) against the shortest of ``warm_runs`` runs with
    that cache.

    Returns
    -------
    list of dict
        One row, ``wall time: cold cache ÷ warm cache``; ``seconds`` is the warm run.
    """
    T = 0.05 if quick else None
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "numba_cache")
        cold = _wflow_run(cache, tmp, T)
        warm = min(_wflow_run(cache, tmp, T) for _ in range(max(1, warm_runs)))
    return [row("run", "embedded default" + (" (T = 0.05)" if quick else ""),
                "wall time of `wflow run`: cold cache ÷ warm cache", cold / warm, seconds=warm,
                data={"cold_s": cold, "warm_s": warm})]


# ---------------------------------------------------------------------- section 6
def section6_suite(quick=False, T=20.0, heads=(1, 10, 100), paths=10):
    """Wall time of the paper's Section 6 in memory (no files), without and with the ledger.

    Returns
    -------
    list of dict
        One row per ledger setting (no ratio; ``data`` holds the seconds of each task).
    """
    if quick:
        T, heads, paths = 0.05, (1,), 1
    rows = []
    for ledger in (False, True):
        tasks = internals.section6_tasks(T, paths, ledger, heads)
        internals.simulation(tasks[0][1]).run(stop_after=1)  # compilation
        per = {}
        t0 = time.perf_counter()
        for name, cfg in tasks:
            t1 = time.perf_counter()
            internals.simulation(cfg).run()
            per[name] = time.perf_counter() - t1
        total = time.perf_counter() - t0
        rows.append(row("section6", f"T = {T:g}, H ∈ {{{', '.join(map(str, heads))}}}, paths: {paths}",
                        f"end to end, ledger {'on' if ledger else 'off'}", seconds=total,
                        data={"tasks_s": per}))
    return rows


def _general_arrays(case, rng):
    """Tokens, D (dense (P, H, d, d) or Factored), V (dense or Factored) of a general case."""
    from wflow.model.attention import Factored

    n, H, d, P, r = case
    X = rng.normal(size=(P, n, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    if r == 0:
        return X, rng.normal(size=(P, H, d, d)) / np.sqrt(d), rng.normal(size=(H, d, d))
    WQ, WK, WV = 0.02 * rng.normal(size=(3, H, r, d))
    WO = 0.02 * rng.normal(size=(H, d, r))
    return X, Factored(WQ, WK, np.sqrt(r)), Factored.values(WO, WV)


def _numpy_general(X, D, V):
    """The dense NumPy baseline: per path Σ_h softmax(X D_h Xᵀ) X V_hᵀ (a dense D), or the
    whole block W_O softmax(Q Kᵀ) X W_Vᵀ (a Factored D and V)."""
    out = []
    for p in range(X.shape[0]):
        x = X[p]
        if isinstance(V, np.ndarray):
            S = np.matmul(x @ D[p], x.T)  # (H, n, n): x_iᵀ D_h x_j
            Y = None
        else:
            S = np.matmul(D.left(x), np.swapaxes(D.right(x), -1, -2))
            Y = V.right(x)
        S -= S.max(axis=-1, keepdims=True)
        np.exp(S, out=S)
        S /= S.sum(axis=-1, keepdims=True)
        if Y is None:
            out.append(np.matmul(np.matmul(S, x), np.swapaxes(V, -1, -2)).sum(axis=0))
        else:
            out.append((np.matmul(np.matmul(S, Y), V.A) / V.scale).sum(axis=0))
    return out


def _torch_general(torch, X, D, V):
    """The same in PyTorch float64: SDPA with queries x_i D_h, keys x_j, values x_j V_hᵀ,
    or the whole block from the factored projections."""
    Xt = torch.from_numpy(X)[:, None]  # (P, 1, n, d)
    if isinstance(V, np.ndarray):
        q = torch.matmul(Xt, torch.from_numpy(np.ascontiguousarray(D)))  # rows x_iᵀ D_h
        k = Xt.expand(-1, D.shape[1], -1, -1)
        v = torch.matmul(Xt, torch.from_numpy(np.ascontiguousarray(np.swapaxes(V, -1, -2))))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0).sum(1)
    q = torch.matmul(Xt, torch.from_numpy(np.ascontiguousarray(np.swapaxes(D.A, -1, -2))))
    k = torch.matmul(Xt, torch.from_numpy(np.ascontiguousarray(np.swapaxes(D.B, -1, -2))))
    v = torch.matmul(Xt, torch.from_numpy(np.ascontiguousarray(np.swapaxes(V.B, -1, -2))))
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0 / D.scale)
    return torch.matmul(y, torch.from_numpy(np.ascontiguousarray(V.A))).sum(1)


def general_suite(quick=False, seed=0, cases=None, torch=True, repeats=None):
    """The general and factored passes [model §1b] against NumPy (and PyTorch SDPA), the
    velocity only (``want_ito=False``; the general pass reports no energy), interleaved.

    Returns
    -------
    list of dict
        Per case ``time: numpy ÷ wflow`` and, with PyTorch, ``time: torch ÷ wflow`` (goal
        ≥ 2 for a dense D, ≥ 1 for the factored block); ``data`` holds the relative
        difference of the projected outputs.
    """
    from wflow.model.attention import AttentionModel

    cases = cases or (QUICK_GENERAL_CASES if quick else GENERAL_CASES)
    tm, reason = import_torch() if torch else (None, "torch left out")
    rng = np.random.default_rng(seed)
    rows = []
    for case in cases:
        n, H, d, P, r = (int(c) for c in case)
        X, D, V = _general_arrays((n, H, d, P, r), rng)
        model = AttentionModel(interaction="general", values=V, head_combine="sum")
        fns = [lambda X=X, D=D, m=model: m.evaluate(X, D, want_ito=False).velocity,
               lambda X=X, D=D, V=V: _numpy_general(X, D, V)]
        if tm is not None:
            fns.append(lambda X=X, D=D, V=V: _torch_general(tm, X, D, V))
        ts, outs = time_interleaved(fns, repeats or _repeats(float(P) * n * n * H))
        u = np.stack(outs[1])
        Pu = u - np.einsum("pia,pia->pi", u, X)[..., None] * X
        label = case_label((n, H, d, P)) + (f" r={r}" if r else "")
        goal = "≥ 2" if r == 0 else "≥ 1"
        data = {"wflow_s": ts[0], "numpy_s": ts[1], "rel_diff_v": _rel(outs[0], Pu)}
        rows.append(row("general", label, "time: numpy ÷ wflow", ts[1] / ts[0], seconds=ts[0],
                        data=data))
        if tm is not None:
            rows.append(row("general", label, "time: torch ÷ wflow", ts[2] / ts[0], goal=goal,
                            seconds=ts[0], data={"torch_s": ts[2], **data}))
        else:
            rows.append(row("general", label, "time: torch ÷ wflow", None, goal=goal,
                            status=f"skipped: {reason}"))
    return rows


def _contention(quick=False):
    return contention_rows(quick=quick)


#: The suites by name, in the order they run; :data:`DEFAULT_SUITES` run when none is named.
SUITES = {"field": field_suite, "routes": routes_suite, "paired": paired_suite,
          "steps": steps_suite, "memory": memory_suite, "run": run_suite,
          "contention": _contention, "section6": section6_suite, "general": general_suite,
          "noise": noise_suite, "placements": placements_suite, "estimate": estimate_suite,
          "scale": scale_suite, "density": density_suite}
DEFAULT_SUITES = ("field", "routes", "paired", "steps", "noise", "general", "placements",
                  "memory", "run")

__all__ = ["SUITES", "DEFAULT_SUITES"]
