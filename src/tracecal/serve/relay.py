"""Streamed answers of a remote backend (proxy mode), relayed token by token as the upstream sends them.

A streamed request's job is handed to the HTTP backend with ``on_token`` = a `TokenRelay`
(`tracecal.backends.http.stream`: the upstream is asked with ``stream: true``): each token the upstream sends
becomes the client's next chunk at once, with the running risk R_t of the tokens so far
(`tracecal.serve.scoring.running_risk`, the numbers an in-process stream carries), and the relay ends the upstream
request (the connection is closed, so the upstream stops decoding) when the client has gone or the running c_TRACE
fell below the request's ``stop_on_risk``. The backend still returns the trace of the whole answer, the trace the
same request without streaming gets, and the stream's last chunk carries its confidence
(`tracecal.serve.streaming`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracecal.serve.scoring import running_risk

__all__ = ["TokenRelay"]


class TokenRelay:
    """The ``on_token`` callback of one call of a remote backend's ``generate`` for streamed jobs.

    Args:
        jobs: the `tracecal.serve.batching.Job` of each prompt of the call, in order (each streams: ``events``).
        risk_min_tokens: tokens before stopping on risk may act (`tracecal.serve.config.ServeConfig`).
        trace_config: the TRACE configuration of the running risk.
    """

    def __init__(self, jobs: Sequence[Any], risk_min_tokens: int, trace_config: Any) -> None:
        self.jobs, self.risk_min_tokens, self.trace_config = list(jobs), risk_min_tokens, trace_config

    def __call__(self, token: Any) -> bool:
        """Relay one `tracecal.backends.http.stream.StreamedToken` to its job's client; True ends that answer (the
        client has gone: ``finish`` ``cancelled``; or c_t < ``stop_on_risk``: ``risk``)."""
        j = self.jobs[token.row]
        j.ids.append(-1)  # a server sends no token ids
        j.s.append(float(token.surprisal))
        j.h.append(float(token.entropy))
        if j.cancelled:
            j.finish = "cancelled"
            return True
        risk = float(running_risk([np.asarray(j.s)], [np.asarray(j.h)], self.trace_config)[0])
        c = math.exp(-risk) if math.isfinite(risk) else None
        j.sent += token.text
        j.post_token(token.text, c, risk)
        if j.risky(c, self.risk_min_tokens):
            j.finish = "risk"
            return True
        return False
