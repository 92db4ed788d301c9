"""Half-merge event times at matched accuracy: adaptive pairs against fixed-step Euler on the
metastable case of the metastability page's speed section (a quick version) [model §6d].

    python experiments/adaptive_events.py [--paths 8] [--T 300] [--record-every 10]

n = 32 tokens on S¹ (d = 2), β = 6, head normalisation, ascent (the clustering
sign, as the phase study), D = V = I, uniform tokens, one system
per path, frozen weights. The event is merged_fraction ≥ 1/2 (pairs with cosine > 0.999).
Reference: dopri5 at rtol = atol = 1e-10 (event_tol 1e-8). Adaptive runs stop each path at
its event (``solver.event_stop``); their cost is the mean ``field_evals`` per path. Euler at
Δt = 0.01 runs to T; its event time is the first record with merged_fraction ≥ 1/2
(records every ``record_every`` steps, so its time resolution is record_every·Δt), its cost
the steps up to that record (one evaluation each). Paths without an event by T (in the
reference) are left out. Prints the largest and median event-time errors and the costs.
"""

from __future__ import annotations

import argparse

import numpy as np

import wflow


def _base(T, P):
    return ["model.n=32", "model.d=2", "model.beta=6.0", 'model.normalization="head"',
            'model.sign="ascent"', 'model.values="identity"',
            'init.tokens="uniform"', "init.per_path_tokens=true", 'init.weights="identity"',
            'weights.process="frozen"', f"solver.T={T}", "solver.dt=0.01", f"solver.paths={P}",
            "diagnostics.ledger=false"]


def adaptive(method, tol, T, P, event_tol=1e-6):
    r = wflow.simulate(overrides=_base(T, P) + [
        "solver.adaptive=true", f'solver.method="{method}"', f"solver.rtol={tol}",
        f"solver.atol={tol}", 'solver.event="merged_fraction"', "solver.event_threshold=0.5",
        "solver.event_stop=true", f"solver.event_tol={event_tol}",
        f"solver.record_every={int(round(T / 0.01))}", "output.store_tokens=false"])
    return r.event_time[0], r.field_evals[-1]


def euler(T, P, every):
    r = wflow.simulate(overrides=_base(T, P) + [f"solver.record_every={every}",
                                                "output.store_tokens=false"])
    hit = r.merged_fraction >= 0.5
    first = np.where(hit.any(axis=0), hit.argmax(axis=0), -1)
    t = np.where(first >= 0, r.t[first], np.nan)
    return t, np.where(first >= 0, np.round(t / 0.01), np.round(T / 0.01))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--paths", type=int, default=8)
    ap.add_argument("--T", type=float, default=300.0)
    ap.add_argument("--record-every", type=int, default=10)
    a = ap.parse_args(argv)
    T, P = a.T, a.paths
    ref, _ = adaptive("dopri5", 1e-10, T, P, event_tol=1e-8)
    ok = np.isfinite(ref)
    print(f"reference event times (dopri5, tol 1e-10): {np.round(ref, 3)}")
    rows = [("euler dt=0.01",) + euler(T, P, a.record_every)]
    for m in ("bs32", "dopri5"):
        for tol in (1e-4, 1e-5, 1e-6):
            rows.append((f"{m} tol={tol:.0e}",) + adaptive(m, tol, T, P))
    for name, t, n in rows:
        e = np.abs(t - ref)[ok]
        print(f"{name:18s} event-time error max {np.max(e):9.2e} median {np.median(e):9.2e}"
              f"  field evaluations/path {np.mean(n[ok]):9.0f}")


if __name__ == "__main__":
    main()
