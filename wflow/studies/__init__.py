r"""The studies: each one a class in the registry, a sweep plus a summary.

A study answers one question with a set of runs. It gives

- its base configuration :math:`c_0 = \mathrm{base}(\text{scale})`, to which the options
  apply (``--ledger``: ``diagnostics.ledger = true``; ``--set``: the overrides — one on a
  key the study sweeps is refused, one a family of the study fixes is applied to the other
  runs and named at the head of ``summary.txt``: :meth:`Study.overridden`), then
- its tasks :math:`\{(\text{name}_k, c_k)\} = \mathrm{variants}(c_0)`, one result file each,
- a summary (text and a column table) and figures, both computed from the result files.

:func:`run_study` runs every registered study the same way: tasks →
:func:`wflow.sweeps.sweep.run_sweep` → ``summary.txt``, ``summary.csv`` and figures in the
output folder; at the quick scale every output says it is one (the first line of
``summary.txt``, the ``scale`` column of ``summary.csv``, a banner on every figure and the
mark in its metadata). The built-in studies are the modules of this package, registered by the one
import line each below (``wflow study list`` prints them with their questions; each module's
docstring describes its set-up). A study's own figures are a module of :mod:`wflow.figures`
(which imports no study: the study hands it its data and labels); the generic run figures
(:mod:`wflow.figures.plotting`) need none.

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

A built-in one is that class in a module here plus its line below. A package can also make its
studies known to ``wflow study`` through the entry-point group ``wflow.studies`` (each entry
point names a module or object whose import registers them).
"""

from wflow.studies._base import (  # noqa: F401
    ENTRY_POINT_GROUP,
    SCALES,
    STUDIES,
    Study,
    StudyData,
    StudyOptions,
    available_studies,
    get_study,
    register_study,
)
from wflow.studies._running import StudyResult, run_study  # noqa: F401
from wflow.studies._tables import final_state, summary_table, write_csv  # noqa: F401

# The built-in studies, one line each: importing a module registers its study.
# isort: off
from wflow.studies import asymmetry  # noqa: E402,F401
from wflow.studies import energy  # noqa: E402,F401
from wflow.studies import heads  # noqa: E402,F401
from wflow.studies import jko_study  # noqa: E402,F401
from wflow.studies import laplacian  # noqa: E402,F401
from wflow.studies import meanfield  # noqa: E402,F401
from wflow.studies import meanfield_s2  # noqa: E402,F401
from wflow.studies import metastability  # noqa: E402,F401
from wflow.studies import phase  # noqa: E402,F401
from wflow.studies import regimes  # noqa: E402,F401
from wflow.studies import section6  # noqa: E402,F401
from wflow.studies import stability  # noqa: E402,F401
from wflow.studies import uniform  # noqa: E402,F401
# isort: on

__all__ = ["Study", "StudyData", "StudyOptions", "StudyResult", "STUDIES", "register_study",
           "get_study", "available_studies", "run_study", "summary_table", "write_csv", "SCALES",
           "ENTRY_POINT_GROUP"]
