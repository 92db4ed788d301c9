"""The run loop and what it is built from, in layers (``lint-imports`` checks them):

* ``driver``: runs into HDF5 files, with checkpoints and resume;
* ``run``: :class:`~wflow.engine.run.Simulation`, :func:`~wflow.engine.run.simulate` and the
  fixed-step loop; ``adaptive_run``: the loop of adaptive steps [model §6d];
* ``setup``: the build of a run (:class:`~wflow.engine.setup.RunSetup`: model, weight process,
  stepper, initial draws, record steps, ledger, flags), made once;
* ``records`` (one record row from the producers of each series group) and ``ledger`` (the
  paper's balance and the exact ledger [model §6]);
* ``timing`` (the time estimate), ``memory`` (memory and disk estimates), ``initial`` (the
  initial tokens and weights and their random streams);
* ``state`` (the checkpointed state, the in-memory result), ``features`` (the flags of a run,
  decided once from its configuration), ``series`` (the table of result series).

May import the config, stepping, model, geometry, kernels and storage layers; never the sweeps,
analysis, figures, studies or CLI."""
