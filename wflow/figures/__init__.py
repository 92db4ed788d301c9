"""Figures and animations: the only package that imports matplotlib (the Agg canvas, no
pyplot, through :mod:`wflow.figures._figbase`).

- a run's figures (``wflow plot``): :mod:`wflow.figures.plotting` gathers the families
  ``tokens`` (snapshots, density), ``series`` (G2, ledger, balance, clustering) and ``scaling``
  (head_scaling); ``_source`` reads a run and titles its figures; ``animation``;
- a study's figures, one module per study (``wflow.figures.<study>``): they read only what the
  study hands them (its summary table, labels, the sweep summary or result files) and import
  no study; the study modules import them lazily inside ``figures``.

Imports :mod:`wflow.analysis` and storage; nothing above.
"""
