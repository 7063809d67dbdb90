"""The progress view of `tracecal evaluate`: bars on a terminal, lines with an ETA in a log file (`RunView`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rich.progress import Progress

from tracecal.cli.common import safe_text, shown

__all__ = ["HEARTBEAT_POLL_S", "LOG_EVERY_S", "SPEED_WINDOW_S", "RunView", "hms"]

LOG_EVERY_S = 30.0
"""Without a terminal (a log file): the longest wall time between two progress lines, in seconds."""

HEARTBEAT_POLL_S = 2.0
"""How often the log-file heartbeat looks whether `LOG_EVERY_S` has passed since the last line, in seconds."""

SPEED_WINDOW_S = 24 * 3600.0
"""The window of rich's speed estimate (its default, 30 s, is shorter than one shard of a slow task: no ETA)."""


def hms(seconds: float) -> str:
    """``seconds`` as ``h:mm:ss`` (rounded to the second)."""
    s = max(0, round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class RunView:
    """One progress view of a whole evaluation: the run (all passes × tasks × shards, weighted by each pass's
    cost per answer, with the overall ETA) and the stage being computed now.

    Without a terminal (a log file) it prints lines instead of redrawing bars: one when the stage changes, one at
    each 10 % of the run and one at least every ``every_s`` seconds of wall time (a heartbeat thread, started by
    ``with RunView(pb) as view``, prints it while one long shard computes). Each line reads ``[elapsed] whole run
    P %, ETA h:mm:ss · stage done/total``: P is the share of the run's work (answers weighted by each pass's cost,
    so no count is shown beside it, which would not be one of answers); the stage's counts are its answers. The ETA
    is (total − done) / rate, the rate being the work done in this invocation over the time it took: shards already
    on disk when the run started (a resumed run) count in done, not in the rate; before the first shard of this
    invocation ends there is no rate ("ETA after the first shard"). ``clock``: seconds, monotonic (a fake one in
    tests)."""

    def __init__(
        self,
        pb: Progress,
        clock: Callable[[], float] = time.monotonic,
        every_s: float = LOG_EVERY_S,
        poll_s: float = HEARTBEAT_POLL_S,
    ) -> None:
        self.pb, self.clock, self.every_s, self.poll_s = pb, clock, every_s, poll_s
        self.live = pb.console.is_terminal
        pb.speed_estimate_period = SPEED_WINDOW_S  # the bars' ETA: the rate of this invocation, as the log's
        self.run = pb.add_task("whole run", total=None, start=False)
        self.stage = pb.add_task("", total=None, visible=False)
        self.t0 = self.last_line = clock()
        self.decile = -1
        self.stage_name, self.stage_done, self.stage_total = "", 0, 0
        self.done, self.total = 0, 0
        self.first: tuple[float, int] | None = None  # (time, done) at this invocation's first report of the run
        self.lock = threading.RLock()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self) -> RunView:
        if not self.live:
            self.thread = threading.Thread(target=self.beat, name="tracecal-progress", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()

    def beat(self) -> None:
        """The heartbeat: `tick` every ``poll_s`` seconds until the view is closed."""
        while not self.stopped.wait(self.poll_s):
            self.tick()

    def tick(self) -> None:
        """Print the status line when ``every_s`` seconds have passed since the last line (no terminal only)."""
        with self.lock:
            quiet = self.first is None and not self.stage_name  # nothing to report yet
            if not self.live and not quiet and self.clock() - self.last_line >= self.every_s:
                self._log()

    def eta(self) -> float | None:
        """Seconds left at this invocation's rate (class docstring); None before its first unit of work is done."""
        if self.first is None or self.done <= self.first[1]:
            return None
        rate = (self.done - self.first[1]) / max(self.clock() - self.first[0], 1e-9)
        return max(self.total - self.done, 0) / rate

    def status(self) -> str:
        """The status line (without its time prefix): the run, then the stage being computed."""
        parts = []
        if self.first is not None:
            eta = self.eta()
            left = ", computed" if self.done >= self.total else ", ETA after the first shard" if eta is None else ""
            run = f"whole run {100 * self.done / max(self.total, 1):3.0f} %"  # of its cost-weighted work: no count
            parts.append(run + (left or f", ETA {hms(eta or 0.0)}"))
        if self.stage_name:
            parts.append(f"{self.stage_name} {self.stage_done}/{self.stage_total}")
        return " · ".join(parts)

    def _log(self) -> None:
        now = self.clock()
        self.last_line = now
        self.pb.console.print(f"[{now - self.t0:6.0f} s] {safe_text(self.status())}", highlight=False, markup=False)

    def _run_progress(self, done: int, total: int) -> None:
        if self.first is None:
            self.first = (self.clock(), done)
            self.pb.start_task(self.run)
            self.pb.update(self.run, completed=done, total=max(total, 1))  # already on disk: no speed sample
        self.done, self.total = done, total
        self.pb.update(self.run, completed=done, total=max(total, 1))
        decile = int(10 * done / max(total, 1))
        if not self.live and decile != self.decile:
            self.decile = decile
            self._log()

    def __call__(self, desc: str, done: int, total: int) -> None:
        with self.lock:
            if desc == "run":
                self._run_progress(done, total)
            else:
                self.pb.update(self.stage, description=shown(desc), completed=done, total=max(total, 1), visible=True)
                changed = desc != self.stage_name
                self.stage_name, self.stage_done, self.stage_total = desc, done, total
                if not self.live and changed:
                    self._log()
            self.tick()
