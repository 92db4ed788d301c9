"""The model: the attention field and energy (``attention``), the weight processes and their
registry (``weights``, ``processes``), clustering diagnostics and W₂ (``diagnostics``).
May import ``wflow.core``, ``wflow.errors`` and the storage layer's input readers
(``wflow.storage.io.read_arrays``); never the stepping, configuration, engine or lab layers."""
