"""A file cache of the frozen pass, so that SECL ablations on the same stream and model compute it once.

`frozen_for` reuses the cached pass when it was computed with the same model over the same stream or a
super-stream of it (`FrozenPass.select`), else computes it; it writes the cache only when the file does not
exist yet (never overwriting another stream's cache). A cached pass saved before the raw P(yes) was recorded
gets it read now when the run needs it (``need_p_yes``: the ``ptrue`` target; one P(True) pass, not written back).
While a pass to be cached is computed, its answers are checkpointed beside the cache (``<cache>.answers``,
`checkpoint_path`) and resumed from after an interruption; the checkpoint is removed once the cache is written.
What it does is reported through ``report`` (one line each), by default to this module's logger.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tracecal.errors import ValidationError
from tracecal.secl.frozen import FrozenPass, frozen_pass, weights_dtype
from tracecal.secl.stream import Progress, StreamItem, read_p_true

__all__ = ["checkpoint_path", "frozen_for", "matching_pass"]

log = logging.getLogger(__name__)


def matching_pass(frozen: FrozenPass, lm: Any, items: Sequence[StreamItem]) -> FrozenPass:
    """``frozen`` restricted to ``items``; ValueError when it was computed with another model than ``lm``, in
    another weights dtype, or over a stream that does not hold every item."""
    if frozen.model_id != lm.model_id:
        raise ValidationError(f"computed with {frozen.model_id!r}, not {lm.model_id!r}")
    if frozen.dtype != weights_dtype(lm):
        raise ValidationError(f"computed in {frozen.dtype}, not {weights_dtype(lm)}")
    return frozen.select(items)  # the same stream, or a sub-stream of the cached one


def checkpoint_path(cache: Path) -> Path:
    """Where the answers of a frozen pass being computed for ``cache`` are checkpointed."""
    return cache.with_name(cache.name + ".answers")


def frozen_for(
    lm: Any,
    items: Sequence[StreamItem],
    cache: Path | None,
    batch_size: int,
    progress: Progress | None = None,
    report: Callable[[str], None] = log.info,
    need_p_yes: bool = False,
) -> FrozenPass:
    """The frozen pass of ``items``: from ``cache`` when it holds this model and stream (or a super-stream of
    it), else computed with ``batch_size`` (``progress(stage, done, total)`` as it goes) and written to ``cache``
    when that file does not exist yet. ``need_p_yes``: make sure the pass has the raw P(yes) (read it if not)."""
    if cache is not None and cache.is_file():
        cached = FrozenPass.load(cache)  # not a frozen-pass file: an error, not silently recomputed
        try:
            frozen = matching_pass(cached, lm, items)
            report(f"reusing the frozen pass from {cache}")
        except ValueError as e:
            report(f"{cache} does not match ({e}); recomputing")
        else:
            if need_p_yes and frozen.p_yes is None:
                report(f"{cache} has no raw P(yes); reading it for the {len(items)} answers")
                frozen.p_yes = read_p_true(lm, items, frozen.answers, batch_size)[1]
            return frozen
    writes = cache is not None and not cache.exists()  # never overwrite another stream's cache
    ckpt = checkpoint_path(cache) if writes and cache is not None else None
    resumed = ckpt is not None and ckpt.is_file()
    report(f"frozen pass over {len(items)} questions" + (f" (resuming from {ckpt} if it matches)…" if resumed else "…"))
    frozen = frozen_pass(lm, items, batch_size, progress, checkpoint=ckpt)
    if cache is not None and ckpt is not None:
        frozen.save(cache)
        ckpt.unlink(missing_ok=True)
    return frozen
