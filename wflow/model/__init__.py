"""The model: the attention field and energy (``attention``), the weight processes (``weights``:
the protocol, initial weights, weight files; ``processes``: the registry and the built-in
processes, one file each), clustering diagnostics and W₂ (``diagnostics``).
May import ``wflow.geometry``, ``wflow.errors``, ``wflow.params`` (processes declare their keys)
and the storage layer's input readers
(``wflow.storage.io.read_arrays``); never the stepping, configuration, engine or lab layers."""
