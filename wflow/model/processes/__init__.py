r"""The weight processes [model §5]: the registry and the built-in processes, one file each.

.. math::

    D_{k+1} = D_k + f(D_k, t_k)\,\Delta t + \xi_k .

A process is one class (protocol :class:`wflow.model.weights.WeightProcess`) in one file,
declaring its ``weights.process`` name, whether it is deterministic (``deterministic``, no
default), its ``[weights]`` keys (``params``: default, constraint, doc, rule) and its
mathematics; :func:`register_process` makes it the process of
``weights.process = cls.name``, and the configuration table reads its keys from the registry.
Adding a built-in process is its file (decorated with ``@register_process``) and one import
line at the bottom of this module.
"""

from wflow.model.processes.registry import (
    ENTRY_POINT_GROUP,
    PROCESSES,
    deterministic_text,
    general_processes,
    get_process,
    is_deterministic,
    make_process,
    register_process,
)

__all__ = ["PROCESSES", "ENTRY_POINT_GROUP", "register_process", "get_process", "make_process",
           "is_deterministic", "deterministic_text", "general_processes",
           "Frozen", "OrnsteinUhlenbeck", "DrivenOU", "brownian_increments", "Oscillating",
           "Layers", "FromFile", "ImportedLayers", "PHASES", "TARGETS"]

# The built-in processes register themselves on import: one line each, in this order (the
# order of the allowed values and of their keys in the table).
# isort: off
from wflow.model.processes.frozen import Frozen  # noqa: E402
from wflow.model.processes.ou import DrivenOU, OrnsteinUhlenbeck, brownian_increments  # noqa: E402
from wflow.model.processes.oscillating import PHASES, TARGETS, Oscillating  # noqa: E402
from wflow.model.processes.layers import Layers  # noqa: E402
from wflow.model.processes.file import FromFile  # noqa: E402
from wflow.model.processes.imported import ImportedLayers  # noqa: E402
# isort: on
