"""The one root of tracecal's exceptions.

Every error tracecal raises on purpose derives from `TracecalError`, so an application (and tracecal's own
command line, which maps it to exit code 2 with a one-line message) can catch them all in one place. Each
concrete class also derives from the builtin it refines (``ValueError``, ``FileNotFoundError``, …), so code
that catches those keeps working.

>>> from tracecal.errors import TracecalError, ValidationError
>>> issubclass(ValidationError, TracecalError) and issubclass(ValidationError, ValueError)
True
"""

from __future__ import annotations


class TracecalError(Exception):
    """Base class of every error tracecal raises on purpose; its message says what to fix."""


class ValidationError(TracecalError, ValueError):
    """A parameter or setting has a value outside what it accepts (`tracecal._validation`)."""


__all__ = ["TracecalError", "ValidationError"]
