"""The capture's one error type, on its own so that the graph writer and the size expressions
it writes both raise it without importing each other."""


class CaptureError(RuntimeError):
    """Raised when a module (or a model file) cannot be captured."""
