"""Storage only: HDF5 result files (records, checkpoints, reading, ``io``; low-level helpers
in ``_h5``), input arrays from .npz/.h5 files, and safe writing (``files``: a temporary name
renamed when complete, write errors in one line). Imports nothing of the model, the
configuration, the stepping or the engine: records and checkpoints arrive as plain mappings
of arrays, descriptions as a callable."""
