r"""Benchmarks of the fused field evaluation (``wflow bench``).

For each case (n, H, d[, P]) three implementations evaluate the attention field at the same
random input (tokens uniform on :math:`S^{d-1}`, :math:`D_h = \Xi + \Xi^T`, β = 1, head
normalisation, tied values):

``wflow``
    :func:`wflow.core._kernels.fused_pass`: velocity and every diagnostic (partition, gradient,
    b̂, energy, 𝒟, G², G²_hm, ∂_D E, Itô sum) in one pass over the pairs.
``numpy``
    a plain dense NumPy implementation of the same step with all diagnostics, one head at a
    time with ``n × n`` arrays (:func:`numpy_dense_field`; same numbers as
    :func:`wflow.core._reference.field_reference`, which would hold ``H × n × n`` arrays at once).
``torch``
    PyTorch CPU ``scaled_dot_product_attention`` in float64: the H-head attention outputs
    :math:`a_h(x_i)` only (no projection, no diagnostics), batched over paths and heads.

Reported per row: the median wall-clock time of one evaluation ("time per step") over a
few repeats after a warm-up call (which also compiles the numba kernels), pair-head
interactions per second (:math:`P n^2 H` / time), the speed-up of wflow over each baseline
measured in the same run, and memory. wflow (with and without the Itô sum) and torch are
timed interleaved (rounds that call each once, in rotating order), so that a drift of a
shared machine reaches them alike; the slow NumPy baseline after them.

* ``traced_MB``: peak of :mod:`tracemalloc` during one call (an extra untimed one, or the
  timed one for single-repeat cases) — the NumPy (and Python) allocations of that call; not
  the numba-internal scratch buffers (a few KB per thread) and not PyTorch's allocator
  (reported as NaN for torch);
* ``maxrss_MB``: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` after the row — the
  high-water mark of the whole process so far (monotone: an upper bound for the row,
  including the interpreter, numba/LLVM and every earlier row).

Dense baselines whose estimated footprint exceeds :data:`DENSE_LIMIT_BYTES` (about 4 GB;
e.g. n = 100 000) are reported as skipped, with the estimate.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
import tracemalloc

import numpy as np

__all__ = ["CASES", "TINY_CASES", "run_bench", "format_table", "numpy_dense_field",
           "time_section6", "contention_bench", "format_contention_table"]

#: (n, H, d, P): the default cases (the paper's n = 200 with P = 10 Monte Carlo paths).
CASES = ((200, 10, 3, 10), (200, 100, 3, 10), (4096, 8, 3, 1), (2048, 8, 64, 1),
         (100_000, 4, 3, 1))
#: Small cases for tests (seconds, including compilation).
TINY_CASES = ((64, 4, 3, 2), (48, 3, 8, 1))
#: Dense baselines above this estimated footprint are skipped.
DENSE_LIMIT_BYTES = 4e9

COLUMNS = ("case", "n", "H", "d", "P", "impl", "status", "time_per_step_s", "pair_heads_per_s",
           "wflow_speedup_vs_numpy", "wflow_speedup_vs_torch", "traced_MB", "maxrss_MB",
           "max_rel_diff_velocity", "exp_rate", "exp_bound_fraction")


# ---------------------------------------------------------------------------------------------
# Baselines
# ---------------------------------------------------------------------------------------------
def numpy_dense_field(X, D, beta=1.0):
    """Dense NumPy evaluation of v (head normalisation, tied values) and every diagnostic.

    X (P, n, d), D (P, H, d, d); one head at a time with n × n arrays (unshifted
    exponentials: moderate β‖D‖ only). Returns the tuple of :func:`wflow.core._kernels.fused_pass`.
    """
    X = np.asarray(X, dtype=float)
    D = np.asarray(D, dtype=float)
    P, n, d = X.shape
    H = D.shape[1]
    out = [np.empty((P, n, d)), np.empty((P, H, n)), np.empty((P, n, d)), np.empty((P, n)),
           np.empty(P), np.empty(P), np.empty(P), np.empty(P), np.empty((P, H, d, d)),
           np.empty(P)]
    for p in range(P):
        x = X[p]
        C = x @ x.T
        ito_w = 1.0 + C * C
        del C
        v = np.zeros((n, d))
        g = np.zeros((n, d))
        Z = np.empty((H, n))
        E = 0.0
        ito = 0.0
        for h in range(H):
            DX = x @ D[p, h].T  # D_h x_j
            W = np.exp(beta * (x @ DX.T))  # e^{s_ij}  (n, n)
            s0 = W.sum(axis=1)
            Z[h] = s0 / n
            A = (W @ DX) / s0[:, None]  # a_h(x_i)
            v += A - np.einsum("ia,ia->i", A, x)[:, None] * x
            g += W @ DX
            E += s0.sum()
            ito += np.einsum("ij,ij->", W, ito_w)
            out[8][p, h] = x.T @ (W @ x) / (2 * H * n * n)
            del W
        v /= H
        g /= H * n
        g -= np.einsum("ia,ia->i", g, x)[:, None] * x
        Zbar = Z.mean(axis=0)
        v2 = np.einsum("ia,ia->i", v, v)
        out[0][p] = v
        out[1][p] = Z
        out[2][p] = g
        out[3][p] = 1.0 / Zbar
        out[4][p] = E / (2 * beta * H * n * n)
        out[5][p] = np.einsum("ia,ia->", g, v) / n
        out[6][p] = np.mean(v2 / (1.0 / Z).mean(axis=0))
        out[7][p] = np.mean(v2 * Zbar)
        out[9][p] = ito / (2 * H * n * n)
    return tuple(out)


def _numpy_bytes(n, H, d, P):
    # W, ito weights, the W·ito_w temporary, and a few (n, n) einsum/exp temporaries
    return 6.0 * n * n * 8


def _torch_bytes(n, H, d, P):
    # the math kernel of SDPA materialises the (P, H, n, n) weights (plus a softmax copy)
    return 2.0 * P * H * n * n * 8


def _torch_sdpa(torch, X, D, beta):
    """H-head attention outputs a_h(x_i) (P, H, n, d) by scaled_dot_product_attention."""
    Xt = torch.from_numpy(X)  # (P, n, d)
    Dt = torch.from_numpy(D)  # (P, H, d, d)
    x = Xt[:, None]  # (P, 1, n, d)
    q = torch.matmul(x, Dt.transpose(-1, -2))  # rows D_h x_i  (P, H, n, d)
    k = x.expand(-1, Dt.shape[1], -1, -1)
    vv = q  # tied values: V_h x_j = D_h x_j
    return torch.nn.functional.scaled_dot_product_attention(q, k, vv, scale=float(beta))


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------
def _repeats(work):
    if work < 2e8:
        return 7
    if work < 5e9:
        return 3
    return 1


def _time(fn, repeats, warmup=None):
    """(median time, output of the last call, tracemalloc peak in MB) of ``fn`` alone
    (:func:`_time_interleaved` with one function).

    ``warmup`` (default ``fn``) is called first (compilation). The memory peak comes from one
    extra untimed call, or, for a single repeat (the big cases), from the timed call itself
    (tracing then only sees the few large NumPy allocations of the wrapper).
    """
    (t,), (out,), (traced,) = _time_interleaved([fn], [warmup or fn], repeats)
    return t, out, traced


def _time_interleaved(fns, warmups, repeats):
    """(median times, outputs of the last calls, tracemalloc peaks in MB) of ``fns``, timed
    in rounds that call each once, the order rotated every round: a drift of the machine
    (other work, the clock) reaches every implementation alike, and their ratios stay
    comparable. ``warmups`` are called first; the memory peaks as in :func:`_time`."""
    for w in warmups:
        w()
    k = len(fns)
    ts = [[] for _ in fns]
    outs = [None] * k
    traced = [float("nan")] * k
    trace = repeats == 1
    for r in range(repeats):
        for i in range(k):
            j = (i + r) % k
            if trace:
                _trace_start()
            t0 = time.perf_counter()
            outs[j] = fns[j]()
            ts[j].append(time.perf_counter() - t0)
            if trace:
                traced[j] = _trace_stop()
    if repeats > 1:
        for j, fn in enumerate(fns):
            _trace_start()
            fn()
            traced[j] = _trace_stop()
    return [statistics.median(t) for t in ts], outs, traced


_TRACE_BASE = [0, False]


def _trace_start():
    _TRACE_BASE[1] = tracemalloc.is_tracing()
    if not _TRACE_BASE[1]:
        tracemalloc.start()
    tracemalloc.reset_peak()
    _TRACE_BASE[0] = tracemalloc.get_traced_memory()[0]


def _trace_stop():
    peak = tracemalloc.get_traced_memory()[1]
    if not _TRACE_BASE[1]:
        tracemalloc.stop()
    return (peak - _TRACE_BASE[0]) / 1e6


def _maxrss_mb():
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return float("nan")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1e6 if sys.platform == "darwin" else rss / 1e3  # bytes on macOS, KiB on Linux


def _row(case, impl, status, t=float("nan"), work=float("nan"), traced=float("nan"),
         rel=float("nan")):
    n, H, d, P = case
    return {
        "case": f"({n}, {H}, {d}) P={P}", "n": n, "H": H, "d": d, "P": P, "impl": impl,
        "status": status, "time_per_step_s": t,
        "pair_heads_per_s": work / t if t == t and t > 0 else float("nan"),
        "wflow_speedup_vs_numpy": float("nan"), "wflow_speedup_vs_torch": float("nan"),
        "traced_MB": traced, "maxrss_MB": _maxrss_mb(), "max_rel_diff_velocity": rel,
        "exp_rate": float("nan"), "exp_bound_fraction": float("nan"),
    }


def _rel(a, b):
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def run_bench(tiny=False, cases=None, torch=True, repeats=None, seed=0, beta=1.0,
              progress=None) -> list[dict]:
    """Time wflow's fused field evaluation against NumPy and PyTorch baselines.

    Parameters
    ----------
    tiny : use :data:`TINY_CASES` (a few seconds in all).
    cases : iterable of (n, H, d) or (n, H, d, P) (P = 1 if omitted); overrides ``tiny``.
    torch : include the PyTorch SDPA baseline when ``import torch`` works.
    repeats : timed repeats per measurement (default: by size, 7, 3 or 1).
    seed, beta : input draw and inverse temperature.
    progress : callable receiving each row as it is produced (e.g. ``print``), or None.

    Returns
    -------
    list of dicts with the keys :data:`COLUMNS`, three rows per case (wflow, numpy, torch).
    """
    if cases is None:
        cases = TINY_CASES if tiny else CASES
    cases = [tuple(int(v) for v in c) + ((1,) if len(c) == 3 else ()) for c in cases]
    torch_mod, torch_reason = None, "skipped: torch baseline disabled"
    if torch:
        try:
            import torch as torch_mod  # noqa: F401
        except Exception as exc:  # ImportError, or a broken install
            torch_mod = None
            torch_reason = ("skipped: torch not installed" if isinstance(exc, ImportError)
                            else f"skipped: import torch failed ({exc})")
    from wflow import kernels as _kernels

    rows = []
    rng = np.random.default_rng(seed)
    exp_rate = _kernels.fast_exp_rate()
    for case in cases:
        for r in _bench_case(case, rng, beta, repeats, torch_mod, torch_reason):
            if r["impl"].startswith("wflow"):
                r["exp_rate"] = exp_rate
                r["exp_bound_fraction"] = r["pair_heads_per_s"] / exp_rate
            rows.append(r)
            if progress is not None:
                progress(r)
    return rows


def _case_arrays(case, rng):
    """Tokens X (P, n, d) on the sphere and weights D = A + Aᵀ (P, H, d, d) of a case
    (n, H, d, P), drawn from ``rng``."""
    n, H, d, P = case
    X = rng.normal(size=(P, n, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    A = rng.normal(size=(P, H, d, d))
    D = A + np.swapaxes(A, -1, -2)
    if d > 8:  # keep β‖D‖₂ moderate so the unshifted dense baseline stays finite
        D /= math.sqrt(d)
    return X, D


def _bench_case(case, rng, beta, repeats, torch_mod, torch_reason):
    """The four rows (wflow, wflow without the Itô sum, numpy, torch) of one case."""
    from wflow import kernels as _kernels

    n, H, d, P = case
    X, D = _case_arrays(case, rng)
    lap = np.zeros(H, dtype=bool)
    work = float(P) * n * n * H
    reps = repeats if repeats is not None else _repeats(work)

    def run_wflow(m=n, ito=True):
        return _kernels.fused_pass(X[:, :m], D, None, beta, 0, lap, False, True, want_ito=ito)

    def run_torch():
        old = torch_mod.get_num_threads()
        torch_mod.set_num_threads(max(1, _num_threads()))  # as many threads as numba
        try:
            with torch_mod.no_grad():
                return _torch_sdpa(torch_mod, X, D, beta)
        finally:
            torch_mod.set_num_threads(old)

    need_t = _torch_bytes(n, H, d, P)
    with_torch = torch_mod is not None and need_t <= DENSE_LIMIT_BYTES
    # wflow, wflow without the Itô sum (a drift evaluation: the ledger's second pass,
    # Runge–Kutta stages, weights without Brownian noise) and torch, interleaved; the warm-ups
    # compile (on a slice when the case is big)
    fns = [run_wflow, lambda: run_wflow(ito=False)] + ([run_torch] if with_torch else [])
    warm = [lambda: run_wflow(min(n, 512)), lambda: run_wflow(min(n, 512), False)]
    (t_w, t_d, *t_t), outs, traced = _time_interleaved(fns, warm + fns[2:], reps)
    out_w, out_d = outs[0], outs[1]
    r_w = _row(case, "wflow", "ok", t_w, work, traced[0])
    r_d = _row(case, "wflow, no Itô", "ok", t_d, work, traced[1], _rel(out_d[0], out_w[0]))

    need = _numpy_bytes(n, H, d, P)
    if need > DENSE_LIMIT_BYTES:
        r_n = _row(case, "numpy", f"skipped: dense n×n arrays need ~{need / 1e9:.0f} GB "
                                  f"(> {DENSE_LIMIT_BYTES / 1e9:.0f} GB)")
    else:
        def run_numpy():
            return numpy_dense_field(X, D, beta)

        t_n, out_n, tr_n = _time(run_numpy, max(1, min(reps, 3)))
        r_n = _row(case, "numpy", "ok", t_n, work, tr_n, _rel(out_n[0], out_w[0]))
        r_w["wflow_speedup_vs_numpy"] = t_n / t_w
        r_d["wflow_speedup_vs_numpy"] = t_n / t_d

    if torch_mod is None:
        r_t = _row(case, "torch", torch_reason)
    elif not with_torch:
        r_t = _row(case, "torch", f"skipped: SDPA attention weights need ~{need_t / 1e9:.0f} "
                                  f"GB (> {DENSE_LIMIT_BYTES / 1e9:.0f} GB)")
    else:
        a = outs[2].numpy()  # (P, H, n, d): a_h before projection
        rel = float("nan")
        if n <= 1024:
            rel = _rel(a, np.stack([_kernels_a(X[p], D[p], beta) for p in range(P)]))
        r_t = _row(case, "torch", "ok (attention outputs only)", t_t[0], work, rel=rel)
        r_w["wflow_speedup_vs_torch"] = t_t[0] / t_w
        r_d["wflow_speedup_vs_torch"] = t_t[0] / t_d
    return [r_w, r_d, r_n, r_t]


#: The paired goals of issue #10: (the paper's regime, the large-n case).
PAIRED_CASES = ((200, 100, 3, 10), (4096, 8, 3, 1))


def _case_inputs(case, rng, beta):
    """(fused-pass closure, pair-heads per call) of a d-dimensional case (n, H, d, P)."""
    from wflow import kernels as _kernels

    n, H, d, P = case
    X, D = _case_arrays(case, rng)
    lap = np.zeros(H, dtype=bool)
    return (lambda: _kernels.fused_pass(X, D, None, beta, 0, lap, False, True),
            float(P) * n * n * H)


def paired_rates(cases=PAIRED_CASES, rounds=15, exp_seconds=0.05, seed=0, beta=1.0) -> dict:
    r"""The two ratios of issue #10's goals measured in alternation: each round times one
    field evaluation of ``cases[0]`` (a), one of ``cases[1]`` (b) (each the second of two
    calls in a row, so that a case does not pay for the other having evicted its data from
    the caches) and a short run of the polynomial exponential (order rotated every round),
    and forms

    .. math:: \rho_{ab} = \frac{\text{pair-heads/s}(a)}{\text{pair-heads/s}(b)},\qquad
        \rho_{b,\exp} = \frac{\text{pair-heads/s}(b)}{\text{exponentials/s}}

    from that round alone. A host whose speed drifts over minutes (a shared VM) moves the
    three measurements of a round together: within a run the quartiles of the per-round ratios
    lie within ±3%, where ratios of medians taken minutes apart ranged 0.69–0.96.
    Between fresh processes the (4096, 8, 3) case itself varied (2.7–3.3·10⁹ pair-heads/s,
    and 4000 tokens alike), so one run still says little: repeat it.

    Returns a dict: ``cases``, ``rounds``, ``ratio_ab`` and ``ratio_b_exp`` (medians),
    ``ratio_ab_q`` and ``ratio_b_exp_q`` (lower and upper quartiles), ``rate_a``, ``rate_b``,
    ``exp_rate`` (medians, per second).
    """
    from wflow import kernels as _kernels

    rng = np.random.default_rng(seed)
    cases = [tuple(int(v) for v in c) + ((1,) if len(c) == 3 else ()) for c in cases]
    (fa, wa), (fb, wb) = (_case_inputs(c, rng, beta) for c in cases)
    fa()
    fb()
    _kernels.fast_exp_rate(seconds=exp_seconds)  # compiled, warm

    def timed(f):  # the second of two calls: the case's own data in cache, as in a run
        f()
        t0 = time.perf_counter()
        f()
        return time.perf_counter() - t0

    ra, rb, re = [], [], []
    for r in range(max(1, int(rounds))):
        out = [0.0, 0.0, 0.0]
        for k in range(3):
            j = (k + r) % 3
            if j == 0:
                out[0] = wa / timed(fa)
            elif j == 1:
                out[1] = wb / timed(fb)
            else:
                out[2] = _kernels.fast_exp_rate(seconds=exp_seconds)
        ra.append(out[0])
        rb.append(out[1])
        re.append(out[2])
    ra, rb, re = np.array(ra), np.array(rb), np.array(re)

    def med_q(x):
        return float(np.median(x)), (float(np.quantile(x, 0.25)), float(np.quantile(x, 0.75)))

    ab, ab_q = med_q(ra / rb)
    be, be_q = med_q(rb / re)
    return {"cases": cases, "rounds": len(ra), "ratio_ab": ab, "ratio_ab_q": ab_q,
            "ratio_b_exp": be, "ratio_b_exp_q": be_q, "rate_a": float(np.median(ra)),
            "rate_b": float(np.median(rb)), "exp_rate": float(np.median(re))}


def format_paired(res) -> str:
    """Two lines for :func:`paired_rates`."""
    (na, Ha, da, Pa), (nb, Hb, db, Pb) = res["cases"]
    a = f"({na}, {Ha}, {da}) P={Pa}"
    b = f"({nb}, {Hb}, {db}) P={Pb}"
    return "\n".join([
        f"paired rounds ({res['rounds']}: one evaluation of each case and an exponential-rate "
        f"probe per round, ratios per round):",
        f"  {a} ÷ {b} pair rate: {res['ratio_ab']:.3f} (quartiles "
        f"{res['ratio_ab_q'][0]:.3f}–{res['ratio_ab_q'][1]:.3f}; goal ≥ 0.9)",
        f"  {b} ÷ exponential rate: {res['ratio_b_exp']:.3f} (quartiles "
        f"{res['ratio_b_exp_q'][0]:.3f}–{res['ratio_b_exp_q'][1]:.3f}; goal ≥ 0.9); "
        f"rates {res['rate_a']:.3g}, {res['rate_b']:.3g}, exp {res['exp_rate']:.3g}/s",
    ])


def _kernels_a(X, D, beta):
    """a_h(x_i) (H, n, d) by a dense softmax (to check the torch baseline)."""
    DX = np.einsum("hab,jb->hja", D, X)
    S = beta * np.einsum("ia,hja->hij", X, DX)
    S -= S.max(axis=2, keepdims=True)
    W = np.exp(S)
    W /= W.sum(axis=2, keepdims=True)
    return np.einsum("hij,hja->hia", W, DX)


def _num_threads():
    try:
        import numba

        return numba.get_num_threads()
    except Exception:  # pragma: no cover
        return 1


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------
def _fmt(v, kind):
    if isinstance(v, float) and v != v:
        return "-"
    if kind == "time":
        return f"{v * 1e3:.2f} ms" if v < 1 else f"{v:.2f} s"
    if kind == "rate":
        return f"{v:.3g}"
    if kind == "ratio":
        return f"{v:.1f}x"
    if kind == "pct":
        return f"{100 * v:.0f}%"
    if kind == "mb":
        return f"{v:.1f}"
    if kind == "rel":
        return f"{v:.1e}"
    return str(v)


_TABLE = (("case", "case", "str"), ("impl", "impl", "str"), ("time/step", "time_per_step_s", "time"),
          ("pair-heads/s", "pair_heads_per_s", "rate"), ("of exp bound", "exp_bound_fraction", "pct"),
          ("wflow vs numpy", "wflow_speedup_vs_numpy", "ratio"),
          ("wflow vs torch", "wflow_speedup_vs_torch", "ratio"),
          ("traced MB", "traced_MB", "mb"), ("maxrss MB", "maxrss_MB", "mb"),
          ("rel diff v", "max_rel_diff_velocity", "rel"), ("status", "status", "str"))


def format_table(rows) -> str:
    """A plain-text table of :func:`run_bench` rows, with a legend."""
    head = [h for h, _, _ in _TABLE]
    body = [[_fmt(r.get(k, float("nan")), kind) for _, k, kind in _TABLE] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)) for b in body]
    lines += [
        "",
        "time/step: median wall time of one field evaluation (after a warm-up call; wflow and "
        "torch interleaved);",
        "pair-heads/s = P·n²·H / time; 'wflow vs X' = time(X) / time(wflow), same run;",
        "of exp bound: pair-heads/s ÷ the polynomial exponential's rate on all threads, "
        "same run" + (f" ({rows[0].get('exp_rate', float('nan')):.3g}/s)" if rows else "") + ";",
        "traced MB: tracemalloc peak (NumPy/Python allocations) of one untimed call;",
        "maxrss MB: process high-water mark so far (getrusage), an upper bound;",
        "rel diff v: ‖baseline − wflow‖/‖wflow‖ for v (numpy, wflow no Itô), or ‖a_h − dense a_h‖"
        " (torch);",
        "wflow, no Itô: the same evaluation without the Itô sum (want_ito=False: the ledger's",
        "second pass, Runge–Kutta stages, weights without Brownian noise);",
        "torch computes the attention outputs only (no projection, no diagnostics).",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# End-to-end (the paper's Section 6)
# ---------------------------------------------------------------------------------------------
def time_section6(heads=(1, 10, 100), T=0.5, paths=10, overrides=(), T_full=20.0):
    """Time :func:`wflow.simulate` on the reference configuration of [model §9].

    n = 200, d = 3, β = 1, OU weights, Euler, Δt = 5·10⁻³, ``paths`` Monte Carlo paths,
    for each H in ``heads``, run to time ``T`` (records in memory, no file), and the time
    projected to ``T_full`` (4000 steps at T = 20) by proportion. Returns a list of dicts.
    ``T`` must cover at least 5 steps (one record interval).
    """
    import wflow

    rows = []
    for H in heads:
        ov = ["model.n=200", "model.d=3", "model.beta=1.0", f"model.heads={int(H)}",
              "weights.process=\"ou\"", "solver.method=\"euler\"", "solver.dt=0.005",
              "solver.record_every=5", f"solver.T={float(T)}", f"solver.paths={int(paths)}",
              *overrides]
        wflow.simulate(None, overrides=[*ov, "solver.T=0.025"])  # warm-up: compilation, 5 steps
        t0 = time.perf_counter()
        wflow.simulate(None, overrides=ov)
        t = time.perf_counter() - t0
        steps = int(round(T / 0.005))
        rows.append({"H": int(H), "paths": int(paths), "T": float(T), "steps": steps,
                     "seconds": t, "seconds_per_step": t / steps,
                     "projected_seconds_T_full": t / steps * round(T_full / 0.005)})
    return rows


# ---------------------------------------------------------------------- full steps
STEP_CASES = ((200, 10, 3, 10), (200, 100, 3, 10), (4096, 8, 3, 1))


def _step_config(n, H, d, P, backend, ledger=True):
    return {"model": {"n": n, "d": d, "heads": H},
            "solver": {"dt": 0.005, "T": 1.0, "record_every": 200, "paths": P,
                       "backend": backend},
            "diagnostics": {"ledger": ledger, "clustering": False},
            "output": {"store_tokens": False}}


def time_full_step(n, H, d, P, backend="numba", steps=5, ledger=True):
    """Seconds per full simulation step (Euler, OU weights, every diagnostic and the exact
    ledger: two field evaluations per step, joined into one call of 2P paths where
    :meth:`~wflow.model.attention.AttentionModel.evaluate_pair` can), median-free mean over
    ``steps`` after a warm-up."""
    from wflow.engine.run import Simulation

    sim = Simulation(_step_config(n, H, d, P, backend, ledger))
    sim.run(stop_after=1)  # warm-up (compilation)
    st = sim.initial_state()
    t0 = time.perf_counter()
    sim.run(state=st, stop_after=steps)
    return (time.perf_counter() - t0) / steps


def step_bench(cases=STEP_CASES, steps=5, numpy_steps=2):
    """Rows: full step with all diagnostics, wflow (numba) vs the plain NumPy dense reference
    backend (``solver.backend = "numpy"``: n × n arrays per head, one pass per quantity)."""
    rows = []
    for n, H, d, P in cases:
        tw = time_full_step(n, H, d, P, "numba", steps)
        tn = time_full_step(n, H, d, P, "numpy", numpy_steps)
        rows.append({"case": f"({n}, {H}, {d}) P={P}", "wflow_step_s": tw, "numpy_step_s": tn,
                     "ratio": tn / tw})
    return rows


def format_step_table(rows) -> str:
    lines = [f"{'case':<22}{'wflow step':>14}{'numpy-ref step':>16}{'ratio':>9}"]
    for r in rows:
        lines.append(f"{r['case']:<22}{r['wflow_step_s'] * 1e3:>11.2f} ms"
                     f"{r['numpy_step_s'] * 1e3:>13.1f} ms{r['ratio']:>8.1f}x")
    lines.append("full step = Euler + OU draw + every diagnostic + the exact ledger (2 field "
                 "evaluations, one call of 2P paths on the symmetric pass); numpy-ref = the same "
                 "loop on wflow.core._reference")
    return "\n".join(lines)


def memory_probe(n=100_000, H=4, d=3, ledger=True):
    """One full step at n tokens in a fresh subprocess; returns (seconds, peak RSS MB).

    The peak is the child's VmHWM (/proc/self/status): ``ru_maxrss`` would carry the
    parent's high-water mark across fork + exec on Linux.
    """
    import json
    import subprocess
    import sys

    code = (
        "import json, resource, time\n"
        "from wflow.engine.run import Simulation\n"
        f"sim = Simulation({_step_config(n, H, d, 1, 'numba', ledger)!r})\n"
        "sim.run(stop_after=0)\n"
        "t0 = time.perf_counter(); sim.run(stop_after=1); t = time.perf_counter() - t0\n"
        "hwm = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')]\n"
        "mb = hwm[0] / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "print(json.dumps([t, mb]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    t, mb = json.loads(out.stdout.strip().splitlines()[-1])
    return t, mb


def section6_end_to_end(T=20.0, ledger=False, heads=(1, 10, 100), paths=10):
    """Wall time of the paper's Section 6 (OU H × ``paths`` paths + oscillating H × 1 path),
    in memory (no files); returns (total seconds, per-task list)."""
    from wflow.engine.run import Simulation
    from wflow.lab.studies import StudyOptions, get_study

    opts = StudyOptions(ledger=ledger,
                        overrides=(f"solver.T={float(T)}", f"solver.paths={int(paths)}"))
    tasks = [(name, cfg) for name, cfg in get_study("section6").tasks(opts)
             if cfg["model"]["heads"] in heads]
    Simulation(tasks[0][1]).run(stop_after=1)  # compile once, outside the timing
    per = []
    t0 = time.perf_counter()
    for name, cfg in tasks:
        t1 = time.perf_counter()
        Simulation(cfg).run()
        per.append((name, time.perf_counter() - t1))
    return time.perf_counter() - t0, per


# the contention benchmark lives in its own module; re-exported here for `wflow bench`
from wflow.lab.contention import contention_bench, format_contention_table  # noqa: E402,F401
