class WflowError(Exception):
    """Base class for wflow errors."""
class ConfigError(WflowError, ValueError):
    """Invalid configuration or input; the message is one line naming the field and the allowed values."""
class NumericalError(WflowError, FloatingPointError):
    """A step produced a non-finite value; ``step`` is the step at which it was found (or None)."""

    def __init__(self, message, step=None):
        super().__init__(message)
        self.step = step
class RunFailedError(WflowError):
    """A result file holds a run that failed numerically: there is nothing to resume."""
class WriteError(WflowError):
    """The machine failed while a file was written (no space left, an I/O error): one line
    naming the file; nothing half-written is left under its final name."""
