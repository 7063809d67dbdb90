"""tracecal.version: the version string and the package versions a run records."""

import platform

from tracecal.version import __version__, package_versions


def test_package_versions_name_python_and_the_installed_packages() -> None:
    v = package_versions()
    assert v["python"] == platform.python_version()
    assert v["tracecal"] == __version__
    assert {"numpy", "torch", "transformers", "scikit-learn"} <= set(v)
