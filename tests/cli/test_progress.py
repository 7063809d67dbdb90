"""The progress view of evaluate (`tracecal.cli.progress.RunView`): stage and decile lines in a log file, the
ETA from this invocation's rate, a line at least every interval, the heartbeat thread."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.progress import Progress

from tracecal.cli.progress import RunView


def test_run_view_logs_stages_and_deciles_without_a_terminal() -> None:
    console = Console(record=True, force_terminal=False, width=120)
    with Progress(console=console) as pb:
        view = RunView(pb)
        view("run", 0, 10)
        view("traces · [red]x[/red]", 1, 4)
        view("run", 5, 10)
        view("run", 10, 10)
    text = console.export_text()
    assert "traces · [red]x[/red] 1/4" in text
    assert "whole run   0 %" in text and "whole run  50 %" in text and "whole run 100 %, computed" in text


class FakeClock:
    """Seconds that pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _log_view(every_s: float = 30.0) -> tuple[RunView, Console, FakeClock]:
    console = Console(record=True, force_terminal=False, width=200)
    clock = FakeClock()
    return RunView(Progress(console=console), clock=clock, every_s=every_s), console, clock


def test_run_view_gives_an_eta_from_this_invocations_rate_only() -> None:
    """A resumed run: 40 of 100 units on disk. One unit done in 20 s → 59 left at 20 s each: ETA 0:19:40; the 40
    units on disk do not make the rate (they would give 41 units in 20 s: an ETA of 29 s)."""
    view, console, clock = _log_view()
    view("run", 40, 100)
    assert view.eta() is None and "ETA after the first shard" in console.export_text(clear=False)
    clock.now += 20
    view("traces mlqa", 0, 64)
    view("run", 41, 100)
    assert view.eta() == pytest.approx(59 * 20.0)
    assert view.status() == "whole run  41 %, ETA 0:19:40 · traces mlqa 0/64"


def test_run_view_prints_a_line_every_interval_while_a_shard_computes() -> None:
    """No callback for 600 s (one long shard): the heartbeat's ticks print a line each 30 s, none in between, each
    with done/total, the elapsed time and the ETA."""
    view, console, clock = _log_view(every_s=30.0)
    view("run", 0, 10)
    view("traces mlqa", 0, 64)
    clock.now += 100
    view("run", 1, 10)  # 100 s for the first unit
    view("traces mlqa", 64, 64)
    console.export_text(clear=True)
    lines = []
    for _ in range(60):  # 600 s in ticks of 10 s
        clock.now += 10
        view.tick()
        lines += console.export_text(clear=True).splitlines()
    assert len(lines) == 20, lines
    assert lines[0] == "[   130 s] whole run  10 %, ETA 0:19:30 · traces mlqa 64/64"  # 9 × 130 s
    assert lines[-1] == "[   700 s] whole run  10 %, ETA 1:45:00 · traces mlqa 64/64"  # the rate falls


def test_run_view_heartbeat_thread_ticks_until_closed() -> None:
    """``beat`` ticks once per wait that does not end it; ``with`` starts it on a thread (no terminal) and stops it."""
    view, console, clock = _log_view(every_s=1.0)
    view("run", 0, 4)
    waits = iter([False, False, True])

    class Stop:
        def wait(self, timeout: float) -> bool:
            clock.now += 5
            return next(waits)

    view.stopped = Stop()  # type: ignore[assignment]
    console.export_text(clear=True)
    view.beat()
    assert len(console.export_text().splitlines()) == 2
    view2, _, _ = _log_view()
    with view2:
        assert view2.thread is not None and view2.thread.is_alive()
    assert not view2.thread.is_alive()
    live = RunView(Progress(console=Console(force_terminal=True)))
    with live:
        assert live.thread is None  # a terminal: the bars redraw themselves
