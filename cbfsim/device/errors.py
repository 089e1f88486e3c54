"""The device layer's error."""
from __future__ import annotations

from compiler.errors import CbfsimError

from ..firmware_config import DeviceConfigError  # noqa: F401  (raised by the config and card layers)


class DeviceError(CbfsimError, RuntimeError):
    """A firmware run failed or printed something the protocol does not allow."""


class DeviceLogError(DeviceError, ValueError):
    """A device log the line protocol cannot decode: the message names the line number and
    what is wrong with it (a garbled word, a missing field, a record out of order)."""
