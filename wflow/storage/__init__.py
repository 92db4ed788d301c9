"""Storage only: HDF5 result files (records, checkpoints, reading, ``io``; low-level helpers
in ``_h5``) and input arrays from .npz/.h5 files. Imports nothing of the model, the
configuration, the stepping or the engine: records and checkpoints arrive as plain mappings
of arrays, descriptions as a callable."""
