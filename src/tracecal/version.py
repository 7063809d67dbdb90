"""The tracecal version, in a module of its own so that any module can import it without the package ``__init__``."""

__version__ = "0.1.0"

__all__ = ["__version__"]
