"""What the fuzzing harnesses share (tests/test_fuzz_api.py, tests/test_fuzz_readers.py,
tests/cli/test_fuzz_options.py)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def fuzz_settings(max_examples: int) -> settings:
    """The hypothesis settings of every harness: ``max_examples`` per case, the same examples on every run
    (derandomised, no example database), no deadline and no health check (the harness calls slow code on purpose)."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
