r"""The ``scale`` suite: the spectral summation of the field [model §2s] from n = 10³ to 10⁷.

For tokens on :math:`S^1` and :math:`S^2` (uniform, seeded), H = 1 and 10 heads, β = 1, 5, 20
(and 10 for the goal case), D = I, a random symmetric and a random general D of norm 1
(β‖D‖ = β): seconds per evaluation *with every diagnostic* (the Itô sum included: the kernel
sums, the fallback rows and the combine of :func:`wflow.model.spectral.spectral_pass`), the
degree, the flagged fraction (a case over the limit reports it instead of a time), the
observed error of Z and of the attention average at random targets against their exact sums
(O(n) each; 1000 targets, fewer where 1000·n·H exceeds :data:`CHECK_BUDGET` or
``WFLOW_SCALE_CHECK_BUDGET``: the row says how many), the peak resident memory of the
evaluation, and the direct pass (every pair, the numba kernel) up to :data:`DIRECT_MAX_N`,
never extrapolated. A last row per sphere gives the measured crossover (the smallest n where
the spectral evaluation is faster than the direct one, H = 1, β = 5, D = I).

The goals of the issue are rows of their own (``spectral seconds ÷ goal``, goal ≤ 1).

*Trimmed* to about 25 minutes on 2 quiet cores: n = 10⁷ only with H = 1 (:data:`H_AT_MAX_N`;
H = 10 there is ten times the work of H = 1 and the goals ask for H = 1), and the direct pass
with H = 10 only up to n = 10⁴ (:data:`DIRECT_MAX_N_MULTI`; at 10⁵ it takes about 20 s per
case). Run only when named: ``python -m benchmarks.run --suite scale``; a small grid (seconds)
with ``--quick`` or ``WFLOW_SCALE_MAX_N=3000``. The fallback is capped: a case whose flagged
rows would cost more than :data:`FALLBACK_BUDGET` pair terms reports its flagged fraction (the
limit is then below :data:`MAX_FLAGGED`; the row says which).
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.results import row

#: the sizes of the full run and of the reduced one (``WFLOW_SCALE_MAX_N`` in :func:`scale_suite`)
NS = (10 ** 3, 10 ** 4, 10 ** 5, 10 ** 6, 10 ** 7)
HEADS = (1, 10)
BETAS = (1.0, 5.0, 20.0)
WEIGHTS = ("identity", "symmetric", "general")
#: the direct pass is timed up to this n (beyond: minutes to hours per evaluation)
DIRECT_MAX_N = 10 ** 5
#: ... and with several heads up to this n
DIRECT_MAX_N_MULTI = 10 ** 4
#: the heads at the largest n of :data:`NS`
H_AT_MAX_N = (1,)
#: exact sums at the checked targets: at most this many pair-heads
CHECK_BUDGET = 2e9
#: (d, n, H, β, weights, seconds): the goals (2 cores)
GOALS = ((3, 10 ** 6, 10, 10.0, "general", 5.0), (3, 10 ** 7, 1, 5.0, "general", 30.0),
         (2, 10 ** 7, 1, 5.0, "general", 10.0))
MAX_FLAGGED = 0.1
#: the fallback's direct rows cost n·H pair terms each: beyond this many in all, a case reports
#: its flagged fraction instead of a time (10⁶ tokens, H = 10: 500 rows)
FALLBACK_BUDGET = 5e9


def _weights(kind, d, H, rng):
    if kind == "identity":
        return np.broadcast_to(np.eye(d), (H, d, d)).copy()
    A = rng.standard_normal((H, d, d))
    if kind == "symmetric":
        A = A + np.swapaxes(A, 1, 2)
    return A / np.linalg.norm(A, 2, axis=(1, 2))[:, None, None]


def _tokens(n, d, rng):
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _reset_peak():
    """Reset the process' peak RSS (Linux ≥ 4.0); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_mb():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _spectral(X, D, beta):
    """One evaluation (every diagnostic) and its sums: (seconds, S0, SX, report numbers)."""
    from wflow.model import spectral as ms

    t0 = time.perf_counter()
    n, H = X.shape[0], D.shape[0]
    limit = min(MAX_FLAGGED, FALLBACK_BUDGET / (float(n) * n * H))
    S0, SX, SI, L, frac, kept = ms.kernel_sums(X, D, beta, ms.TOL, limit, ito=True)
    ms.combine(X, D, D, S0, SX, SI, beta, "head", np.zeros(D.shape[0], bool), False, "mean")
    return time.perf_counter() - t0, S0, SX, L, frac


def _tables(d, n, D, beta):
    """Build the tables of the degree the rule gives this case (the first pass's; a second pass
    at a higher degree, for indefinite D, still builds its own) before the timing, as a run has
    them from its first step on: the seconds taken (≈ 0 where already built, and on S¹)."""
    from wflow.kernels import spectral as ks
    from wflow.model import spectral as ms

    L, _ = ms.rule_degree(beta, D, d, n)
    if L > ks.L_MAX[d]:
        return 0.0
    t0 = time.perf_counter()
    ks.prepare(d, L)
    return time.perf_counter() - t0


def _direct(X, D, beta, interaction):
    from wflow.model.attention import AttentionModel

    m = AttentionModel(beta=beta, interaction=interaction)
    m.evaluate(X[None], D[None])  # compiled (for this route) before the timing
    t0 = time.perf_counter()
    m.evaluate(X[None], D[None])
    return time.perf_counter() - t0


def _case(d, n, H, beta, kind, seed, goal=None, direct_max_n=DIRECT_MAX_N):
    from wflow.errors import NumericalError
    from wflow.kernels.spectral import direct_rows

    rng = np.random.default_rng(seed)
    X = _tokens(n, d, rng)
    D = _weights(kind, d, H, rng)
    label = f"S{d - 1} n={n:.0e} H={H} beta={beta:g} D={kind}"
    tables = _tables(d, n, D, beta)
    _reset_peak()
    try:
        t, S0, SX, L, frac = _spectral(X, D, beta)
    except NumericalError as e:
        return row("scale", label, "spectral (every diagnostic)", status=f"flagged over the limit: {e}",
                   data={"d": d, "n": n, "H": H, "beta": beta, "weights": kind}), None
    peak = _peak_mb()
    import os

    budget = float(os.environ.get("WFLOW_SCALE_CHECK_BUDGET", CHECK_BUDGET))
    k = int(min(1000, max(1, budget // (n * H))))
    rows = np.sort(rng.choice(n, size=min(k, n), replace=False))
    R0, RX, _ = direct_rows(X, D, beta, rows)
    s0, sx = S0[:, rows], SX[:, rows]
    err = float(np.max(np.maximum(np.abs(s0 / R0 - 1),
                                  np.linalg.norm(sx / s0[..., None] - RX / R0[..., None], axis=-1))))
    data = {"d": d, "n": n, "H": H, "beta": beta, "weights": kind, "degree": L, "flagged": frac,
            "max_error": err, "targets_checked": len(rows), "peak_rss_MB": peak, "spectral_s": t,
            "tables_s": tables}
    status = (f"ok: L={L}, flagged {100 * frac:.2g}%, max error {err:.1e} at {len(rows)} targets, "
              f"peak RSS {peak:.0f} MB" if peak else "")
    if goal is not None:
        return row("scale", label, f"spectral seconds ÷ goal {goal:g} s", t / goal, goal="≤ 1",
                   seconds=t, status=status, data=data), t
    if n <= direct_max_n:
        td = _direct(X, D, beta, "general" if kind == "general" else "symmetric")
        data["direct_s"] = td
        return row("scale", label, "direct pass ÷ spectral (every diagnostic)", td / t, seconds=t,
                   status=status, data=data), t
    return row("scale", label, "spectral (every diagnostic)", seconds=t, status=status, data=data), t


def scale_suite(quick=False, seed=0, max_n=None, direct_max_n=None, ns=NS, heads=HEADS, betas=BETAS,
                weights=WEIGHTS, goals=True):
    """The rows of the ``scale`` suite (module docstring).

    Parameters
    ----------
    quick : small cases (n = 1000, 3000; one β per sphere): checks that everything runs.
    max_n : the largest n (default: all of :data:`NS`; the environment variable
        ``WFLOW_SCALE_MAX_N`` sets it from the command line, as ``WFLOW_SCALE_BETAS`` and
        ``WFLOW_SCALE_WEIGHTS`` set the β and the weights, comma-separated).
    direct_max_n : the largest n of the direct pass (default :data:`DIRECT_MAX_N`, or
        ``WFLOW_SCALE_DIRECT_MAX_N``).
    goals : also the goal rows (:data:`GOALS`, those with n ≤ max_n).
    """
    import os

    if max_n is None:
        max_n = float(os.environ.get("WFLOW_SCALE_MAX_N", max(ns)))
    env = os.environ.get
    if env("WFLOW_SCALE_BETAS"):
        betas = tuple(float(b) for b in env("WFLOW_SCALE_BETAS").split(","))
    if env("WFLOW_SCALE_WEIGHTS"):
        weights = tuple(env("WFLOW_SCALE_WEIGHTS").split(","))
    if quick:
        ns, heads, betas, weights = (1000, 3000), (1, 2), (5.0,), ("identity", "general")
        max_n, goals = 3000, False
    if direct_max_n is None:
        direct_max_n = float(os.environ.get("WFLOW_SCALE_DIRECT_MAX_N", DIRECT_MAX_N))
    dmax = direct_max_n
    out = []
    for d in (2, 3):
        rng = np.random.default_rng(seed)  # compiled before the timings
        _spectral(_tokens(500, d, rng), _weights("general", d, 2, rng), 5.0)
        times = {}
        for n in [n for n in ns if n <= max_n]:
            for H in heads:
                if n == max(NS) and H not in H_AT_MAX_N:
                    continue
                for beta in betas:
                    for kind in weights:
                        r, t = _case(d, n, H, beta, kind, seed,
                                     direct_max_n=dmax if H == 1 else min(dmax, DIRECT_MAX_N_MULTI))
                        out.append(r)
                        if H == heads[0] and beta == betas[len(betas) // 2] and kind == weights[0]:
                            times[n] = r["data"].get("direct_s"), t
        cross = [n for n, (td, t) in sorted(times.items()) if td is not None and t is not None and t < td]
        out.append(row("scale", f"S{d - 1} H={heads[0]} beta={betas[len(betas) // 2]:g} D={weights[0]}",
                       "crossover: smallest n with spectral faster than direct",
                       status=(f"ok: n = {cross[0]:.0e}" if cross else
                               "ok: not reached up to the largest n timed directly"),
                       data={"crossover_n": cross[0] if cross else None,
                             "times": {str(n): list(v) for n, v in times.items()}}))
    if goals:
        for d, n, H, beta, kind, g in GOALS:
            if n <= max_n:
                out.append(_case(d, n, H, beta, kind, seed, goal=g)[0])
    return out
