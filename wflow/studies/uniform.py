r"""The uniform state: linear growth rates of its modes, the critical noise, the transition.

Setting [model §6c]: one head, frozen :math:`D = V = I`, ascent (σ = +1), normalisation
``head`` (SA) or ``none`` (USA), token diffusion ν; then the uniform density
:math:`\bar\rho = 1/\lvert S^{d-1}\rvert` is an equilibrium, and a perturbation
:math:`\bar\rho(1 + a\,\varphi_k)` (:math:`\varphi_k = \cos k\theta` on S¹, a spherical
harmonic of degree ℓ on S²) grows at the derived rate

.. math:: \lambda_k = k^2\Big(\frac{I_k(\beta)}{\beta\,c} - \nu\Big), \qquad
          c = I_0(\beta)\ (\texttt{head}),\ 1\ (\texttt{none}),

on S¹ (:math:`\ell(\ell+1)` and :math:`i_\ell(\beta)`, :math:`i_0(\beta)` on S²), so the uniform
state is linearly unstable for :math:`\nu < \nu_c = I_1(\beta)/(\beta c)` (S²:
:math:`i_1(\beta)/(\beta c)`).

Parts (one density run per task unless said):

- ``growth``: ν = 0, start ``uniform_mode`` k with ε = 1e-4; the rate is the least-squares
  slope of :math:`\log A_k(t)` (the Fourier amplitude,
  :func:`~wflow.model.uniform_state.mode_amplitude`) over the records with
  :math:`A_k \le` ``A_CAP`` (the linear phase), with its standard error; repeated at
  N/2 cells and at Δt/2 for one (normalisation, β): the discretisation check.
- ``critical``: mode 1 at :math:`\nu = \nu_c(1 + \delta)`, δ ∈ ``DELTAS``; the measured rates are
  fitted linearly in ν and :math:`\nu_c` is the zero crossing (standard error by the delta
  method); again at Δt/2, and the Richardson value (Heun: the rate's error is O(Δt²)).
- ``sweep``: the stationary order parameter :math:`r = \lvert\int\rho\,e^{i\theta}\rvert` at
  time T from a near-uniform start (``uniform_mode`` 1, ε = 0.05) and from a clustered start
  (``vmf``, κ = 10) for ν across ν_c: the two branches, against the derived stationary branch
  (:func:`~wflow.model.uniform_state.stationary_branch`); equal end states on both sides of
  ν_c mean no hysteresis.
- ``particles`` (full scale): n = 512 noisy particles, 4 paths (projected Euler–Maruyama) at
  the same ν, uniform start, r over paths; and ν = 0 runs at large β, the cluster count at a
  moderate time against the fastest-growing mode :math:`k^* = \arg\max_k \lambda_k`.
- ``sphere`` (full scale): S² coarse (Voronoi N = 250, 500, 1000), ``head``, β ∈ {2, 8},
  the degrees ℓ = 1, 2, 3.
- ``s2crit`` (full scale): the S² ν_c (``head``, β ∈ {2, 8}, degree 1) on N = 250, 500,
  1000, each run paired with its uniform start; Δt/2 on N = 500; the observed order in 1/N
  and the extrapolation (:meth:`Uniform.critical_s2`).
- ``s2part``, ``s2dens`` (full scale): S² particles (n = 512, 4 paths) beside the density
  (N = 250, 500, 1000) at a few ν, against :func:`~wflow.model.uniform_state.stationary_r_s2`.
- ``select`` (full scale; :func:`~wflow.studies._uniform_tasks.select_tasks`,
  :data:`~wflow.studies._uniform_tasks.SELECT_RUNS`): n = 10⁵ and 10⁶ uniform tokens,
  ``head``, ν = 0, particles with the spectral summation [model §2s], Heun Δt = 0.1,
  3 independent draws (paths) per β; S¹ and S² at β ∈ {1, 2, 3, 4, 5, 6, 8, 10, 12}. The
  harmonic power per degree is recorded
  (``diagnostics.harmonic_degree`` = 12, [model §8]) and the rate of every degree fitted on
  the linear phase (:func:`~wflow.model.uniform_state.power_rates`), averaged over the draws
  with a 95% interval, against λ_ℓ; ℓ* measured is the degree of largest mean rate, or "tie"
  where its interval overlaps the runner-up's (:meth:`Uniform.selection`). Checks: Δt/2 at
  S¹ β = 4, n = 10⁵; every n = 10⁵ run again at n = 10⁴ (other draws), run on past the
  clusters' formation, with the cluster count on all tokens at T
  (:func:`wflow.analysis.clusters.cluster_count`); n ×10.
- ``hyst`` (:meth:`Uniform.chains`): continuation sweeps, ν/ν_c up through 1 and back
  down, each link from the previous one's final density times :math:`1 + \varepsilon\cos\theta`
  (:meth:`Uniform.continue_from`), link time :func:`~wflow.studies._uniform_tasks.plateau_T` [model §6c].

The closed forms (rates, ν_c, k*, the stationary branches) and the amplitudes measured on
cell averages are :mod:`wflow.model.uniform_state`; the tasks of the parts are built in
``_uniform_tasks`` and measured and summarised in ``_uniform_results``.

Quick: S¹, N = 64, ``head`` and ``none`` at β = 2, k = 1..3 (40 Heun steps), one ν_c
(T = 6), the clustered start of one sweep point, a three-link continuation (N = 32, T = 6),
and the selection at n = 10⁴, β = 2 (3 draws, to a quarter e-fold past the linear phase);
the claims tested in ``tests/test_study_uniform.py``.
"""

from __future__ import annotations

import copy

import numpy as np

from wflow.model.uniform_state import critical_nu, derived_rate, stationary_branch
from wflow.studies import _uniform_results as _results
from wflow.studies import _uniform_tasks as _tasks
from wflow.studies._base import Study, register_study

__all__ = ["Uniform"]


@register_study
class Uniform(Study):
    """Growth rates of the uniform state's modes, ν_c and the transition (S¹; S² coarse)."""

    name = "uniform"
    question = ("is the uniform state unstable, which mode wins, where is the critical noise "
                "nu_c and is the transition continuous (frozen D = V = I, ascent)?")
    quick = ("S1, N = 64, head and none at beta = 2, k = 1..3, nu_c of head, a three-link "
             "continuation, particles from a uniform draw (n = 10^4, beta = 2): measured "
             "rates, nu_c and the selected mode match the derived ones")
    summary_columns = ()

    def params(self, scale):
        """The grid of every part at ``scale`` (:func:`wflow.studies._uniform_tasks.params`)."""
        return _tasks.params(scale)

    def base(self, scale):
        c = copy.deepcopy(_tasks.UNIFORM_BASE)
        c["density"]["cells"] = self.params(scale)["N"]
        return c

    def variants(self, base, scale):
        return _tasks.tasks(base, self.params(scale))

    def chains(self, base, scale):
        r"""The continuation sweeps [model §6c] (:func:`wflow.studies._uniform_tasks.chains`):
        per (norm, β, d, N), ν stepped up through ν_c and back down, every link started from
        the final density of the one before times :math:`1 + \varepsilon\varphi_1`
        (:meth:`continue_from`)."""
        return _tasks.chains(base, self.params(scale))

    def continue_from(self, previous, config):
        r"""The previous link's final density times :math:`1 + \xi`, ξ the ``uniform_mode``
        perturbation of the link's ``[init]``, rescaled to mass 1
        (:func:`wflow.studies._uniform_tasks.continue_from`)."""
        return _tasks.continue_from(previous, config)

    @staticmethod
    def measure(data):
        """Per task: the configuration keys and the measured statistic
        (:func:`wflow.studies._uniform_results.measure`)."""
        return _results.measure(data)

    @staticmethod
    def critical(ms):
        """``{(norm, β): {"nu_c", "se", "slope", "derived"[, "nu_c_halfdt",
        "nu_c_richardson"]}}`` of the S¹ critical runs
        (:func:`wflow.studies._uniform_results.critical`)."""
        return _results.critical(ms)

    @staticmethod
    def selection(ms):
        """``{task: {...}}`` of the selection runs: per degree the rate over the draws with
        its interval, λ_ℓ, ℓ* derived and measured (or "tie"), the dominant degree at the end
        of the linear phase, the cluster count (:func:`wflow.studies._uniform_results.selection`)."""
        return _results.selection(ms)

    @staticmethod
    def critical_s2(ms):
        """``{(norm, β): {"by_N", "derived", ...}}`` of the S² critical runs, with the observed
        order in 1/N and the extrapolations (:func:`wflow.studies._uniform_results.critical_s2`)."""
        return _results.critical_s2(ms)

    def summarize(self, data):
        """Tables: growth rates (measured ± SE vs derived, discretisation check), ν_c, the
        sweep's branches, particles, S² and the continuation sweeps."""
        return _results.summary(self.measure(data))

    def figures(self, data, outdir, formats):
        """:func:`wflow.figures.uniform.plot_uniform` of the records, with the derived curves
        it draws: λ_k (k ≤ 12, ν = 0) per (normalisation, β) and the S¹ stationary branch
        r ↦ ν of every sweep and S¹ continuation chain."""
        from wflow.figures import uniform as _fig

        ms = self.measure(data)
        branches = {}
        for n, r in ms.items():
            if n.startswith("sweep") or (n.startswith("hyst") and r["d"] == 2):
                key = (r["norm"], r["beta"])
                if key not in branches:
                    rv = np.linspace(0.01, 0.95, 60)
                    branches[key] = (rv, stationary_branch(key[1], key[0], rv),
                                     critical_nu(key[1], key[0]))
        curves = {}
        for nm in ("head", "none"):
            for b in sorted({r["beta"] for r in ms.values() if r["norm"] == nm}):
                ks = np.arange(1, 13)
                curves[(nm, b)] = (ks, derived_rate(ks, b, nm))
        files = _fig.plot_uniform(ms, curves, branches, self.critical(ms), outdir, formats,
                                  critical_s2=self.critical_s2(ms))
        sel = self.selection(ms)
        if sel:
            files += _fig.plot_selection(sel, ms, outdir, formats)
        return files
