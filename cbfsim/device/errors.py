"""The device layer's error."""
from __future__ import annotations

from compiler.errors import CbfsimError


class DeviceError(CbfsimError, RuntimeError):
    """A firmware run failed or printed something the protocol does not allow."""


class DeviceConfigError(CbfsimError, ValueError):
    """A device run that cannot be configured as asked: a model card that does not match its
    plant, a missing nominal controller or x0, an unknown run option (the message names it)."""


class DeviceLogError(DeviceError, ValueError):
    """A device log the line protocol cannot decode: the message names the line number and
    what is wrong with it (a garbled word, a missing field, a record out of order)."""
