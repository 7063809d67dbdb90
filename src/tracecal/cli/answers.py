"""`tracecal score-answers FILE --model M [--calibrator cal.json] --out scored.parquet`: traces and confidences of
answers that already exist (logged answers, another model's, a person's), by teacher forcing through the model
(`Backend.trace_answers`; what such a trace means: `tracecal.backends.answers`).

Input rows - ``.jsonl`` (one JSON object per line), ``.csv`` (a header line) or ``.parquet`` (one row per answer):
``prompt`` (text) or ``messages`` (a chat, a list of ``{"role", "content"}``; in a CSV cell, its JSON), ``answer``
(text, may be empty) and optionally ``id`` (default: the row's line number). A malformed row (unreadable JSON, no
prompt, messages that are not a chat, no answer) is reported on stderr as ``FILE:LINE: why`` and skipped; the
other rows are scored and the command exits 0. ``--on-error raise`` refuses the file at its first malformed row
instead (exit 2), as does a file with no row to score.

Output: one Parquet file holding the traces (`tracecal.traces.io.SCHEMA`: ``tracecal score`` and ``load_traces``
read it) plus, per row, ``line`` (where the row is in FILE), ``c_trace`` (c_TRACE = exp(−R), METHOD §2; NaN for an
empty answer) and, with ``--calibrator``, ``p_correct`` (the calibrated probability; a TRACE+ file reads the
trace, a scalar calibrator file - Platt, isotonic, temperature - reads c_TRACE, as in the gateway).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer
from rich.markup import escape

from tracecal.cli.common import (
    FOREIGN,
    DtypeOpt,
    ModelOpt,
    ThreadsOpt,
    check_option,
    check_provenance,
    check_runtime_options,
    console,
    note,
    progress_bar,
    user_errors,
)
from tracecal.cli.traces import out_path
from tracecal.errors import ValidationError

__all__ = ["AnswerRow", "read_answer_rows", "score_answers"]

ON_ERROR = ("skip", "raise")
"""What ``--on-error`` does with a malformed row: report and skip it, or refuse the file."""

SHOWN_ERRORS = 20
"""Malformed rows listed one by one before the rest are counted."""


class AnswerRow(NamedTuple):
    """One good row of an answers file."""

    line: int
    id: str
    prompt: Any
    answer: str


def _rows(path: Path) -> list[tuple[int, Any, str | None]]:
    """(line, record, read error) for each row of a JSONL, CSV or Parquet file (a Parquet row's "line" is its
    1-based position)."""
    from tracecal.tasks.sources import iter_csv, iter_jsonl

    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return [(i + 1, r, None) for i, r in enumerate(pq.read_table(path).to_pylist())]
    if suffix not in (".jsonl", ".csv"):
        kind = suffix or "(no suffix)"
        raise ValidationError(f"{path}: unsupported answers file {kind}; use .jsonl, .csv or .parquet")
    reader = iter_jsonl if suffix == ".jsonl" else iter_csv
    return [(r.line if r.line is not None else r.index + 1, r.record, r.error) for r in reader(path)]


def _parse(line: int, rec: Any) -> AnswerRow:
    """One row → `AnswerRow`; `ValidationError` saying what the row lacks."""
    from tracecal._validation import check_text
    from tracecal.backends.base import check_prompts

    if not isinstance(rec, dict):
        raise ValidationError("expected an object with 'prompt' or 'messages' and 'answer'")
    messages = rec.get("messages")
    if isinstance(messages, str) and messages.strip():
        try:
            messages = json.loads(messages)
        except json.JSONDecodeError as e:
            raise ValidationError(f"'messages' is not JSON ({e.msg})") from None
    prompt = messages or rec.get("prompt")
    if not prompt or not isinstance(prompt, str | list):
        raise ValidationError("no prompt: give 'prompt' (text) or 'messages' (a list of {'role', 'content'})")
    if isinstance(prompt, str):
        check_text(prompt, "'prompt'")
    try:
        check_prompts([prompt])
    except ValidationError as e:
        raise ValidationError(str(e).removeprefix("prompt 0").lstrip(": ,") or "bad prompt") from None
    answer = rec.get("answer")
    if not isinstance(answer, str):
        raise ValidationError(f"'answer' must be text, got {type(answer).__name__ if answer is not None else 'none'}")
    rid = rec.get("id")
    rid = str(line) if rid is None or rid == "" else check_text(str(rid), "'id'")
    return AnswerRow(line, rid, prompt, check_text(answer, "'answer'"))


def read_answer_rows(path: Path, on_error: str = "skip") -> tuple[list[AnswerRow], list[str]]:
    """The good rows of an answers file and one ``FILE:LINE: why`` per malformed row (``on_error="raise"``:
    `ValidationError` at the first one instead)."""
    if not path.is_file():
        raise FileNotFoundError(f"answers file not found: {path}")
    good, bad = [], []
    for line, rec, error in _rows(path):
        try:
            if error is not None:
                raise ValidationError(error)
            good.append(_parse(line, rec))
        except ValidationError as e:
            if on_error == "raise":
                raise ValidationError(f"{path}:{line}: {e}") from None
            bad.append(f"{path}:{line}: {e}")
    if not good:
        first = f" (first: {bad[0]})" if bad else ""
        raise ValidationError(f"{path}: no answer to score: {len(bad)} malformed rows{first}")
    return good, bad


def _write(traces: list[Any], rows: list[AnswerRow], conf: Any, prob: Any, out: Path, inputs: Any) -> None:
    """The traces table with the per-row columns, written atomically (never over one of ``inputs``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tracecal.traces.io import atomic_write, traces_to_table

    table = traces_to_table(traces).append_column("line", pa.array([r.line for r in rows], pa.int64()))
    table = table.append_column("c_trace", pa.array(conf, pa.float64()))
    if prob is not None:
        table = table.append_column("p_correct", pa.array(prob, pa.float64()))
    atomic_write(out, lambda tmp: pq.write_table(table, tmp, compression="zstd"), inputs, "--out")


@user_errors
def score_answers(
    answers_path: Annotated[Path, typer.Argument(help="answers file: .jsonl, .csv or .parquet")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Parquet file to write (traces + confidences)")],
    model: ModelOpt = None,
    backend: Annotated[str, typer.Option(help="auto, hf, http (vLLM) or llamacpp")] = "auto",
    calibrator: Annotated[Path | None, typer.Option("--calibrator", "-c", help="calibrator JSON")] = None,
    on_error: Annotated[str, typer.Option(help="malformed rows: skip (reported) or raise")] = "skip",
    batch_size: Annotated[int, typer.Option(help="answers per forward pass")] = 16,
    allow_foreign_calibrator: Annotated[
        bool, typer.Option(FOREIGN, help="use a --calibrator made on another model's or dtype's answers (warns)")
    ] = False,
    dtype: DtypeOpt = "auto",
    threads: ThreadsOpt = None,
) -> None:
    """Score answers you already have: each answer's trace under the model (teacher forcing) and its confidence (a
    calibrator made on another model's or dtype's answers is refused)."""
    from tracecal._validation import Interval, Options
    from tracecal.tasks.files import check_unique_ids

    check_option("--on-error", on_error, Options(*ON_ERROR))
    check_option("--batch-size", batch_size, Interval(int, 1, None))
    check_runtime_options(dtype, threads)
    inputs = [("answers file", answers_path), ("calibrator", calibrator), ("model file", model, "**/*")]
    out_path(out, "traces", inputs)
    rows, bad = read_answer_rows(answers_path, on_error)
    check_unique_ids([r.id for r in rows], str(answers_path))  # before the model loads (as generate --prompts)
    for msg in bad[:SHOWN_ERRORS]:
        note(f"skipped {msg}")
    if len(bad) > SHOWN_ERRORS:
        note(f"… and {len(bad) - SHOWN_ERRORS} more malformed rows")
    scorer = _scorer(calibrator)
    from tracecal.backends import load_model

    with console.status("loading model…"):
        lm = load_model(model, backend=backend, batch_size=batch_size, dtype=dtype, threads=threads or "auto")
    if scorer is not None and calibrator is not None:  # before any answer is traced
        check_provenance(calibrator, scorer.calibrator.provenance, _identity(lm), allow_foreign_calibrator, "score")
    with progress_bar() as pb:
        job = pb.add_task("scoring answers", total=len(rows))
        prompts, answers, ids = [r.prompt for r in rows], [r.answer for r in rows], [r.id for r in rows]
        traces = lm.trace_answers(prompts, answers, ids=ids, progress=lambda n: pb.advance(job, n))
    conf, prob = _confidences(scorer, traces)
    _write(traces, rows, conf, prob, out, inputs)
    skipped = f"; {len(bad)} malformed rows skipped" if bad else ""
    console.print(f"scored {len(traces)} answers{skipped}; wrote [bold]{escape(str(out))}[/]")


def _identity(lm: Any) -> tuple[str | None, str | None]:
    """(model id, weight dtype) the traces of ``lm`` will record: the dtype of an HF model's weights, else None."""
    dtype = getattr(getattr(lm, "model", None), "dtype", None)
    return getattr(lm, "model_id", None), None if dtype is None else str(dtype).replace("torch.", "")


def _scorer(calibrator: Path | None) -> Any:
    """The gateway's scorer with the calibrator file loaded (None without one)."""
    if calibrator is None:
        return None
    from tracecal.calibrators import load_calibrator
    from tracecal.serve.scoring import Scorer

    return Scorer(load_calibrator(calibrator))


def _confidences(scorer: Any, traces: list[Any]) -> tuple[Any, Any]:
    """(c_TRACE, the calibrated probability or None) per trace."""
    from tracecal.signals.operators import trace_confidence
    from tracecal.traces.trace import TraceBatch

    conf = trace_confidence(traces)
    return conf, None if scorer is None else scorer.probabilities(TraceBatch.from_traces(traces), conf)
