r"""The layer-norm placements suite [model §1c]: the embedded default run's step under pre-LN,
peri-LN, nGPT and Mix-LN against the same run under post-LN, timed in one process,
interleaved (:func:`wflow.cli.bench.time_interleaved`).

Every placement evaluates the output before the projection, :math:`u = v + \rho x`, at each
stage; :math:`\rho` comes from the row sums of the pass that gives :math:`v`
(:meth:`wflow.model.attention.AttentionModel.output`), so a placement's step costs as many
passes as post-LN's: the goal is a ratio ≤ 1.3. The runs are the default with
``model.sign = "ascent"`` (under descent the pre-LN radius reaches 0 before T: the run
stops [model §1c]); Mix-LN switches at T/2; post-LN keeps its exact ledger (the default
run's second pass per step), which the placements leave out.
"""

from __future__ import annotations

import copy

from benchmarks import internals
from benchmarks.results import row
from wflow.cli.bench import time_interleaved

#: The placements timed against post-LN.
PLACEMENTS = ("pre", "peri", "ngpt", "mix")
#: The goal of every ratio (a placement's step ÷ post-LN's).
GOAL = "≤ 1.3"


def placement_config(place, quick=False):
    """The embedded default run under ``place`` (ascent; Mix-LN switches at T/2); ``quick``:
    n = 32, H = 2, T = 0.1."""
    from wflow.config import default_config

    cfg = copy.deepcopy(default_config())
    m, s = cfg["model"], cfg["solver"]
    if quick:
        m.update(n=32, heads=2)
        s["T"] = 0.1
    m.update(sign="ascent", layernorm=place)
    if place == "mix":
        m["mix_switch"] = float(s["T"]) / 2
    if place != "post":  # (the placements have no ledger [model §1c])
        cfg["diagnostics"].pop("ledger", None)
    cfg["output"]["store_tokens"] = False
    return cfg


def _whole_run(cfg):
    """A function that runs ``cfg`` from its initial state (warm: one step run first), and
    its number of steps."""
    sim = internals.simulation(cfg)
    sim.run(stop_after=1)
    steps = int(round(float(cfg["solver"]["T"]) / float(cfg["solver"]["dt"])))

    def run():
        sim.run(state=sim.initial_state(), stop_after=steps)
    return run, steps


def placements_suite(quick=False, repeats=3):
    """The default run's step under each placement of :data:`PLACEMENTS` against post-LN,
    over ``repeats`` interleaved rounds (each round runs every placement once).

    Returns
    -------
    list of dict
        One row per placement, ``time per step: <placement> ÷ post``, goal ≤ 1.3;
        ``seconds`` is the placement's step.
    """
    names = ("post",) + PLACEMENTS
    runs = [_whole_run(placement_config(p, quick)) for p in names]
    steps = runs[0][1]
    times, _ = time_interleaved([r for r, _ in runs], repeats, [])
    label = "default run" + (" (n = 32, H = 2, T = 0.1)" if quick else "") + ", ascent"
    post = times[0] / steps
    return [row("placements", label, f"time per step: {p} ÷ post", t / steps / post, goal=GOAL,
                seconds=t / steps, data={"step_s": t / steps, "post_step_s": post,
                                         "steps": steps})
            for p, t in zip(PLACEMENTS, times[1:])]
