class WflowError(Exception):
    """Base class for wflow errors."""
class ConfigError(WflowError, ValueError):
    """Invalid configuration or input; the message is one line naming the field and the allowed values."""
class NumericalError(WflowError, FloatingPointError):
    """A step produced a non-finite value."""
