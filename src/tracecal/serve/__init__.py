"""The OpenAI-compatible confidence gateway (``tracecal serve``): see docs/gateway.md.

``create_app(model, calibrator, ServeConfig(...))`` builds the FastAPI app; modules: ``app`` (wiring, /health,
/metrics, /score), ``routes`` (/v1), ``answers`` (/v1/score-answers), ``streaming`` (SSE), ``batching``
(dynamic batching, step hooks), ``scoring`` (confidence, running risk), ``drift``, ``metrics``, ``limits`` (body
size, auth), ``schemas``, ``errors``, ``config``, ``proxy`` (upstream backends); the command is
`tracecal.cli.serve`. Imports are lazy so that the command line starts without FastAPI.
"""

from typing import Any

__all__ = ["ServeConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from tracecal.serve.app import create_app

        return create_app
    if name == "ServeConfig":
        from tracecal.serve.config import ServeConfig

        return ServeConfig
    raise AttributeError(f"module 'tracecal.serve' has no attribute {name!r}")
