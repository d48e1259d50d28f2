"""The three arms a call can run on."""

from __future__ import annotations

import enum

__all__ = ["Backend"]


class Backend(str, enum.Enum):
    """An execution arm. A ``str`` enum, so ``Backend.GPU == "gpu"``.

    ``GPU``: a device kernel (torch CUDA, JAX GPU, numba CUDA). ``SIMD``: vectorised CPU code
    (numpy, numba ``fastmath``/``parallel``). ``SCALAR``: a plain compiled (or Python) loop.
    """

    GPU = "gpu"
    SIMD = "simd"
    SCALAR = "scalar"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: object, *, what: str = "backend") -> Backend:
        """Return the backend named by ``value`` (a ``Backend`` or its case-insensitive name).

        Raises ``ValueError`` naming ``what`` and the accepted names otherwise.
        """
        if isinstance(value, Backend):
            return value
        if isinstance(value, str):
            try:
                return cls(value.strip().lower())
            except ValueError:
                pass
        accepted = ", ".join(b.value for b in cls)
        raise ValueError(f"{what} must be one of {accepted}; got {value!r}")
