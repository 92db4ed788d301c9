"""Figures of the studies, one module per study (``wflow.figures.<study>``).

Like :mod:`wflow.figures.plotting` they import matplotlib (through :mod:`wflow.figures._figbase`:
the Agg canvas, no pyplot) and read only what the study hands them (its summary table, the
sweep summary or result files); the study modules import them lazily inside ``figures``.
"""
