"""The model: the attention field and energy (``attention``), the layer-norm placements
(``layernorm``), general interactions and the combination of heads (``interaction``: its keys),
the weight processes (``weights``: the protocol, initial weights, weight files; ``processes``:
the registry and the built-in processes, one file each), the density model (``density``),
token noise (``noise``), the uniform state's linear stability (``uniform_state``), the
harmonic power of a token cloud (``harmonics``: its key),
clustering diagnostics and W₂ (``diagnostics``), trained checkpoints (``checkpoint``).
May import ``wflow.geometry``, ``wflow.kernels``, ``wflow.errors``, ``wflow.params`` (features
and processes declare their keys) and the storage layer's input readers
(``wflow.storage.io.read_arrays``); never the stepping, configuration, engine or anything
above them."""

# the modules that declare keys: model.interaction, model.head_combine;
# diagnostics.harmonic_degree
from wflow.model import harmonics, interaction  # noqa: E402, F401
