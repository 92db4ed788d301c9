"""Sweeps beside the run engine: a grid of configurations (``sweep.expand_grid``), one result
file per task, run serially or on Dask (``sweep.run_sweep``, ``sweep.sweep``), and the summary
table of a sweep folder (``summary``; HDF5 through :mod:`wflow.storage`)."""
