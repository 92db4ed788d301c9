r"""The exact ledger under the spectral summation [model §6, §2s].

The recorded residual splits as :math:`\tilde R = R^* + R_{\rm sum}`: :math:`R^*` the ledger
of the exact energy along the run's trajectory (order :math:`\min(p, 2)` in Δt), and

.. math::
    R_{\rm sum} = \sum_k [e(X_{k+1}; D_k) - e(X_k; D_k)]
    - \sigma\sum_k \Delta t\,\tfrac12(\delta_k + \delta'_k),

:math:`e = \tilde E - E` and :math:`\delta = \tilde{\mathcal D} - \frac1n\sum_i\langle g_i,
\tilde v_i\rangle` the summation's own errors, bounded (frozen weights) by
:math:`F = \mathrm{tol}(E_0 + E_K) + (4 + 2\,\mathrm{tol})\beta\lVert D\rVert\nu\,\mathrm{tol}\int E\,dt`.
The tests run S¹ (n = 32, one head, D = I, β = 4, ascent) at the loosest tolerance, where the
floor is highest: on S² it sits at the round-off of the direct ledger.
"""

import numpy as np
import pytest
from test_ledger import fit_order

import wflow

TOL, BETA, N, T = 1e-3, 4.0, 32, 0.2


def _cfg(dt, method="rk4", spectral=True, seed=0, process="frozen", T=T):
    solver = {"method": method, "dt": dt, "T": T, "record_every": 1, "paths": 1}
    if spectral:
        solver.update(summation="spectral", summation_tol=TOL)
    weights = {"process": process}
    if process == "oscillating":
        weights.update(noise_var=0.0, phase="shared")
    return {"model": {"d": 2, "n": N, "heads": 1, "beta": BETA, "sign": "ascent"},
            "init": {"seed": seed, "tokens": "uniform", "weights": "identity"},
            "weights": weights, "solver": solver, "diagnostics": {"clustering": False},
            "output": {"store_tokens": True, "store_weights": True}}


def summation_floor(res, dt, sigma=1.0):
    r""":math:`R_{\rm sum}` of [model §6] from the errors of the spectral field against the
    direct one at the run's states :math:`(X_k; D_k)` and :math:`(X_{k+1}; D_k)`."""
    X, D = res.X[:, 0], res.D[:, 0]
    cache = {}

    def errors(i, Dk):
        key = (i, Dk.tobytes())
        if key not in cache:
            s = wflow.field(X[i], Dk, beta=BETA, summation="spectral", tol=TOL)
            d = wflow.field(X[i], Dk, beta=BETA)
            cache[key] = (s.energy - d.energy,
                          s.dissipation - np.mean(np.sum(d.gradient * s.velocity, axis=1)))
        return cache[key]

    total = 0.0
    for k in range(len(X) - 1):
        (e0, d0), (e1, d1) = errors(k, D[k]), errors(k + 1, D[k])
        total += (e1 - e0) - sigma * dt * 0.5 * (d0 + d1)
    return total


def bound(res, dt):
    r"""The floor's bound F of [model §6] for frozen weights (‖D‖ = ν/(1 + tol) = 1) from the
    recorded energy."""
    E = res.energy[:, 0]
    nu = 1.0 + TOL
    return TOL * (E[0] + E[-1]) + (4 + 2 * TOL) * BETA * nu * TOL * dt * np.sum(0.5 * (E[1:] + E[:-1]))


@pytest.mark.parametrize("method,min_order", [("euler", 0.9), ("rk4", 1.8)])
def test_the_ledger_closes_at_the_integrators_order_above_the_floor(method, min_order):
    """At the loosest tolerance (10⁻³) the residual of a spectral run falls at order min(p, 2),
    as the direct run's does: the floor is far below these residuals."""
    dts = [0.04, 0.02, 0.01]
    errs = [wflow.simulate(_cfg(dt, method)).ledger_residual[-1, 0] for dt in dts]
    order = fit_order(dts, errs)
    assert min_order <= order <= min_order + 0.5, (errs, order)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow),
                                  pytest.param(2, marks=pytest.mark.slow)])
def test_the_floor_is_the_summation_error(seed):
    """Frozen weights, RK4: the spectral residual minus the direct run's is the same at Δt and
    Δt/2 (the floor, where the residual levels off), equals R_sum computed from the summation's
    own errors at the run's states (the velocity's error does not enter), and lies below the
    bound F; the energy errors telescope (the weight part is exactly zero)."""
    offsets = []
    for dt in (0.02, 0.01):
        spec = wflow.simulate(_cfg(dt, seed=seed))
        direct = wflow.simulate(_cfg(dt, seed=seed, spectral=False))
        assert np.all(spec.weight_work == 0.0)
        off, floor = spec.ledger_residual[-1, 0] - direct.ledger_residual[-1, 0], summation_floor(spec, dt)
        # a floor far above the round-off of the two ledgers, far below the bound
        assert 1e4 * np.finfo(float).eps * np.max(spec.energy) < abs(floor) < bound(spec, dt)
        assert off == pytest.approx(floor, rel=0.02), (dt, off, floor)
        offsets.append(off)
    assert offsets[1] == pytest.approx(offsets[0], rel=0.02), offsets


def test_moving_weights_floor_is_the_summation_error():
    """Oscillating weights: the token part's energy errors no longer telescope (the weight steps
    change the summation error at fixed tokens), and the offset is still R_sum of the run's
    states, with a limit as Δt → 0."""
    offsets = []
    for dt in (0.02, 0.01):
        spec = wflow.simulate(_cfg(dt, process="oscillating"))
        direct = wflow.simulate(_cfg(dt, process="oscillating", spectral=False))
        assert not np.all(spec.weight_work == 0.0)
        off, floor = spec.ledger_residual[-1, 0] - direct.ledger_residual[-1, 0], summation_floor(spec, dt)
        assert abs(floor) > 1e4 * np.finfo(float).eps * np.max(spec.energy)
        assert off == pytest.approx(floor, rel=0.05), (dt, off, floor)
        offsets.append(off)
    assert offsets[1] == pytest.approx(offsets[0], rel=0.1), offsets


@pytest.mark.slow
def test_the_residual_levels_off_at_the_floor():
    """RK4 over T = 0.05 at Δt = T/400: the direct run's residual (∝ Δt²) is far below the
    floor, and the spectral run's residual is the floor R_sum (computed at Δt = T/20, where it
    is the same)."""
    short, dt = 0.05, 0.05 / 400
    floor = summation_floor(wflow.simulate(_cfg(short / 20, T=short)), short / 20)
    fine = wflow.simulate(_cfg(dt, T=short)).ledger_residual[-1, 0]
    direct = wflow.simulate(_cfg(dt, T=short, spectral=False)).ledger_residual[-1, 0]
    assert abs(direct) < 0.1 * abs(floor)
    assert fine == pytest.approx(floor, rel=0.1), (fine, floor, direct)
