"""Operations, their per-arm implementations, and which arms can run on this machine.

- :mod:`.operation`: ``Operation`` and ``Implementation`` (an operation's kernels per arm,
  variant and input family), and the ``OperationOwner`` and ``DeviceTiming`` protocols they
  use;
- :mod:`.registry`: ``OperationRegistry`` (operations by name) and the ``Registrar`` protocol
  (what ``kernels``' ``register(rt)`` needs of a runtime), with the operation-name checks;
- :mod:`.devices`: ``DeviceProbe`` (which arms run here: the GPU driver probed before any GPU
  library is imported) and ``cuda_graph_capturing``.

The registry is strict and says exactly what is wrong: a duplicate name, an implementation for
an arm that does not exist, an operation with no implementation at all.
"""

from .devices import DeviceProbe, cuda_graph_capturing
from .operation import (
    DEVICE_FAMILY,
    DEVICE_SUFFIX,
    FAMILY_SEPARATOR,
    DeviceTiming,
    Implementation,
    Operation,
    OperationOwner,
)
from .registry import (
    MAX_NAME_LENGTH,
    OperationRegistry,
    Registrar,
    name_too_long,
    utf8_encodable,
)

__all__ = [
    "DEVICE_FAMILY",
    "DEVICE_SUFFIX",
    "FAMILY_SEPARATOR",
    "MAX_NAME_LENGTH",
    "DeviceProbe",
    "DeviceTiming",
    "Implementation",
    "Operation",
    "OperationOwner",
    "OperationRegistry",
    "Registrar",
    "cuda_graph_capturing",
    "name_too_long",
    "utf8_encodable",
]
