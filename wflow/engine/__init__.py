"""The run loop: the series table (``series``), the simulation (``run``: stepping contract,
ledger, records) and runs into files with resume (``driver``). May import the config,
stepping, model, geometry, kernels and storage layers; never the sweeps, analysis, figures, studies or CLI."""
