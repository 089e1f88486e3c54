"""The device layer's error."""
from __future__ import annotations

from compiler.errors import CbfsimError


class DeviceError(CbfsimError, RuntimeError):
    """A firmware run failed or printed something the protocol does not allow."""
