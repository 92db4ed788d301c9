"""Convergence orders on an analytic case: two tokens with D = I [model §2]."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import wflow
from wflow.integrators import EULER, HEUN, RK4, RungeKutta, integrate


def rho_exact(rho0, T, beta, sigma):
    r"""Two tokens, H = 1, D = V = I, head normalisation: with ρ = ⟨x₁, x₂⟩,
    v₁ = π₁₂ (x₂ − ρ x₁), π₁₂ = 1/(1 + e^{β(1−ρ)}), so
    dρ/dt = 2σ (1 − ρ²) / (1 + e^{β(1−ρ)})."""
    f = lambda t, r: 2 * sigma * (1 - r**2) / (1 + np.exp(beta * (1 - r)))
    sol = solve_ivp(f, (0, T), [rho0], method="DOP853", rtol=1e-13, atol=1e-15)
    return sol.y[0, -1]


@pytest.mark.parametrize("tab,order", [(EULER, 1), (HEUN, 2), (RK4, 4)])
@pytest.mark.parametrize("sigma", [1.0, -1.0])
def test_two_token_orders(tab, order, sigma):
    beta, T, theta0 = 1.5, 1.0, 2.0
    X0 = np.array([[1.0, 0.0, 0.0], [np.cos(theta0), np.sin(theta0), 0.0]])
    D = np.eye(3)[None]
    ref = rho_exact(np.cos(theta0), T, beta, sigma)
    F = lambda Y: sigma * wflow.field(Y, D, beta=beta, backend="numpy").velocity
    solver = RungeKutta(tab)
    assert solver.order == order
    dts = np.array([0.1, 0.05, 0.025, 0.0125])
    errs = []
    for dt in dts:
        X = integrate(F, X0, dt, int(round(T / dt)), solver)
        errs.append(abs(X[0] @ X[1] - ref))
    slope = np.polyfit(np.log(dts), np.log(errs), 1)[0]
    assert abs(slope - order) < 0.3, (errs, slope)


def test_euler_is_the_reference_update():
    rng = np.random.default_rng(0)
    X = wflow.sphere.uniform(5, 3, rng)
    V = wflow.sphere.project(X, rng.standard_normal((5, 3)))
    X1 = RungeKutta(EULER).step(lambda Y: V, X, 0.01)
    np.testing.assert_allclose(X1, wflow.sphere.normalize(X + 0.01 * V), rtol=0, atol=0)
