r"""The ``uniform`` study's set-up: its base configuration, its scales, and the tasks of its
parts (growth, critical, sweep, particles, sphere, s2crit, s2part/s2dens) and continuation
chains (``hyst``), described in :mod:`wflow.studies.uniform` [model §6c]."""

from __future__ import annotations

import copy

import numpy as np

from wflow import config as _config
from wflow.model.uniform_state import A_CAP, Q_CAP, critical_nu, derived_rate, mode_eigenvalue
from wflow.studies._base import final_state

UNIFORM_BASE = {
    "model": {"d": 2, "n": 8, "beta": 2.0, "heads": 1, "normalization": "head",
              "sign": "ascent", "values": "identity", "diffusion": 0.0},
    "init": {"tokens": "uniform_mode", "mode": 1, "amplitude": 1e-4, "weights": "identity",
             "seed": 0},
    "weights": {"process": "frozen"},
    "solver": {"representation": "density", "method": "heun", "dt": 0.05, "T": 10.0,
               "record_every": 2, "paths": 1},
    "density": {"cells": 128},
    "diagnostics": {"ledger": False, "clustering": False},
    "output": {"store_tokens": True},
}
#: ν = ν_c (1 + δ) in the critical-ν runs
DELTAS = (-0.2, -0.1, 0.1, 0.2)
#: continuation sweeps: T per ν = min(T_max, max(T_MIN, C_RELAX/|λ_1|)), λ_1 = μ_1(ν_c − ν)
C_RELAX = 8.0
T_MIN = 20.0
#: continuation sweeps: the relative mode-1 kick ε of every link's start, ρ ← ρ(1 + ε φ_1)
KICK = 1e-3
#: ν/ν_c of the continuation sweeps (up; down is the reverse)
HYST_F = (0.85, 0.9, 0.95, 0.98, 1.02, 1.05, 1.1, 1.15)
#: the same for ``none`` β = 4, denser inside the derived window (ν_c, 1.0589 ν_c)
HYST_F4 = (0.9, 0.95, 0.98, 1.02, 1.04, 1.07, 1.1)
#: the β of the selection runs (particles from a uniform draw, ν = 0, ``head``)
SELECT_BETAS = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0)
#: the largest degree of their harmonic power (``diagnostics.harmonic_degree``)
SELECT_DEGREE = 12
#: the selection runs at full scale, (d, n, betas, draws, n/10 runs, first path)
#: (:func:`select_tasks`): n = 10⁵ on S¹ and S² with their n = 10⁴ runs, then n = 10⁶
#: (the blocks of paths fixed, so that an entry added later draws no path twice)
SELECT_RUNS = ((2, 100000, SELECT_BETAS, 3, True, None),
               (3, 100000, (3.0, 8.0, 12.0), 3, True, None),
               (3, 100000, (1.0, 2.0, 4.0, 5.0, 6.0, 10.0), 3, True, None),
               (2, 1000000, (10.0,), 3, False, 1000),
               (2, 1000000, tuple(b for b in SELECT_BETAS if b != 10.0), 3, False, 1003),
               (3, 1000000, (3.0, 8.0, 12.0, 1.0, 2.0, 4.0, 5.0, 6.0, 10.0), 3, False, 2000))
#: the cluster runs' time: T = (ln(n)/2 + SELECT_EFOLDS)/λ_max, e-folds past the n^(-1/2)
#: start (:func:`select_tasks`)
SELECT_EFOLDS = 4.0
#: S² ``none`` β = 4: the derived window is (ν_c, 1.2–1.3 ν_c)
#: (:func:`wflow.model.uniform_state.stationary_r_s2`)
HYST_F_S2 = (0.9, 1.02, 1.05, 1.1, 1.2, 1.3, 1.4)


def plateau_T(nu, beta, normalization="head", d=2, c=C_RELAX, t_min=T_MIN, t_max=1000.0,
              grow=False):
    r"""The time a continuation link at ν runs (critical slowing down):

    .. math:: T(\nu) = \min\big(T_{\max},\ \max\big(T_{\min},\ c'/\lvert\lambda_1\rvert\big)\big),
              \qquad \lambda_1 = \mu_1(\nu_c - \nu)

    (:math:`\mu_1` = 1 on S¹, 2 on S²): c' = c e-folds of the slowest linear mode, enough to
    forget the previous ν (a relative change :math:`e^{-c}`); with ``grow`` and ν < ν_c (a
    link of the down sweep, which may start at the uniform state plus the kick ``KICK``)
    :math:`c' = c + \ln(1/\varepsilon)`, the e-folds to grow from ε to O(1) first."""
    nuc = critical_nu(beta, normalization, d)
    lam = mode_eigenvalue(1, d) * abs(nuc - nu)
    if grow and nu < nuc:
        c = c + np.log(1.0 / KICK)
    return float(min(t_max, max(t_min, c / lam if lam > 0 else t_max)))


def growth_T(rate, eps, cap, Tmax):
    """A run long enough for the amplitude to reach ``cap`` (or ``Tmax``)."""
    if rate <= 0:
        return Tmax
    return float(min(Tmax, np.log(cap / eps) / rate))


def with_keys(base, **keys):
    """A copy of ``base`` with ``section__key=value`` set."""
    c = copy.deepcopy(base)
    for k, v in keys.items():
        sec, name = k.split("__")
        c.setdefault(sec, {})[name] = v
    return c


def no_mode(c):
    """Drop the perturbation keys of the ``uniform_mode`` start (another start is used)."""
    for key in ("mode", "amplitude"):
        c["init"].pop(key, None)
    return c


def as_particles(c):
    """A density configuration made a particle one: no perturbation keys, no mesh, no tokens
    stored."""
    no_mode(c)
    c.pop("density")
    c["output"]["store_tokens"] = False
    return c


def set_steps(c, T, nsteps):
    """Set T and Δt = T/nsteps (T rounded to 3 significant digits)."""
    T = float(f"{T:.3g}")
    c["solver"]["T"] = T
    c["solver"]["dt"] = T / nsteps
    c["solver"]["record_every"] = max(1, nsteps // 100)
    return c


def params(scale):
    """The grid of each part at ``scale`` ("quick" or full): cells N, the (normalisation, β)
    pairs, modes, step counts and times, and the continuation chains
    (norm, β, d, N, Δt, ν/ν_c up, T_max)."""
    if scale == "quick":
        return dict(N=64, norms=("head", "none"), betas=(2.0,), ks=(1, 2, 3),
                    check=("head", 2.0), crit=(("head", 2.0),), steps=40, crit_T=6.0,
                    sweep=(("head", 2.0),), sweep_f=(0.7,), sweep_T=20.0,
                    sweep_starts=("clustered",),
                    particles=False, sphere=False, s2crit=(), s2part=(),
                    # selection: (d, n, betas, draws, n/10 runs, first path), Heun Δt,
                    # e-folds, Δt/2 at (d, β, n) (:func:`select_tasks`)
                    select=((2, 10000, (2.0,), 3, False, None),), select_dt=0.1,
                    select_efolds=0.25,
                    select_halfdt=(),
                    hyst=(("none", 1.0, 2, 32, 0.2, (0.7, 1.3), 6.0),))
    return dict(N=128, norms=("head", "none"), betas=(1.0, 2.0, 4.0, 8.0), ks=tuple(range(1, 9)),
                check=("head", 4.0), crit=tuple((nm, b) for nm in ("head", "none")
                                                for b in (1.0, 4.0)),
                steps=400, crit_T=60.0, sweep=(("head", 1.0), ("none", 1.0), ("none", 4.0)),
                sweep_f=(0.5, 0.7, 0.85, 0.95, 1.02, 1.05, 1.1, 1.2), sweep_T=100.0,
                sweep_starts=("uniform", "clustered"),
                particles=True, sphere=True,
                select=SELECT_RUNS, select_dt=0.1, select_efolds=1.0,
                select_halfdt=((2, 4.0, 100000),),
                # S² ν_c: (norm, β) at N cells, Δt/2 at the middle N
                s2crit=(("head", 2.0), ("head", 8.0)), s2crit_N=(250, 500, 1000),
                s2crit_T=60.0,
                # S² particles beside the density: (norm, β, ν/ν_c)
                s2part=tuple(("head", 2.0, f) for f in (0.8, 0.9, 1.1)),
                # continuation sweeps: (norm, β, d, N, Δt, ν/ν_c up, T_max)
                hyst=(("none", 1.0, 2, 64, 0.2, HYST_F, 1000.0),
                      ("none", 4.0, 2, 64, 0.08, HYST_F4, 1000.0),
                      ("none", 4.0, 2, 32, 0.08, HYST_F4, 1000.0),
                      ("head", 8.0, 2, 64, 0.2, HYST_F, 3000.0),
                      # S², subcritical for none above β_* = 1.8162 (a wide window)
                      ("none", 4.0, 3, 250, 0.05, HYST_F_S2, 1000.0),
                      ("none", 4.0, 3, 500, 0.05, HYST_F_S2, 1000.0)))


def tasks(base, p):
    """The ``(name, config)`` tasks of every part but the continuation chains, from ``base``
    and the grid ``p`` (:func:`params`)."""
    out = []
    eps = base["init"]["amplitude"]

    def add(name, c):
        out.append((name, _config.validate(c)))

    # (a) growth rates without noise
    for nm in p["norms"]:
        for b in p["betas"]:
            if nm == "none" and b > 4.0:
                continue  # rates ~ e^beta: too stiff to be worth the steps
            for k in p["ks"]:
                lam = float(derived_rate(k, b, nm))
                T = growth_T(lam, eps, A_CAP, 40.0)
                variants = [("", {})]
                if (nm, b) == p["check"]:
                    variants += [("-halfN", {"density__cells": p["N"] // 2}),
                                 ("-halfdt", {"steps": 2})]
                for tag, extra in variants:
                    extra = dict(extra)
                    mult = extra.pop("steps", 1)
                    c = with_keys(base, model__normalization=nm, model__beta=b, init__mode=k,
                                  **extra)
                    set_steps(c, T, p["steps"] * mult)
                    add(f"growth-{nm}-b{b:g}-k{k}{tag}", c)
    # (b) nu_c: mode 1 around the derived nu_c
    for nm, b in p["crit"]:
        nuc = critical_nu(b, nm)
        for dl in DELTAS:
            nu = nuc * (1 + dl)
            T = min(p["crit_T"], 4.0 / abs(dl * nuc))
            for mult, tag in ((1, ""), (2, "-halfdt")):
                c = with_keys(base, model__normalization=nm, model__beta=b, model__diffusion=nu,
                              init__mode=1, init__amplitude=1e-3,
                              density__diffusion_scheme="split")
                set_steps(c, T, mult * p["steps"] // 2)
                add(f"critical-{nm}-b{b:g}-d{dl:+g}{tag}", c)
    # (b) the sweep: near-uniform and clustered starts
    for nm, b in p["sweep"]:
        nuc = critical_nu(b, nm)
        for f in p["sweep_f"]:
            for start, ini in (("uniform", {"init__tokens": "uniform_mode", "init__mode": 1,
                                            "init__amplitude": 0.05}),
                               ("clustered", {"init__tokens": "vmf", "init__kappa": 10.0})):
                if start not in p["sweep_starts"]:
                    continue
                c = with_keys(base, model__normalization=nm, model__beta=b,
                              model__diffusion=nuc * f, density__diffusion_scheme="split", **ini)
                if start == "clustered":
                    no_mode(c)
                T = p["sweep_T"]
                if nm == "none" and b > 2.0:
                    # fields ~ I_0(beta): the transport's CFL substeps cost ~ e^beta;
                    # N/2 cells and a shorter T (rates ~ nu_c are larger too)
                    c["density"]["cells"] = base["density"]["cells"] // 2
                    T = 0.4 * T
                set_steps(c, T, 5 * p["steps"] // 4)
                add(f"sweep-{nm}-b{b:g}-f{f:g}-{start}", c)
            if p["particles"] and nm == "head":
                c = with_keys(base, model__normalization=nm, model__beta=b, model__diffusion=nuc * f,
                              model__n=512, init__tokens="uniform", init__per_path_tokens=True,
                              solver__representation="particles", solver__method="euler",
                              solver__paths=4, diagnostics__clustering=True)
                as_particles(c)
                set_steps(c, p["sweep_T"] / 2, 1200)
                add(f"particles-{nm}-b{b:g}-f{f:g}", c)
    # (a) cluster count of particles at large beta, nu = 0
    if p["particles"]:
        for b in (4.0, 9.0, 16.0, 25.0):
            lam = float(np.max(derived_rate(np.arange(1, 40), b, "head")))
            c = with_keys(base, model__beta=b, model__n=512, init__tokens="uniform",
                          init__per_path_tokens=True, solver__representation="particles",
                          solver__method="euler", solver__paths=4, diagnostics__clustering=True)
            as_particles(c)
            set_steps(c, 12.0 / lam, 600)
            add(f"clusters-head-b{b:g}", c)
    out += [(name, _config.validate(c)) for name, c in select_tasks(base, p)]
    # S^2 coarse: head, degrees 1..3
    if p["sphere"]:
        for b in (2.0, 8.0):
            for ell in (1, 2, 3):
                lam = float(derived_rate(ell, b, "head", d=3))
                for Ns, tag in ((500, ""), (250, "-N250"), (1000, "-N1000")):
                    T = growth_T(lam, eps, A_CAP, 40.0)
                    for start in ("mode", "ref"):
                        c = with_keys(base, model__d=3, model__beta=b, init__mode=ell,
                                      density__cells=Ns)
                        if start == "ref":  # the uniform start on the same mesh and steps
                            c["init"]["tokens"] = "uniform"
                            no_mode(c)
                        set_steps(c, T, 200)
                        add(f"sphere{'ref' if start == 'ref' else ''}-head-b{b:g}-l{ell}{tag}",
                            c)
    # S² nu_c: degree 1 around the derived nu_c, each run paired with its uniform start
    for nm, b in p["s2crit"]:
        nuc = critical_nu(b, nm, d=3)
        for Ns in p["s2crit_N"]:
            mults = ((1, ""), (2, "-halfdt")) if Ns == p["s2crit_N"][1] else ((1, ""),)
            for dl in DELTAS:
                T = min(p["s2crit_T"], 4.0 / abs(dl * nuc))
                for mult, tag in mults:
                    for ref in (False, True):
                        c = with_keys(base, model__d=3, model__normalization=nm, model__beta=b,
                                      model__diffusion=nuc * (1 + dl), init__mode=1,
                                      init__amplitude=1e-3, density__cells=Ns,
                                      density__diffusion_scheme="split")
                        if ref:
                            c["init"]["tokens"] = "uniform"
                            no_mode(c)
                        set_steps(c, T, mult * p["steps"] // 2)
                        add(f"s2crit{'ref' if ref else ''}-{nm}-b{b:g}-N{Ns}-d{dl:+g}{tag}",
                            c)
    # S² particles beside the density (clustered start, N = 500)
    for nm, b, f in p["s2part"]:
        nu = critical_nu(b, nm, d=3) * f
        T = plateau_T(nu, b, nm, d=3, t_max=200.0)
        c = with_keys(base, model__d=3, model__normalization=nm, model__beta=b,
                      model__diffusion=nu, init__tokens="vmf", init__kappa=10.0,
                      density__cells=500, density__diffusion_scheme="split")
        no_mode(c)
        set_steps(c, T, int(round(T / 0.2)))
        add(f"s2dens-{nm}-b{b:g}-f{f:g}", c)
        if f < 1:  # the mesh dependence of the clustered state (upwind diffusion)
            for Ns in (250, 1000):
                c2 = copy.deepcopy(c)
                c2["density"]["cells"] = Ns
                add(f"s2dens-{nm}-b{b:g}-f{f:g}-N{Ns}", c2)
        c = with_keys(base, model__d=3, model__normalization=nm, model__beta=b,
                      model__diffusion=nu, model__n=512, init__tokens="uniform",
                      init__per_path_tokens=True, solver__representation="particles",
                      solver__method="euler", solver__paths=4, diagnostics__clustering=True)
        as_particles(c)
        set_steps(c, T, int(round(T / 0.05)))
        add(f"s2part-{nm}-b{b:g}-f{f:g}", c)
    return out


def select_tasks(base, p):
    r"""The selection runs [model §6c]: n uniform tokens on S¹ or S², ν = 0, ``head``,
    particles with the spectral summation [model §2s], Heun at Δt = ``select_dt``, the harmonic
    power to degree :data:`SELECT_DEGREE` at every record [model §8]. One run per (d, β) with
    ``draws`` paths, each path its own uniform draw (``init.per_path_tokens``); the runs take
    consecutive blocks of paths of the ensemble of ``init.seed`` (``init.first_path``), from
    the entry's first path (None: where the entry before ended), so no two draws are the
    same. The rate runs last
    :math:`T = (\tfrac12\ln(Q_{\rm cap}n) + e)/\lambda_{\max}`, e = ``select_efolds``: the
    leading degree from its uniform-draw power 1/n to the end of the linear phase
    (:data:`~wflow.model.uniform_state.Q_CAP`), plus e e-folds. Δt/2 at the (d, β, n) of
    ``select_halfdt`` (the same draws). An entry with n/10 runs has every (d, β) again at
    n/10 (other draws) for :math:`T = (\tfrac12\ln n + ` :data:`SELECT_EFOLDS`
    :math:`)/\lambda_{\max}`, past the clusters' formation, with the tokens stored: the
    rates' n-dependence and the cluster count on all tokens at T
    (:func:`wflow.analysis.clusters.cluster_count`).
    Returns unvalidated ``(name, config)`` pairs."""
    out = []
    first = 0
    for d, n, betas, draws, small, first0 in p["select"]:
        if first0 is not None:
            first = first0
        for b in betas:
            lam = float(np.max(derived_rate(np.arange(1, SELECT_DEGREE + 1), b, "head", d=d)))
            runs = [(n, "", (0.5 * np.log(Q_CAP * n) + p["select_efolds"]) / lam)]
            if small:
                runs.append((n // 10, "-small", (0.5 * np.log(n // 10) + SELECT_EFOLDS) / lam))
            for nn, tag, T in runs:
                dt = p["select_dt"]
                steps = int(np.ceil(T / dt))
                variants = [("", 1)] + ([("-halfdt", 2)] if (d, b, nn) in p["select_halfdt"]
                                        else [])
                for vtag, mult in variants:
                    c = with_keys(base, model__d=d, model__n=nn, model__beta=b,
                                  init__tokens="uniform", init__per_path_tokens=True,
                                  init__first_path=first, solver__representation="particles",
                                  solver__method="heun", solver__paths=draws,
                                  solver__summation="spectral",
                                  diagnostics__harmonic_degree=SELECT_DEGREE)
                    as_particles(c)
                    c["output"]["store_tokens"] = bool(tag)
                    c["solver"].update(T=round(steps * dt, 9), dt=dt / mult,
                                       record_every=mult * max(1, steps // 100))
                    out.append((f"select-d{d}-b{b:g}-n{nn}{tag}{vtag}", c))
                first += draws
    return out


def chains(base, p):
    r"""The continuation sweeps [model §6c]: per (norm, β, d, N), ν stepped up through
    ν_c (ν/ν_c in the given list) and back down, every link started from the final
    density of the one before, times :math:`1 + \varepsilon\varphi_1` (``KICK``, see
    :func:`continue_from`); link time :func:`plateau_T`; the first link starts from
    ``uniform_mode`` 1 with ε = 0.05."""
    out = []
    for nm, b, d, N, dt, fs, tmax in p["hyst"]:
        nuc = critical_nu(b, nm, d)
        steps = [("up", f) for f in fs] + [("down", f) for f in fs[-2::-1]]
        chain = []
        for i, (way, f) in enumerate(steps):
            c = with_keys(base, model__d=d, model__normalization=nm, model__beta=b,
                          model__diffusion=nuc * f, density__cells=N,
                          density__diffusion_scheme="split", init__tokens="uniform_mode",
                          init__mode=1, init__amplitude=0.05 if i == 0 else KICK)
            T = plateau_T(nuc * f, b, nm, d, t_max=tmax, grow=(way == "down"))
            n = max(1, int(np.ceil(T / dt)))
            c["solver"].update(T=float(n * dt), dt=dt, record_every=max(1, n // 100))
            chain.append((f"hyst-{nm}-b{b:g}-d{d}-N{N}-{i:02d}{way}-f{f:g}",
                          _config.validate(c)))
        out.append(chain)
    return out


def continue_from(previous, config):
    r"""The previous link's final density times :math:`1 + \xi`, ξ the ``uniform_mode``
    perturbation of the link's ``[init]`` (mode 1, ε = ``KICK``) at the cell centres,
    rescaled to mass 1: a fixed seed for a linearly unstable uniform state (a
    deterministic solver would otherwise leave it only from round-off, after a delay
    that grows as the sweep decays the mode further: dynamic, not stationary,
    hysteresis); a stable state forgets it at rate :math:`\lvert\lambda_1\rvert`."""
    from wflow.geometry.circle_fv import CircleGrid
    from wflow.geometry.sphere_mesh import voronoi_mesh
    from wflow.model.density import perturbation

    rho = final_state(previous)
    ini = config["init"]
    if config["solver"]["representation"] != "density" or ini["tokens"] != "uniform_mode":
        return rho
    d, N = int(config["model"]["d"]), int(config["density"]["cells"])
    if d == 2:
        grid = CircleGrid(N)
        xi = perturbation(ini, 2)(grid.theta)
    else:
        grid = voronoi_mesh(N, lloyd=int(config["density"]["lloyd"]))
        xi = perturbation(ini, 3)(grid.centres)
    rho = rho * (1.0 + xi)
    return rho / grid.masses(rho).sum(axis=-1, keepdims=True)
