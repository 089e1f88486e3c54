"""One small exception hierarchy. Each subclasses the builtin a caller would expect,
so ``except ValueError`` still works, while the message names the exact problem."""
from __future__ import annotations


class CbfsimError(Exception):
    """Root of every error cbfsim raises on purpose (all layers may import this leaf module).

    Each concrete error also subclasses the builtin a caller would expect."""


class CompilerError(CbfsimError):
    """Base class for every error the compiler raises on bad models or options."""


class ModelFormatError(CompilerError, ValueError):
    """A file that is not a readable model: empty, truncated, corrupt, or failing the format checker."""


class UnsupportedOpError(CompilerError, ValueError):
    """A layer, ONNX op or attribute the compiler does not support (message names it)."""


class ShapeError(CompilerError, ValueError):
    """Dimensions that do not chain, or arrays of the wrong shape at a boundary."""


class NonFiniteWeightError(CompilerError, ValueError):
    """A weight or bias holds NaN or Inf."""


class SmoothnessError(CompilerError, ValueError):
    """Second order asked of a network whose activation is not twice differentiable."""


class OptionError(CompilerError, ValueError):
    """A compile option (inputs, order, dtype, layout, math) of the wrong type or out of range,
    refused before anything is compiled."""


class ToolchainError(CompilerError, RuntimeError):
    """The C++ compiler is missing or failed; carries the command and its stderr."""

    def __init__(self, message: str, command: list[str] | None = None, stderr: str = ""):
        self.command = command or []
        self.stderr = stderr
        detail = message
        if command:
            detail += "\ncommand: " + " ".join(command)
        if stderr:
            detail += "\n" + stderr.strip()
        super().__init__(detail)


class LimitExceededError(CompilerError, ValueError):
    """A model that would need more memory than a stated limit (folded tensor, weights, workspace);
    the message names the limit, the node and the flag that raises it."""
