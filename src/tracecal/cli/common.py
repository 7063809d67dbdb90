"""What every `tracecal` command shares: the two consoles, `fail`, the `user_errors` decorator, the number
formatter, the progress bar and the options several commands take.

An error the user can fix (a `tracecal.errors.TracecalError`, an ``OSError`` such as a missing file, a
``ValueError`` from a bad value, a ``RuntimeError`` or ``ImportError`` from a backend that cannot start, a
``MemoryError`` of a request too large for the machine) ends the command with exit status 2 and one line ``error:
<message>``, the message's rich markup escaped (a path holding ``[red]`` is printed as it is), never a traceback.
`refuse_input_as_output` checks early that a command will not write over one of its inputs
(`tracecal._outputs.check_output`, which the one writer `atomic_write` applies again at the write).
"""

from __future__ import annotations

import functools
import math
import numbers
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, NoReturn, ParamSpec, TypeVar

import click
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from tracecal._validation import SEED, Constraint, Interval, Options, check_param
from tracecal.backends.runtime import MAX_THREADS
from tracecal.errors import TracecalError, ValidationError, os_error_message
from tracecal.traces.provenance import SERVER, TRACES, mismatch

__all__ = [
    "EXIT_USER_ERROR",
    "FOREIGN",
    "NO_MODEL",
    "PASS_THROUGH",
    "MISSING",
    "USER_ERRORS",
    "DataDirOpt",
    "DtypeOpt",
    "ModelOpt",
    "ThreadsOpt",
    "check_runtime_options",
    "THREADS",
    "check_entry",
    "check_option",
    "check_provenance",
    "console",
    "error_line",
    "fail",
    "fmt_num",
    "given_options",
    "note",
    "out_console",
    "progress_bar",
    "refuse_input_as_output",
    "safe_text",
    "shared_options",
    "shown",
    "split_names",
    "user_errors",
]

#: Exit status of a command refused for bad input (click's own usage errors use the same).
EXIT_USER_ERROR = 2
#: How a missing or non-finite number (None, NaN, ±inf) is shown in every table and summary line.
MISSING = "—"
#: The exceptions `user_errors` turns into ``error: <message>`` and exit status 2.
USER_ERRORS: tuple[type[BaseException], ...] = (
    TracecalError,
    OSError,
    ValueError,
    RuntimeError,
    ImportError,
    MemoryError,
)

#: Exceptions `user_errors` lets through: the exits of `fail` and of click / typer, and click's usage errors.
PASS_THROUGH: tuple[type[BaseException], ...] = (
    typer.Exit,
    typer.Abort,
    click.exceptions.Exit,
    click.exceptions.Abort,
    click.ClickException,
)

console = Console(stderr=True, soft_wrap=True)  # messages, progress, errors: a line is never broken
out_console = Console(width=None if sys.stdout.isatty() else 160)  # tables; a log file gets whole tables

ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help="HF model id, local dir or .gguf path (default: offline SmolLM2-135M)"),
]
DataDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", help="evaluation data folder (default: $TRACECAL_DATA or ../shared/data)"),
]
DtypeOpt = Annotated[
    str,
    typer.Option(
        "--dtype",
        help="model weights: auto (bfloat16 on a GPU or a CPU with bf16 matrix units, AMX / AVX-512-BF16; else "
        "float32; a resumed run: its own) | float32 | bfloat16 | float16",
    ),
]
"""The ``--dtype`` of every command that loads a model (`tracecal.backends.runtime.resolve_dtype`)."""
ThreadsOpt = Annotated[
    int | None,
    typer.Option(
        "--threads",
        help="torch (and llama.cpp) CPU threads (default: the CPUs other processes leave free, at least 1, or "
        "$OMP_NUM_THREADS; docs/benchmarks.md)",
    ),
]
"""The ``--threads`` of every command that loads a model (`tracecal.backends.runtime.auto_threads`)."""

P = ParamSpec("P")
R = TypeVar("R")


#: Characters a terminal may act on instead of showing: the C0 controls (ESC starts the CSI and OSC sequences
#: that clear a screen, recolour it or retitle the window), DEL, the C1 controls (U+009B is a one-character CSI)
#: and the bidirectional overrides (which reorder what is shown around them).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def safe_text(text: Any, newlines: bool = False) -> str:
    """``text`` (any value: ``str()`` of it) with every control character that a terminal could act on written as
    its escape (``ESC[2J`` → ``\\x1b[2J``, a newline → ``\\n``): the one escaping of user data (answers, ids,
    prompts, paths, task names) before it is shown. Printable text is unchanged; ``newlines`` keeps the line
    breaks of a multi-line text (a Markdown table).

    >>> safe_text("ok \\x1b]0;owned\\x07 done\\n")
    'ok \\\\x1b]0;owned\\\\x07 done\\\\n'
    """
    if newlines:
        return "\n".join(safe_text(line) for line in str(text).split("\n"))
    return _CONTROL.sub(_escape_char, str(text))


def _escape_char(m: re.Match[str]) -> str:
    c = m.group()
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c) or (
        f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
    )


def shown(value: Any) -> str:
    """User data for a console line or table cell that takes rich markup: `safe_text`, then its markup escaped
    (a ``[red]`` in an answer is shown as it is). Every print of user data in the CLI goes through it (or through
    `safe_text` where markup is off)."""
    return escape(safe_text(value))


def one_line(msg: str) -> str:
    """``msg`` on one line: each line break (and the indentation around it) becomes one space."""
    return re.sub(r"[ \t]*\n\s*", " ", msg.strip(" \n"))  # a path's own tab or trailing space stays (escaped)


def fail(msg: str, code: int = EXIT_USER_ERROR) -> NoReturn:
    """Print ``error: <msg>`` (one line, markup in ``msg`` escaped) on stderr and end the command with ``code``."""
    console.print(f"[bold red]error:[/] {shown(one_line(msg))}", soft_wrap=True, highlight=False)
    raise typer.Exit(code)


def note(msg: str) -> None:
    """A progress or status line on stderr, printed as it is (no markup)."""
    console.print(safe_text(msg), markup=False, highlight=False, soft_wrap=True)


def show_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """`warnings.showwarning` for the command line: ``warning: <message>`` on one line of stderr, without the
    library's file, line number and source line (which read like a crash to a user)."""
    console.print(f"[yellow]warning:[/] {shown(one_line(str(message)))}", soft_wrap=True, highlight=False)


def error_line(err: BaseException) -> str:
    """The line a user error is reported with: its message; for an ``OSError`` of the OS (or pyarrow) the one
    mapping `tracecal.errors.os_error_message` (a full disk or a read-only folder says what to do)."""
    if isinstance(err, OSError) and type(err).__module__ == "builtins":
        return os_error_message(err, writing=False)
    if isinstance(err, MemoryError):
        return (
            f"out of memory ({str(err) or 'MemoryError'}): ask for less (a smaller --limit, --batch-size or --n-boot)"
        )
    return str(err) or type(err).__name__


THREADS = Interval(int, 1, MAX_THREADS)
"""The bound of every ``--threads``."""


def shared_options() -> dict[str, Constraint]:
    """The one bound of each option several commands take, by parameter name, checked by `check_entry` before a
    command runs (the same value gets the same answer in every command). Built on first use (the statistics
    modules that declare some of them load in seconds: ``tracecal --help`` need not wait)."""
    from tracecal.stats.bootstrap import LEVEL, N_BOOT
    from tracecal.stats.splits import SPLITS

    return {
        "seed": SEED,
        "sample_seed": SEED,
        "show": Interval(int, 0, None),
        "max_examples": Interval(int, 0, None),
        "C": Interval(float, 0, None, closed="neither"),
        "threads": THREADS,
        "splits": SPLITS,
        "n_boot": N_BOOT,
        "level": LEVEL,
        "ray_actors": Interval(int, 1, None),
    }


def check_entry(params: dict[str, Any]) -> None:
    """Refuse (`ValidationError` naming the option) before a command reads or computes anything a value outside
    its `shared_options` bound and a number that is not finite (NaN, ±∞: every float option is a finite number).
    A command's own checks of its other options follow first thing in its body (the fuzzing harness,
    tests/cli/test_fuzz_options.py, holds every option to this: a negative count or seed, NaN or ±∞ is refused
    naming the option before any input is read)."""
    bounds = shared_options()
    for name, value in params.items():
        flag = "--" + name.rstrip("_").replace("_", "-")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValidationError(f"{flag} must be a finite number, got {value}")
        if name in bounds and value is not None:  # None: the option was not given
            check_param(flag, value, bounds[name])


def user_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Decorate a command: its options are checked first (`check_entry`); the exceptions of `USER_ERRORS` end it
    through `fail` (exit status 2, one escaped line `error_line`, no traceback). click's own exits and usage errors
    pass through unchanged."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            check_entry(kwargs)
            return func(*args, **kwargs)
        except PASS_THROUGH:
            raise  # typer's and click's Exit and Abort derive from RuntimeError: never re-reported
        except USER_ERRORS as err:
            fail(error_line(err))

    return wrapper


def refuse_input_as_output(
    out: Path, option: str, inputs: Iterable[tuple[Any, ...]], shards: str = "*.parquet"
) -> None:
    """Refuse to write ``out`` (given by ``option``) when it is one of the inputs: `ValidationError` naming both.

    The check of `tracecal._outputs.check_output`, which `atomic_write` applies again at the write, made before a
    command reads or computes anything. ``inputs``: ``(what, path)`` pairs, whose folder stands for its files that
    match ``shards``, or ``(what, path, pattern)`` triples.
    """
    from tracecal._outputs import check_output

    check_output(out, [(e[0], e[1], e[2] if len(e) > 2 else shards) for e in inputs], option)


FOREIGN = "--allow-foreign-calibrator"
"""The flag that uses a calibrator / guarantee file made on another model's answers anyway (with a warning)."""
NO_MODEL = (
    "records no model its answers came from (saved from the Python API from scores or a TraceBatch, or from "
    "traces without a model id), so it cannot be checked against {model!r}; record it before saving "
    "(cal.provenance = tracecal.traces.provenance.provenance({model!r}, dtype, None))"
)
"""Why a file whose provenance names no model is refused against a known model (``{model}``)."""
_USES = {  # how `check_provenance` words each use: the comparison, the remedy, the override, the warning
    "serve": (SERVER, "serve that model", "to serve the file anyway", "served anyway"),
    "score": (TRACES, "score that model's traces with it", "to score with the file anyway", "scored anyway"),
}


def check_provenance(
    path: Path,
    record: dict[str, Any] | None,
    identity: tuple[str | None, str | None] | None,
    allow: bool,
    use: str = "serve",
    dtype_hint: str = "",
) -> None:
    """Refuse (`ValidationError`) a calibrator / guarantee file whose provenance names another model or dtype than
    ``identity`` (the served model, or the traces scored: ``use`` is ``serve`` or ``score``), or names no model
    while that one is known (`NO_MODEL`), unless ``allow`` (`FOREIGN`): then a warning. A file without provenance
    (an older tracecal) gets a warning and is used; ``identity`` None (nothing to compare with) passes.
    ``dtype_hint`` follows a dtype mismatch (e.g. ``" (add --dtype bfloat16)"``)."""
    if identity is None:
        return
    against, remedy, override, warned = _USES[use]
    if record is None:
        note(f"warning: {path} records no provenance (an older tracecal wrote it): not checked against {against.noun}")
        return
    why = mismatch(record, identity[0], None, against)  # another model: no dtype hint
    hint = ""
    if why is None and (why := mismatch(record, None, identity[1], against)):
        hint = dtype_hint
    if why is None and not record.get("model") and identity[0]:
        why = NO_MODEL.format(model=identity[0])
    if why and not allow:
        raise ValidationError(f"{path} {why}{hint}; {remedy}, or add {FOREIGN} {override}")
    if why:
        note(f"warning: {path} {why}; {warned} ({FOREIGN}): its probabilities and guarantees do not hold")


def fmt_num(value: Any, digits: int = 3, pct: bool = False) -> str:
    """``value`` with ``digits`` decimals (``pct``: ``100 · value`` followed by ``%``); `MISSING` for None, NaN,
    ±inf or anything that is not a real number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        return MISSING
    return f"{100 * float(value):.{digits}f}%" if pct else f"{float(value):.{digits}f}"


def check_option(name: str, value: Any, constraint: Constraint) -> None:
    """Refuse an option's value outside ``constraint`` (`tracecal._validation`); an option not given (None) is
    not checked."""
    if value is not None:
        check_param(name, value, constraint)


def given_options(ctx: Any) -> set[str]:
    """The parameters (by name) whose value the user gave (command line or environment) in the command context
    ``ctx`` (a ``typer.Context``; None, as when called from Python: none). Asked of the context the command
    receives, never of a global one: typer runs its own copy of click, whose current context the ``click``
    package cannot see."""
    if ctx is None:
        return set()
    given = set()
    for name in ctx.params:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given.add(name)
    return given


def check_runtime_options(dtype: str, threads: int | None) -> None:
    """Refuse a ``--dtype`` outside `tracecal.backends.runtime.DTYPES` or a ``--threads`` below 1 (before any model
    loads)."""
    from tracecal.backends.runtime import DTYPES

    check_option("--dtype", dtype, Options(*DTYPES))
    check_option("--threads", threads, THREADS)


def split_names(spec: str | None) -> list[str]:
    """``"a, b,,c"`` → ``["a", "b", "c"]``; ``[]`` for None or an empty string."""
    return [x.strip() for x in spec.split(",") if x.strip()] if spec else []


def progress_bar() -> Progress:
    """The progress bar of long commands (on the stderr console; it stays on screen when done)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
