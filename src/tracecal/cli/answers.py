"""`tracecal score-answers FILE --model M [--calibrator cal.json] --out scored.parquet`: traces and confidences of
answers that already exist (logged answers, another model's, a person's), by teacher forcing through the model
(`Backend.trace_answers`; what such a trace means: `tracecal.backends.answers`).

Input rows (`tracecal.tasks.files.read_answer_rows`; the format with examples: docs/formats.md) - ``.jsonl``,
``.json`` (a list), ``.csv`` or ``.parquet``, one row per answer: the prompt from exactly one of ``prompt`` (text),
``messages`` (a chat) or ``question`` (as in a task file, with its optional ``context`` and ``choices``: the model
gets the task prompt `tracecal generate --task` would give it, and in a plain-text prompt the answer follows
"Answer:" after a space), the answer from exactly one of ``answer`` (text) or ``answer_ids`` (token ids), and
optionally ``id``. The keys read are said on stderr. A malformed row is reported as ``FILE:LINE: why`` and skipped
(``--on-error raise``: the file is refused at it, exit 2); a row giving two prompts (``prompt`` and ``question``)
or two answers refuses the file, naming its line. A row the model cannot take - prompt and answer longer than its
context, token ids outside its vocabulary - is found with the model's tokenizer before any answer is traced and
reported and skipped the same way, as ``FILE:LINE (id 'x'): why`` (`traceable_rows`).

Output: one Parquet file holding the traces (`tracecal.traces.io.SCHEMA`: ``tracecal score`` and ``load_traces``
read it) plus, per row, ``line`` (where the row is in FILE), ``c_trace`` (c_TRACE = exp(−R), docs/method.md §2; NaN
for an empty answer), ``spans`` (the answer's risky spans as JSON, character offsets into it: `tracecal.risk_spans`,
docs/localisation.md) and, with ``--calibrator``, ``p_correct`` (the calibrated probability; a TRACE+ file reads the
trace, a scalar calibrator file - Platt, isotonic, temperature - reads c_TRACE, as in the gateway). The first
``--show`` rows are printed as a table (stdout), then a summary line: rows scored, mean confidence, the file.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from tracecal.cli.common import (
    FOREIGN,
    DtypeOpt,
    ModelOpt,
    ThreadsOpt,
    check_option,
    check_provenance,
    check_runtime_options,
    console,
    fmt_num,
    note,
    out_console,
    progress_bar,
    shown,
    user_errors,
)
from tracecal.cli.traces import out_path
from tracecal.tasks.files import AnswerRow, read_answer_rows

__all__ = [
    "AnswerRow",
    "keys_read",
    "read_answer_rows",
    "score_answers",
    "scores_table",
    "task_prompts",
    "traceable_rows",
]

ON_ERROR = ("skip", "raise")
"""What ``--on-error`` does with a malformed row: report and skip it, or refuse the file."""

ANSWERS = "answers file"
"""The role an answers file is named by in every error about it (`tracecal._inputs`)."""

SHOWN_ERRORS = 20
"""Malformed rows listed one by one before the rest are counted."""

ANSWER_WIDTH = 60
"""Characters of an answer shown in the table (longer ones end in "…")."""


def _write(traces: list[Any], rows: list[AnswerRow], conf: Any, prob: Any, out: Path, inputs: Any) -> None:
    """The traces table with the per-row columns, written atomically (never over one of ``inputs``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tracecal._outputs import atomic_write
    from tracecal.signals.spans import spans_json
    from tracecal.traces.io import traces_to_table

    table = traces_to_table(traces).append_column("line", pa.array([r.line for r in rows], pa.int64()))
    table = table.append_column("c_trace", pa.array(conf, pa.float64()))
    table = table.append_column("spans", pa.array(spans_json(traces), pa.string()))
    if prob is not None:
        table = table.append_column("p_correct", pa.array(prob, pa.float64()))
    atomic_write(out, lambda tmp: pq.write_table(table, tmp, compression="zstd"), inputs, "--out")


@user_errors
def score_answers(
    answers_path: Annotated[
        Path, typer.Argument(help="answers file: .jsonl, .json, .csv or .parquet (format: docs/formats.md)")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Parquet file to write (traces + confidences)")],
    model: ModelOpt = None,
    backend: Annotated[str, typer.Option(help="auto, hf, http (vLLM) or llamacpp")] = "auto",
    calibrator: Annotated[Path | None, typer.Option("--calibrator", "-c", help="calibrator JSON")] = None,
    on_error: Annotated[str, typer.Option(help="malformed rows: skip (reported) or raise")] = "skip",
    batch_size: Annotated[int, typer.Option(help="answers per forward pass")] = 16,
    allow_foreign_calibrator: Annotated[
        bool, typer.Option(FOREIGN, help="use a --calibrator made on another model's or dtype's answers (warns)")
    ] = False,
    show: Annotated[int, typer.Option(help="rows to print in the table (0: none)")] = 20,
    dtype: DtypeOpt = "auto",
    threads: ThreadsOpt = None,
) -> None:
    """Score answers you already have: each answer's trace under the model (teacher forcing) and its confidence (a
    calibrator made on another model's or dtype's answers is refused)."""
    from tracecal._validation import Interval, Options
    from tracecal.tasks.files import check_unique_ids

    check_option("--on-error", on_error, Options(*ON_ERROR))
    check_option("--batch-size", batch_size, Interval(int, 1, None))
    check_option("--show", show, Interval(int, 0, None))
    check_runtime_options(dtype, threads)
    inputs = [("answers file", answers_path), ("calibrator", calibrator), ("model file", model, "**/*")]
    out_path(out, "traces", inputs)
    rows, bad = read_answer_rows(answers_path, on_error)
    check_unique_ids([r.id for r in rows], str(answers_path))  # before the model loads (as generate --prompts)
    _report_skipped(bad)
    note(keys_read(rows, answers_path))
    scorer = _scorer(calibrator)
    from tracecal.backends import load_model

    with console.status("loading model…"):
        lm = load_model(model, backend=backend, batch_size=batch_size, dtype=dtype, threads=threads or "auto")
    options: dict[str, Any] = {}
    if scorer is not None and calibrator is not None:  # before any answer is traced
        check_provenance(calibrator, scorer.calibrator.provenance, _identity(lm), allow_foreign_calibrator, "score")
        options = scorer.backend_options(lm)  # e.g. a hidden-state probe's layers (refused where the backend has none)
    rows, unfit = traceable_rows(lm, rows, answers_path, on_error)  # before any answer is traced
    _report_skipped(unfit)
    traces = _trace_rows(lm, rows, options)
    conf, prob = _confidences(scorer, traces)
    _write(traces, rows, conf, prob, out, inputs)
    if show:
        first = f" (first {show} of {len(traces)})" if show < len(traces) else ""
        out_console.print(scores_table(f"scores{first}", traces, conf, prob, show))
    _summary(len(traces), len(bad) + len(unfit), conf, prob, out)


def _report_skipped(bad: list[str]) -> None:
    """``skipped FILE:LINE: why`` on stderr for the first `SHOWN_ERRORS` rows skipped, then how many more."""
    for msg in bad[:SHOWN_ERRORS]:
        note(f"skipped {msg}")
    if len(bad) > SHOWN_ERRORS:
        note(f"… and {len(bad) - SHOWN_ERRORS} more malformed rows")


def traceable_rows(lm: Any, rows: list[AnswerRow], path: Path, on_error: str) -> tuple[list[AnswerRow], list[str]]:
    """(the rows ``lm`` can trace, ``FILE:LINE (id 'x'): why`` per row it cannot): what only the model's tokenizer
    tells - an answer whose prompt and text exceed the model's context, token ids outside its vocabulary
    (`tracecal.backends.answers.answer_problems`) - checked before any answer is traced, so one such row is skipped
    like a malformed one (``--on-error raise``: `InputFileError` naming it; no row left: `InputFileError`)."""
    from tracecal.backends.answers import answer_problems
    from tracecal.tasks.files import InputFileError

    prompts, answers, _ = task_prompts(rows, bool(getattr(lm, "chat", False)))
    problems = answer_problems(lm, prompts, answers)
    bad = [f"{path}:{r.line} (id {r.id!r}): {why}" for r, why in zip(rows, problems, strict=True) if why]
    if bad and on_error == "raise":
        raise InputFileError(bad[0])
    kept = [r for r, why in zip(rows, problems, strict=True) if not why]
    if not kept:
        raise InputFileError(
            f"{path}: no answer to score: none of its {len(rows)} rows fits the model (first: {bad[0]})"
        )
    return kept, bad


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

    conf = trace_confidence(traces)
    return conf, None if scorer is None else scorer.probabilities(traces, conf)


def keys_read(rows: list[AnswerRow], path: Path) -> str:
    """The line that says which keys the rows were read from, e.g. ``read 120 rows of a.jsonl: prompt from
    'question', answer from 'answer', id from 'id'`` (counts when rows differ: ``'prompt' (3), 'messages' (1)``)."""

    def keys(counts: Counter[str]) -> str:
        if len(counts) == 1:
            return repr(next(iter(counts)))
        return ", ".join(f"{k!r} ({n})" for k, n in counts.most_common())

    ids_given = sum(r.id_key == "id" for r in rows)
    id_from = "'id'" if ids_given == len(rows) else "the line numbers" if not ids_given else "'id' or the line number"
    prompt = keys(Counter(r.prompt_key for r in rows))
    if any(r.prompt_key == "question" for r in rows):
        prompt += " (in the task prompt, as `tracecal generate --task FILE` gives it)"
    answer = keys(Counter(r.answer_key for r in rows))
    return f"read {len(rows)} rows of {path}: prompt from {prompt}, answer from {answer}, id from {id_from}"


def task_prompts(rows: list[AnswerRow], chat: bool) -> tuple[list[Any], list[Any], list[tuple[str, ...]]]:
    """(prompts, answers, stop strings) per row: a ``question`` row's `Example` becomes the task prompt of its
    kind (``mc`` with ``choices``, else ``qa``: `tracecal.tasks.prompts.render`) with its stop strings, and a text
    answer to a plain-text prompt ending in ``:`` ("Answer:") gets the space a model writes after it; other rows
    as they are (no stop strings)."""
    from tracecal.tasks.prompts import render, stop_strings

    prompts: list[Any] = []
    answers: list[Any] = []
    stops: list[tuple[str, ...]] = []
    for r in rows:
        if r.prompt_key != "question":
            prompts.append(r.prompt)
            answers.append(r.answer)
            stops.append(())
            continue
        kind = "mc" if r.prompt.choices else "qa"
        prompt = render(kind, r.prompt, chat)
        answer = r.answer
        if isinstance(prompt, str) and prompt.endswith(":") and isinstance(answer, str) and answer[:1] not in ("", " "):
            answer = " " + answer
        prompts.append(prompt)
        answers.append(answer)
        stops.append(stop_strings(kind, chat))
    return prompts, answers, stops


def _trace_rows(lm: Any, rows: list[AnswerRow], options: dict[str, Any]) -> list[Any]:
    """The traces of the rows, in order, one ``trace_answers`` call per set of stop strings (under a progress
    bar); ``options``: what the calibrator needs recorded (`Scorer.backend_options`: e.g. ``hidden_layers``)."""
    prompts, answers, stops = task_prompts(rows, bool(getattr(lm, "chat", False)))
    traces: list[Any] = [None] * len(rows)
    with progress_bar() as pb:
        job = pb.add_task("scoring answers", total=len(rows))
        for group in dict.fromkeys(stops):
            idx = [i for i, s in enumerate(stops) if s == group]
            kw = {"stop_strings": list(group)} if group else {}
            got = lm.trace_answers(
                [prompts[i] for i in idx],
                [answers[i] for i in idx],
                ids=[rows[i].id for i in idx],
                progress=lambda n: pb.advance(job, n),
                **kw,
                **options,
            )
            for i, t in zip(idx, got, strict=True):
                traces[i] = t
    return traces


def _short(text: str, width: int = ANSWER_WIDTH) -> str:
    """``text`` on one line (a line break shown as ⏎), cut to ``width`` characters with "…"."""
    one = text.replace("\r\n", "⏎").replace("\n", "⏎")
    return one if len(one) <= width else one[: width - 1] + "…"


def scores_table(title: str, traces: list[Any], conf: Any, prob: Any, show: int) -> Table:
    """The first ``show`` answers: id, answer (escaped, cut to `ANSWER_WIDTH`), c_TRACE and, with a calibrator,
    p_correct (`MISSING` for an empty answer's NaN)."""
    table = Table(title=title)
    table.add_column("id", overflow="fold")
    table.add_column("answer", no_wrap=True)
    table.add_column("c_TRACE", justify="right")
    if prob is not None:
        table.add_column("p_correct", justify="right")
    for i, t in enumerate(traces[:show]):
        cells = [shown(t.id), shown(_short(t.text)), fmt_num(conf[i], 4)]
        table.add_row(*cells, *([fmt_num(prob[i], 4)] if prob is not None else []))
    return table


def _summary(n: int, n_bad: int, conf: Any, prob: Any, out: Path) -> None:
    """One line on stderr: answers scored, malformed rows skipped, mean confidence(s), the file written."""

    def mean(x: Any) -> str:
        finite = np.asarray(x, dtype=float)
        finite = finite[np.isfinite(finite)]
        return fmt_num(float(finite.mean()) if finite.size else None, 3)

    skipped = f"; {n_bad} malformed rows skipped" if n_bad else ""
    means = f"mean c_TRACE {mean(conf)}" + (f", mean p_correct {mean(prob)}" if prob is not None else "")
    console.print(f"scored {n} answers{skipped}; {means}; wrote [bold]{shown(out)}[/]", highlight=False)
