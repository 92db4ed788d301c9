r"""The standard studies: each one a class in the registry, a sweep plus a summary.

A study answers one question with a set of runs. It gives

- its base configuration :math:`c_0 = \mathrm{base}(\text{scale})`, to which the options
  apply (``--ledger``: ``diagnostics.ledger = true``; ``--set``: the overrides), then
- its tasks :math:`\{(\text{name}_k, c_k)\} = \mathrm{variants}(c_0)`, one result file each,
- a summary (text and a column table) and figures, both computed from the result files.

:func:`run_study` runs every registered study the same way: tasks → :func:`wflow.sweeps.sweep.run_sweep`
→ ``summary.txt``, ``summary.csv`` and figures in the output folder. Registered here:

- ``section6``: the paper's Section 6 [model §9]: S², n = 200, β = 1, Δt = 5·10⁻³, T = 20,
  H ∈ {1, 10, 100}; OU weights with 10 Monte Carlo paths and oscillating weights
  (shared phase) with one path. Summary: late-window G² per H with a 95% CI over
  paths, the fit :math:`G^2 \approx aH^b` per family (expected OU b ≈ −1,
  oscillating b ≈ 0), and clustering at T (clustering vs non-clustering on S²).
- ``energy``: the discrete energy identity: deterministic oscillating weights (shared, H = 10,
  n = 50, T = 2), Euler / Heun / RK4 over Δt ∈ {0.02, 0.01, 0.005, 0.0025}; the exact ledger
  residual and its fitted order (expected min(p, 2)), the telescoping error, ∫G²/∫𝒟.
- ``heads``: head-count scaling, :math:`H \in \{1, \dots, 128\}`, of the late-window
  :math:`G^2`, :math:`G^2_{hm}`, :math:`\mathcal D` (OU, oscillating shared / spread), the
  exponent b with a jackknife Student-t interval over paths; b against the OU noise and β;
  the 2 × 2 design of the initial draws; Δt and n resolution checks.
- ``laplacian``: attention vs Laplacian heads (none, half, all of H = 4), OU weights:
  within-sequence variance, spectral rank, order parameter and clusters at T.
- ``regimes``: the regime map on S² (issue #13): β ∈ {0.25, 1, 4, 16} × seven weight
  families × {descent, ascent}, n = 32, H = 4, 8 paths, T = 20, Δt per cell from
  β‖D‖Δt ≤ 0.25; fraction with one cluster and Kaplan–Meier median time to one cluster,
  clusters, order parameter, late G² and its decay rate, late W₂ speed; a halving check.
- ``stability`` (module ``stability``): perturbed inputs (``init.token_perturbation`` = ε ∈
  {1e-8 … 1e-2}, same weight noise): :math:`\delta(t) = \max_i d_S(x_i, x_i^\varepsilon)` and
  :math:`W_2(\mu_t, \mu_t^\varepsilon)`, the Grönwall rate L; perturbed initial weights
  (``init.weight_perturbation``) and weight decay (OU rate λ + ε, mean λM/(λ + ε)): the
  exponent r of :math:`\max_t\delta \approx C\varepsilon^r`; Δt/2 check.
- ``jko`` (module ``jko_study``): Euler, Heun, RK4 and JKO over Δt on a clustering (joint,
  H = 4, frozen) and a spreading (H = 1, D = I) exact gradient flow: error at T against RK4 at
  Δt = 1/1024, error per second of the stepping loop, energy at the largest step.
from wflow.studies import (  # noqa: E402,F401  isort: skip
    energy, heads, jko_study, laplacian, meanfield, meanfield_s2, phase, regimes, section6,
    stability)

Adding a study is one class, anywhere (a package, a script, a test file)::

    @register_study
    class Mine(Study):
        name = "mine"
        question = "does X change Y?"

        def base(self, scale):
            return {"model": {"heads": 2}, "solver": {"T": 0.1 if scale == "quick" else 1.0}}

        def variants(self, base, scale):
            return expand_grid(base, {"model.beta": [0.5, 1.0]}, name="mine")

        def summarize(self, paths):
            return summary_table(paths, ("energy",))

A package can also make its studies known to ``wflow study`` through the entry-point group
``wflow.studies`` (each entry point names a module or object whose import registers them).
"""

from wflow.studies._base import (  # noqa: F401
    ENTRY_POINT_GROUP,
    SCALES,
    STUDIES,
    Study,
    StudyData,
    StudyOptions,
    StudyResult,
    available_studies,
    get_study,
    register_study,
    run_study,
    summary_table,
    write_csv,
)

# importing a study module registers its study (one module per study)
from wflow.studies import (  # noqa: E402,F401  isort: skip
    energy, heads, jko_study, laplacian, meanfield, meanfield_s2, phase, regimes, section6,
    stability)

__all__ = ["Study", "StudyData", "StudyOptions", "StudyResult", "STUDIES", "register_study",
           "get_study", "available_studies", "run_study", "summary_table", "write_csv", "SCALES",
           "ENTRY_POINT_GROUP"]
