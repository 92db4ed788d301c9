"""Attention heads against Laplacian heads."""

from __future__ import annotations

from wflow.lab.studies._base import Study, _run_figures, register_study
from wflow.lab.studies.section6 import SECTION6_BASE, _scaled
from wflow.lab.sweep import expand_grid


# ---------------------------------------------------------------------------------- laplacian
@register_study
class Laplacian(Study):
    """Attention vs Laplacian heads: H = 4, laplacian_heads ∈ {0, 2, 4}, OU weights.

    The Section 6 base with H = 4, T ≤ 10, at most 4 paths (quick: T = 0.5, 2 paths).
    """

    name = "laplacian"
    question = "what do Laplacian heads (0, 2, 4 of H = 4) change in clustering and rank?"
    quick = "T = 0.5, 2 paths"

    def base(self, scale):
        base = _scaled(SECTION6_BASE, scale)
        base["model"]["heads"] = 4
        base["solver"]["T"] = min(base["solver"]["T"], 10.0)
        base["solver"]["paths"] = min(base["solver"]["paths"], 4)
        return base

    def variants(self, base, scale):
        return expand_grid(base, {"model.laplacian_heads": [0, 2, 4]}, name="laplacian")

    def figures(self, data, outdir, formats):
        paths = list(data.paths)
        from wflow.lab import plotting

        _, table = self.summarize(data)
        out = list(plotting.plot_table_bars(table, outdir, label="run", formats=formats))
        return out + _run_figures(paths, outdir, formats, ("snapshots", "G2", "clustering"))
