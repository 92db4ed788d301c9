r"""Adaptive steps on the sphere: an embedded pair under a PI controller, per path [model §6d].

.. math::

    x' = R_x\Big(h\sum_i b_i K_i\Big),\quad e = h\sum_i (b_i - \hat b_i) K_i,\quad
    h_{\text{new}} = h\,\min\big(10, \max(0.2,\ 0.9\,\mathrm{err}^{-0.7/k}\,
    \mathrm{err}_{\text{prev}}^{0.4/k})\big),\ k = \hat p + 1 .

Each path has its own time, step, error history and counters; one round advances every
unfinished path by its own step, and the field of path p sees path p's data alone, so a
path's result does not depend on its batch. The weights D of a deterministic process are
integrated with the tokens by the same stages (Euclidean, no retraction) and enter the error
norm; at a breakpoint the step ends exactly there and D is reset. Records at shared times come
from each path's cubic Hermite interpolant (order 3) between its step ends. Knows nothing
about attention: it sees a field ``F(Y, D, t)`` and a drift ``f(D, t)``.
"""

from __future__ import annotations

import numpy as np

from wflow.errors import NumericalError
from wflow.geometry import sphere
from wflow.model.processes import deterministic_text, is_deterministic
from wflow.params import Boolean, Choice, Integer, Interval, Param, When, bad, choices_text, declare
from wflow.stepping.integrators import TABLEAUX
from wflow.stepping.registry import register_series

__all__ = ["Adaptive", "hermite", "ADAPTIVE_SERIES", "FAC_MIN", "FAC_MAX", "SAFETY",
           "LOOP_STATE"]

#: controller constants [model §6d]
FAC_MIN, FAC_MAX, SAFETY = 0.2, 10.0, 0.9
#: a step within this fraction of its length short of a stop is stretched onto the stop
LAND_FRACTION = 1e-3
#: the smallest step, relative to max(|t|, the first step): below it t + h barely moves t
H_FLOOR = 64 * np.finfo(float).eps

#: the arrays of the loop state a checkpoint holds [model §6d, "Checkpoints"]: per path the
#: time, step, controller memory (last accepted error, rejection flag), counters, next stop
#: and next record, event time and stop flag, state (X, D) and first stage (K1, G1: first same
#: as last), and the records filled so far (Xr, Dr, ``stats_<series>``)
LOOP_STATE = ("t", "h", "err_prev", "was_rejected", "acc", "rej", "evals", "sp", "rp",
              "t_event", "last_h", "stopped", "X", "D", "K1", "G1", "Xr", "Dr")

ADAPTIVE_SERIES = (
    register_series("steps_accepted", "accepted steps of the path up to the record (adaptive)",
                    "steps"),
    register_series("steps_rejected", "rejected steps of the path up to the record (adaptive)",
                    "steps"),
    register_series("field_evals", "field evaluations of the path up to the end of the step "
                    "covering the record (adaptive)", "evaluations"),
    register_series("step_size", "the accepted step covering the record (adaptive)", "time"),
    register_series("event_time", "the path's first crossing of solver.event (adaptive; NaN: "
                    "none up to T)", "time"),
)


def hermite(y0, y1, f0, f1, h, theta):
    r"""Cubic Hermite interpolant on a step, order 3 [model §6d].

    .. math::

        y(t + \theta h) = (2\theta^3 - 3\theta^2 + 1) y_0 + (\theta^3 - 2\theta^2 + \theta) h f_0
        + (-2\theta^3 + 3\theta^2) y_1 + (\theta^3 - \theta^2) h f_1 .
    """
    t2, t3 = theta * theta, theta * theta * theta
    return ((2 * t3 - 3 * t2 + 1) * y0 + (t3 - 2 * t2 + theta) * h * f0
            + (-2 * t3 + 3 * t2) * y1 + (t3 - t2) * h * f1)


def _rms(e, scale):
    """Per-path root mean square of e/scale over every axis but the first."""
    q = (e / scale).reshape(e.shape[0], -1)
    return np.sqrt(np.mean(q * q, axis=1))


def _dense(x0, x1, k0, k1, d0, d1, g, h):
    """θ -> (tokens, weights) of one path's step from its dense output (weights constant
    when ``g`` is None, else the Hermite cubic of (d0, d1) with slopes g = (g0, g1))."""
    def at(theta):
        X = sphere.normalize(hermite(x0, x1, k0, k1, h, theta))
        return X, (d1 if g is None else hermite(d0, d1, g[0], g[1], h, theta))
    return at


class Adaptive:
    r"""An embedded pair under the PI controller of [model §6d], each path on its own.

    Parameters
    ----------
    tableau : ButcherTableau
        An embedded pair (``b_hat`` set), first same as last.
    rtol, atol : float
        Tolerances of the error norm, in (0, 1).
    h0 : float
        The first step of every path.
    max_steps : int
        Attempted steps per path before the run stops with :class:`NumericalError`.
    retraction : callable (X, U) -> X'
    """

    series = ADAPTIVE_SERIES

    def __init__(self, tableau, rtol, atol, h0, max_steps, retraction=sphere.retract):
        if not tableau.embedded or not tableau.fsal:
            raise ValueError(f"{tableau.name}: adaptive steps need an embedded pair whose last "
                             "stage is the new point (first same as last)")
        self.tableau, self.rtol, self.atol = tableau, float(rtol), float(atol)
        self.h0, self.max_steps, self.retraction = float(h0), int(max_steps), retraction
        self.k = tableau.order_hat + 1

    @property
    def name(self) -> str:
        return self.tableau.name

    @property
    def order(self) -> int:
        return self.tableau.order

    def _scale(self, a, b):
        return self.atol + self.rtol * np.maximum(np.abs(a), np.abs(b))

    def solve(self, field, X0, D0, T, record_times, drift=None, breakpoints=(), reset=None,
              stop_at_records=False, event=None, event_tol=1e-6, event_stop=False,
              state=None, checkpoint=None, checkpoint_every=0):
        r"""Integrate every path from t = 0 to T; the state at ``record_times``.

        Parameters
        ----------
        field : callable (Y (m, n, d), D (m, ...), t (m,)) -> (m, n, d), the token velocity.
        X0 : (P, n, d) unit tokens. D0 : (P, ...) weights.
        T : float, final time. record_times : increasing times in [0, T], the first 0.
        drift : callable (D (m, ...), t (m,)) -> (m, ...), or None for constant weights.
        breakpoints : times in (0, T) the steps end on exactly; ``reset(t)`` gives the weights
            from a breakpoint on (broadcast to every path), or None to keep them.
        stop_at_records : also end steps exactly on the record times.
        event : callable X (m, n, d) -> g (m,), or None, per path (a path's g does not depend
            on its batch: it is evaluated on the batch of the paths that just stepped). The
            event of a path is the first time
            g ≥ 0, located within ``event_tol`` by bisection on the step's dense output
            (g at step ends is checked; a crossing and recrossing inside one step is missed).
            With ``event_stop`` the path stops there: its later records repeat its state at
            the event and its counters stay.
        state : mapping, optional
            The loop state of an earlier call (what ``checkpoint`` received): the loop goes on
            from it, bit-identically to an uninterrupted call with the same arguments
            [model §6d, "Checkpoints"]; ``X0``, ``D0`` are then only read for their shapes.
        checkpoint : callable (mapping) -> None, optional
            Receives the loop state (arrays, see :data:`LOOP_STATE`, and ``rounds``) after
            every ``checkpoint_every`` rounds (a round advances every unfinished path by one
            attempted step) while some path is unfinished.

        Returns
        -------
        X (R, P, n, d), D (R, P, ...), stats {name: (R, P)} of :data:`ADAPTIVE_SERIES`.
        """
        tab = self.tableau
        s = tab.stages
        A = [np.asarray(row, dtype=float) for row in tab.A]
        e_w = np.asarray(tab.b, float) - np.asarray(tab.b_hat, float)
        X, D = np.array(X0, dtype=float), np.array(D0, dtype=float)
        P = X.shape[0]
        times = np.asarray(record_times, dtype=float)
        R = len(times)
        bps = sorted(float(x) for x in breakpoints if 0.0 < x < T)
        stops = set(bps) | {float(T)}
        if stop_at_records:
            stops |= {float(x) for x in times if 0.0 < x < T}
        stops = np.array(sorted(stops))
        bp_set = frozenset(bps)
        Xr = np.full((R,) + X.shape, np.nan)
        Dr = np.full((R,) + D.shape, np.nan)
        stats = {name: np.zeros((R, P)) for name in self.series}
        stats["step_size"][:] = np.nan
        t = np.zeros(P)
        h = np.full(P, self.h0)
        err_prev = np.ones(P)
        was_rejected = np.zeros(P, dtype=bool)
        acc, rej, evals = np.zeros(P, int), np.zeros(P, int), np.ones(P, int)
        sp = np.zeros(P, int)  # next stop of each path
        rp = np.zeros(P, int)  # next record of each path
        zero = np.zeros(P)
        t_event, last_h = np.full(P, np.nan), np.full(P, np.nan)
        stopped = np.zeros(P, dtype=bool)
        rounds = 0
        if state is None:
            if event is not None:  # an event at t = 0
                fired = event(X) >= 0
                t_event[fired] = 0.0
                stopped = fired & bool(event_stop)
            K1 = field(X, D, zero)
            G1 = drift(D, zero) if drift is not None else None
            r0 = int(np.searchsorted(times, 0.0, side="right"))  # the records at t = 0
            Xr[:r0], Dr[:r0] = X, D
            stats["field_evals"][:r0] = 1
            rp[:] = r0
        else:  # go on from a checkpoint [model §6d]
            st = {k: np.array(v) for k, v in state.items()}
            rounds = int(st["rounds"])
            t, h, err_prev, t_event, last_h = (st[k].astype(float) for k in
                                                ("t", "h", "err_prev", "t_event", "last_h"))
            was_rejected, stopped = st["was_rejected"] != 0, st["stopped"] != 0
            acc, rej, evals, sp, rp = (st[k].astype(int) for k in
                                       ("acc", "rej", "evals", "sp", "rp"))
            X, D, K1, Xr, Dr = (st[k].astype(float) for k in ("X", "D", "K1", "Xr", "Dr"))
            G1 = st["G1"].astype(float) if drift is not None else None
            for name in self.series:
                stats[name] = st["stats_" + name].astype(float)
        start = rounds
        active = (t < T) & ~stopped
        while np.any(active):
            if checkpoint is not None and checkpoint_every and rounds != start \
                    and rounds % checkpoint_every == 0:
                snap = {"rounds": np.int64(rounds), "t": t, "h": h, "err_prev": err_prev,
                        "t_event": t_event, "last_h": last_h,
                        "was_rejected": was_rejected.astype(np.int8),
                        "stopped": stopped.astype(np.int8), "acc": acc, "rej": rej,
                        "evals": evals, "sp": sp, "rp": rp, "X": X, "D": D, "K1": K1,
                        "Xr": Xr, "Dr": Dr,
                        **{"stats_" + name: stats[name] for name in self.series}}
                if G1 is not None:
                    snap["G1"] = G1
                checkpoint(snap)
            rounds += 1
            idx = np.flatnonzero(active)
            m = idx.size
            ts, Xs, Ds = t[idx], X[idx], D[idx]
            bad = ~np.all(np.isfinite(K1[idx].reshape(m, -1)), axis=1)
            if np.any(bad):  # the field at an accepted point: no step can be estimated
                j = int(idx[np.argmax(bad)])
                raise NumericalError(f"non-finite field on path {j} at t = {t[j]:.6g}: the "
                                     "error estimate cannot be formed; the run stops here",
                                     step=int(acc[j]))
            stop = stops[sp[idx]]
            hh = h[idx]
            land = ts + hh * (1.0 + LAND_FRACTION) >= stop
            hh = np.where(land, stop - ts, hh)
            hX = hh[:, None, None]
            hD = hh.reshape((m,) + (1,) * (D.ndim - 1))
            K, G = [K1[idx]], [G1[idx]] if G1 is not None else None
            for i in range(1, s):
                U = sum(a * Kj for a, Kj in zip(A[i][:i], K) if a != 0.0)
                Y = self.retraction(Xs, hX * U)
                ti = ts + tab.c[i] * hh
                if G is not None:
                    Di = Ds + hD * sum(a * Gj for a, Gj in zip(A[i][:i], G) if a != 0.0)
                else:
                    Di = Ds
                K.append(field(Y, Di, ti))
                if G is not None:
                    G.append(drift(Di, ti))
            Xn, Dn = Y, Di  # first same as last: the last stage point is the new point
            eX = hX * sum(w * Kj for w, Kj in zip(e_w, K) if w != 0.0)
            err = _rms(eX, self._scale(Xs, Xn))
            if G is not None:
                eD = hD * sum(w * Gj for w, Gj in zip(e_w, G) if w != 0.0)
                err = np.maximum(err, _rms(eD, self._scale(Ds, Dn)))
            evals[idx] += s - 1
            ok = np.isfinite(err) & (err <= 1.0)
            e_safe = np.where(np.isfinite(err), np.maximum(err, 1e-10), np.inf)
            # the controller [model §6d]
            fac_acc = SAFETY * e_safe ** (-0.7 / self.k) * err_prev[idx] ** (0.4 / self.k)
            fac_acc = np.clip(fac_acc, FAC_MIN, FAC_MAX)
            fac_acc = np.where(was_rejected[idx], np.minimum(fac_acc, 1.0), fac_acc)
            fac_rej = np.maximum(FAC_MIN, SAFETY * e_safe ** (-1.0 / self.k))
            fac_rej = np.where(np.isfinite(fac_rej), fac_rej, FAC_MIN)
            h[idx] = hh * np.where(ok, fac_acc, fac_rej)
            was_rejected[idx] = ~ok
            rej[idx] += ~ok
            floor = H_FLOOR * np.maximum(np.abs(ts), self.h0)
            if np.any(h[idx] < floor):  # t + h would not move t, or no step is accepted
                jj = int(np.argmax(h[idx] < floor))
                j = int(idx[jj])
                why = ("the error estimate is not finite" if not np.isfinite(err[jj])
                       else f"the error estimate is {err[jj]:.3g} of the tolerance")
                raise NumericalError(f"step size {h[j]:.3g} on path {j} at t = {t[j]:.6g} is "
                                     f"below the floor {floor[jj]:.3g} ({why}); the run stops "
                                     "here", step=int(acc[j]))
            if np.any(acc[idx] + rej[idx] > self.max_steps):
                j = int(idx[np.argmax(acc[idx] + rej[idx] > self.max_steps)])
                raise NumericalError(f"solver.max_steps = {self.max_steps} reached on path {j} "
                                     f"at t = {t[j]:.6g} (step {h[j]:.3g}); the run stops here",
                                     step=int(acc[j]))
            fire = np.zeros(m, dtype=bool)
            if event is not None:  # g at the new step ends, one call for the batch
                chk = np.flatnonzero(ok & np.isnan(t_event[idx]))
                if chk.size:
                    fire[chk] = event(Xn[chk]) >= 0
            for jj in np.flatnonzero(ok):
                j = int(idx[jj])
                t0, t1 = ts[jj], (stop[jj] if land[jj] else ts[jj] + hh[jj])
                acc[j] += 1
                last_h[j] = hh[jj]
                err_prev[j] = e_safe[jj]
                X[j], D[j], t[j] = Xn[jj], Dn[jj], t1
                K1[j] = K[-1][jj]
                if G1 is not None:
                    G1[j] = G[-1][jj]
                if fire[jj]:
                    dense = _dense(Xs[jj], Xn[jj], K[0][jj], K[-1][jj], Ds[jj], Dn[jj],
                                   None if G is None else (G[0][jj], G[-1][jj]), hh[jj])
                    lo, hi = 0.0, 1.0
                    while (hi - lo) * hh[jj] > event_tol:
                        mid = 0.5 * (lo + hi)
                        if event(dense(mid)[0][None])[0] >= 0:
                            hi = mid
                        else:
                            lo = mid
                    t_event[j] = t0 + hi * hh[jj] if hi < 1.0 else t1
                    if event_stop:
                        stopped[j] = True
                        if hi < 1.0:
                            t1 = t[j] = t_event[j]
                            X[j], D[j] = dense(hi)
                            land[jj] = False
                if land[jj]:
                    sp[j] += 1
                    if t1 in bp_set and reset is not None:  # the new weights from t1 on
                        D[j] = reset(t1)
                        K1[j] = field(X[j : j + 1], D[j : j + 1], t[j : j + 1])[0]
                        if G1 is not None:
                            G1[j] = drift(D[j : j + 1], t[j : j + 1])[0]
                        evals[j] += 1
                while rp[j] < R and times[rp[j]] <= t1:
                    r = int(rp[j])
                    if times[r] == t1:
                        Xr[r, j], Dr[r, j] = X[j], D[j]
                    else:
                        th = (times[r] - t0) / hh[jj]
                        Xr[r, j] = sphere.normalize(hermite(Xs[jj], Xn[jj], K[0][jj], K[-1][jj],
                                                            hh[jj], th))
                        Dr[r, j] = (Dn[jj] if G is None else
                                    hermite(Ds[jj], Dn[jj], G[0][jj], G[-1][jj], hh[jj], th))
                    stats["steps_accepted"][r, j] = acc[j]
                    stats["steps_rejected"][r, j] = rej[j]
                    stats["field_evals"][r, j] = evals[j]
                    stats["step_size"][r, j] = hh[jj]
                    rp[j] += 1
            active = (t < T) & ~stopped
        for j in np.flatnonzero(stopped):  # a stopped path keeps its state at the event
            Xr[rp[j]:, j], Dr[rp[j]:, j] = X[j], D[j]
            for name, v in (("steps_accepted", acc[j]), ("steps_rejected", rej[j]),
                            ("field_evals", evals[j]), ("step_size", last_h[j])):
                stats[name][rp[j]:, j] = v
        stats["event_time"][:] = t_event
        return Xr, Dr, stats


# ------------------------------------------------------------------ configuration keys

#: solver.event: the per-path statistics an event may watch (the clustering series of §8)
EVENT_SERIES = ("", "merged_fraction", "n_clusters", "order_parameter", "min_cosine",
                "variance", "spectral_rank")


def _adaptive_rule(cfg):
    """Adaptive steps [model §6d]: an embedded pair, particles, deterministic weights, no
    token noise."""
    s = cfg["solver"]
    if not s["adaptive"]:
        return
    where = "with solver.adaptive = true"
    tab = TABLEAUX.get(s["method"])
    if tab is None or not tab.embedded:
        pairs = tuple(n for n, t in TABLEAUX.items() if t.embedded)
        raise bad("solver.method", s["method"], f"has no error estimate: allowed values {where} "
                                                f"are {choices_text(pairs)}")
    if s["representation"] != "particles":
        raise bad("solver.representation", s["representation"],
                  f"must be 'particles' {where} (the density's SSP substeps have no error "
                  "estimate)")
    proc = cfg["weights"]["process"]
    if not is_deterministic(proc, cfg["weights"]):
        raise bad("weights.process", proc,
                  f"must be a deterministic process ({deterministic_text()}) {where}: "
                  "noise would need a Brownian path queried at any time (not in wflow)")
    diffusion = cfg["model"].get("diffusion", 0)
    if diffusion:
        raise bad("model.diffusion", diffusion, f"must be 0 {where} (token noise, [model §6d])")


declare(
    Param("solver.adaptive", False, Boolean(),
          "adaptive steps: an embedded pair (bs32, dopri5, tsit5) under a PI controller, each "
          "path on its own, first step solver.dt [model §6d]", rule=_adaptive_rule),
    Param("solver.rtol", 1e-6, Interval(0, 1, "neither"), "adaptive: relative tolerance",
          applies=When("solver.adaptive", True)),
    Param("solver.atol", 1e-8, Interval(0, 1, "neither"), "adaptive: absolute tolerance",
          applies=When("solver.adaptive", True)),
    Param("solver.max_steps", 10_000_000, Integer(lo=1),
          "adaptive: attempted steps per path before the run stops",
          applies=When("solver.adaptive", True)),
    Param("solver.stop_at_records", False, Boolean(),
          "adaptive: end steps exactly on the record times (else dense output, order 3)",
          applies=When("solver.adaptive", True)),
    Param("solver.event", "", Choice(EVENT_SERIES),
          "adaptive: the per-path statistic whose first crossing of solver.event_threshold is "
          "located ('' none) [model §6d]", applies=When("solver.adaptive", True)),
    Param("solver.event_threshold", 0.5, Interval(None, None, "neither"),
          "adaptive: the event's threshold", applies=When("solver.event", EVENT_SERIES[1:])),
    Param("solver.event_direction", "up", Choice(("up", "down")),
          "adaptive: up: the statistic >= threshold; down: <= threshold",
          applies=When("solver.event", EVENT_SERIES[1:])),
    Param("solver.event_stop", False, Boolean(),
          "adaptive: a path stops at its event (the run ends when every path has)",
          applies=When("solver.event", EVENT_SERIES[1:])),
    Param("solver.event_tol", 1e-6, Interval(0, None, "neither"),
          "adaptive: the event time's bisection tolerance",
          applies=When("solver.event", EVENT_SERIES[1:])),
    after="solver.record_every")
