"""Storage only, and the one door to h5py: HDF5 result files (``io``: the recorder and checkpoints;
``resuming``: a partial file taken over to continue it; ``_damage``: its resume point, repair
and verification; ``reading``: result files, input arrays from .npz/.h5, xarray, joining batches;
low-level helpers in ``_h5``, the disk reservation and the writers' lock in ``_locks``), column
tables (``tables``: a sweep's summary) and safe writing (``files``: a temporary name renamed
when complete, write errors in one line). Imports nothing of the model, the configuration, the
stepping or the engine: records and checkpoints arrive as plain mappings of arrays,
descriptions as a callable."""
