"""Self-contained HTML reports of a scored run directory (`tracecal report RUN_DIR`).

One HTML file with no external scripts, styles or fonts (a Content-Security-Policy forbids loading any):

* the verdict, when one is given (``verdict``: which confidence to use, `tracecal.report.html.verdict_section`);
* one figure of which estimator wins where: AUROC per estimator and task with intervals
  (`tracecal.report.overview`);
* the results tables (sortable): per task the examples, base rate and whether it is ranked; per task × estimator
  every metric;
* a reliability diagram per estimator and task (bin accuracy vs confidence, bin counts, ECE): the estimators that
  matter first, every estimator's behind a collapsed block (`tracecal.report.sections`);
* statistics: paired bootstrap comparisons with the best baseline, selective answering (the smallest certified
  error rate per estimator, `tracecal.report.selective`, and the held-out check at the run's α) and, when
  ``tracecal learning-curve`` wrote them, learning curves (`tracecal.report.stats`);
* risk–coverage curves of the selected estimators, one chart per task;
* confidence histograms split by correct / incorrect;
* "where answers go wrong": where in the answer the riskiest span falls, correct vs wrong answers
  (`tracecal.report.localisation`);
* an example browser (20 answers a page, filter by task / correctness / text, sort by confidence):
  question, gold answers, model answer with its risky spans (``tracecal.risk_spans``) highlighted and their risk
  and operator on hover, correctness, and the answer's tokens coloured by surprisal or entropy with the TRACE
  peak window (the w = 4 tokens of highest mean entropy) marked.

A task too small to rank or calibrate (fewer than 50 correct or wrong answers, `tracecal.report.informative`) is
shown apart: its figures and tables collapsed with the reason, in no average and with no "best" mark.

Figures are SVG documents drawn from the same numbers the metrics use (`tracecal.report.plotdata`) by one
code, `tracecal.report.svg`: the page inlines them and ``figures_dir`` writes the very same documents to
``<kind>_<task>.svg`` files for papers (why SVG and not matplotlib: see that module). The run directory is
read and the report written through `tracecal.evaluation.runstore.RunStore`.

Usage::

    from tracecal.report import write_report
    write_report("runs/main")                        # -> runs/main/report.html
    write_report("runs/main", figures_dir="figs", estimators="trace,trace_plus,p_true")
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from tracecal._outputs import InputPaths, atomic_write, check_output
from tracecal.backends.registry import REGISTRY
from tracecal.errors import ValidationError
from tracecal.evaluation.runstore import RunStore
from tracecal.report.data import (
    RunData,
    default_curve_estimators,
    load_run,
    open_run,
    peak_windows,
    read_results,
    select_estimators,
)
from tracecal.report.frontier import frontier_section, run_frontier
from tracecal.report.html import e, examples_section, json_for_script, page, results_tables, verdict_section
from tracecal.report.informative import uninformative
from tracecal.report.localisation import OPERATOR_NAMES, example_spans, localisation_section, task_span_table
from tracecal.report.plotdata import task_plots
from tracecal.report.sections import figure_sections, overview_section
from tracecal.report.selective import certified_summary
from tracecal.report.stats import statistics_section
from tracecal.report.svg import export_figures
from tracecal.signals.operators import TraceConfig

__all__ = ["write_report", "build_html", "example_payload", "peak_windows", "load_run", "RunData"]

PAGE_SIZE = 20  # answers a page of the example browser (its pager shows the rest)
MAX_GOLDS = 8
REPORT_FILE = "report.html"  # the default report, an artefact of the run (written by the store)
RUN_FILES = ("*.json", "*.parquet", "*/*/*.parquet", "results.*")  # what --out / --figures never write over


def _golds(s: Any) -> list[str]:
    if isinstance(s, list):
        return [str(g) for g in s]
    try:
        v = json.loads(s) if isinstance(s, str) else s
    except (TypeError, ValueError):
        return [str(s)]
    return [str(g) for g in v] if isinstance(v, list) else [str(v)]


def _centi(x: np.ndarray) -> list[int]:
    """Values in nats as integer hundredths (compact JSON); non-finite → 0 / large."""
    return np.rint(np.nan_to_num(x, nan=0.0, posinf=9999.0, neginf=0.0) * 100).astype(np.int64).tolist()


def _task_examples(
    run: RunData,
    k: int,
    task: str,
    estimators: list[str],
    max_examples: int | None,
    w: int,
    table: dict[str, np.ndarray] | None,
) -> tuple[list[list[Any]], np.ndarray, np.ndarray]:
    """The example rows of task number ``k`` (see `example_payload`) and its answers' surprisal and entropy;
    ``table``: the task's risky spans (`tracecal.report.localisation.task_span_table`, computed when None)."""
    rows, idx, tt = run.rows, run.task_rows.get(task, np.zeros(0, np.int64)), run.tokens.get(task)
    if tt is None or idx.size == 0:
        return [], np.zeros(0), np.zeros(0)
    take = idx.size if max_examples is None else min(idx.size, max(0, int(max_examples)))
    off = tt.offsets
    end = int(off[take])
    ws, wl = peak_windows(tt.entropy[:end], off[: take + 1], w)
    s_c, h_c = _centi(tt.surprisal[:end]), _centi(tt.entropy[:end])
    probs = [run.prob[x][idx[:take]] for x in estimators]
    probs_l = [[round(float(v), 4) if math.isfinite(v) else None for v in p.tolist()] for p in probs]
    ws_l, wl_l, off_l, present = ws.tolist(), wl.tolist(), off.tolist(), tt.present.tolist()
    spans = example_spans(tt, task_span_table(tt) if table is None else table, take)
    ex: list[list[Any]] = []
    for j in range(take):
        i = int(idx[j])
        a, b = off_l[j], off_l[j + 1]
        golds = _golds(rows["golds"][i])
        answer, text = str(rows["answer"][i] or ""), tt.texts[j] if j < len(tt.texts) else ""
        ex.append(
            [
                k,
                str(rows["id"][i]),
                str(rows["question"][i] or ""),
                golds[:MAX_GOLDS],
                len(golds),
                answer,
                int(run.correct[i]),
                str(rows["stop_reason"][i] or ""),
                str(run.split[i] or ""),
                tt.strings[a:b] if present[j] else None,
                s_c[a:b],
                h_c[a:b],
                ws_l[j],
                wl_l[j],
                [p[j] for p in probs_l],
                spans[j],
                None if text == answer else text,
            ]
        )
    return ex, tt.surprisal[:end], tt.entropy[:end]


def _scale(parts: list[np.ndarray]) -> float:
    """The colour scale of a value (nats): its 99th percentile over the shown answers, at least 1, one decimal."""
    v = np.concatenate(parts) if parts else np.zeros(0)
    v = v[np.isfinite(v)]
    return round(max(1.0, float(np.percentile(v, 99))) if v.size else 1.0, 1)


def example_payload(
    run: RunData,
    estimators: list[str],
    max_examples: int | None = None,
    window: int | None = None,
    span_tables: dict[str, dict[str, np.ndarray]] | None = None,
) -> dict[str, Any]:
    """The example browser's data: one compact array per answer (see ``F`` in the page's JavaScript).

    Each answer is ``[task index, id, question, golds (≤ 8), number of golds, answer, correct, stop reason,
    seed-0 split, token strings (None without a trace), surprisal×100, entropy×100, peak window start,
    peak window length, [calibrated probability per estimator (None if unavailable)], risky spans, the text the
    spans index (None: the answer)]``; each span ``[char_start, char_end, risk×100, operator index into ``ops``,
    token_start, token_end]`` (`tracecal.report.localisation.example_spans`). ``max_examples`` caps the answers
    per task (the first ones in run order); ``span_tables``: each task's `task_span_table` (computed when absent).
    """
    w = TraceConfig().window if window is None else window
    ex: list[list[Any]] = []
    all_s: list[np.ndarray] = []
    all_h: list[np.ndarray] = []
    for k, task in enumerate(run.tasks):
        table = (span_tables or {}).get(task)
        rows, s, h = _task_examples(run, k, task, estimators, max_examples, w, table)
        ex += rows
        all_s.append(s)
        all_h.append(h)
    return {
        "tasks": run.tasks,
        "est": estimators,
        "w": w,
        "page_size": PAGE_SIZE,
        "scale": {"s": _scale(all_s), "h": _scale(all_h)},
        "ops": OPERATOR_NAMES,
        "ex": ex,
    }


def _meta_lines(run: RunData, shown: list[str]) -> list[str]:
    cfg = run.results.get("config") or {}
    tinfo = run.results.get("tasks") or {}
    tasks = ", ".join(f"{t} ({tinfo.get(t, {}).get('n', '?')})" for t in run.tasks)
    backend = REGISTRY.get(str(cfg.get("backend")))  # a backend that decides its weights names them (llama.cpp)
    weights = backend.weights if backend and backend.weights else f"{e(cfg.get('dtype') or 'auto')} weights"
    lines = [
        f"Run <code>{e(run.path.resolve())}</code> · model {e(cfg.get('model') or 'default')} "
        f"({weights}) · "
        f"{run.n:,} answers: {e(tasks)}",
        f"{len(shown)} estimators · {e(cfg.get('n_seeds', '?'))} seeds · calibration share "
        f"{e(cfg.get('cal_frac', '?'))} · calibrator {e(cfg.get('calibrator', '?'))} · "
        f"{e(cfg.get('n_bins', '?'))} ECE bins · written {e(time.strftime('%Y-%m-%d %H:%M'))}",
    ]
    subs = run.results.get("substitutes") or []
    if subs:
        lines.append("Substitutes: " + e("; ".join(map(str, subs))))
    if not_run := _not_run_line(tinfo):
        lines.append(e(not_run))
    return lines


def _not_run_line(tinfo: dict[str, Any]) -> str | None:
    """``Not run: ESTIMATORS on TASKS (why); …`` grouped by reason (``not_run_reasons``: a pass the run's backend
    cannot compute; else its pass is incomplete), or None when every estimator ran."""
    by_why: dict[str, tuple[dict[str, None], dict[str, None]]] = {}
    for t, d in tinfo.items():
        for x in d.get("not_run") or []:
            why = (d.get("not_run_reasons") or {}).get(x) or "their pass is incomplete"
            ests, tasks = by_why.setdefault(why, ({}, {}))
            ests[x] = tasks[t] = None
    parts = [f"{', '.join(ests)} on {', '.join(tasks)} ({why})" for why, (ests, tasks) in by_why.items()]
    return "Not run: " + "; ".join(parts) if parts else None


def _results_section(run: RunData, estimators: list[str]) -> str:
    timings = run.results.get("timings") or {}
    timing_rows = "".join(
        f'<tr><td class="l">{e(k)}</td><td data-v="{float(v)!r}">{float(v):.1f}</td></tr>'
        for k, v in timings.items()
        if isinstance(v, int | float)
    )
    timing_table = (
        '<details><summary>Timings (seconds per stage)</summary><table class="sortable" id="timings-table">'
        '<thead><tr><th class="l" data-type="str">stage</th><th data-type="num">seconds</th></tr></thead>'
        f"<tbody>{timing_rows}</tbody></table></details>"
    )
    return (
        '<section id="results"><h2>Results</h2>'
        + results_tables(run.results, run.tasks, estimators)
        + (timing_table if timing_rows else "")
        + "</section>"
    )


def build_html(
    run: RunData,
    estimators: list[str],
    curve_estimators: list[str],
    figures_dir: str | os.PathLike[str] | None = None,
    max_examples: int | None = None,
    learning: dict[str, Any] | None = None,
    inputs: InputPaths = (),
    verdict: dict[str, Any] | None = None,
    frontier: dict[str, Any] | None = None,
) -> str:
    """Render the report of a loaded run (its figures also written to ``figures_dir`` as SVG files when given,
    never over one of ``inputs``); ``learning``: the run's learning curves (`tracecal.analysis.learning_curve`),
    shown when given; ``verdict``: the section the page opens with (`tracecal.report.html.verdict_section`);
    ``frontier``: the run's cost–quality frontier (`tracecal.analysis.frontier`), a section when given."""
    n_bins = int((run.results.get("config") or {}).get("n_bins") or 10)
    plots = [task_plots(run, t, estimators, curve_estimators, n_bins) for t in run.tasks]
    if figures_dir is not None:
        export_figures(plots, figures_dir, inputs)
    skip = uninformative(run.results, run.tasks)
    tables = {t: task_span_table(tt) for t, tt in run.tokens.items() if t in run.tasks}
    payload = example_payload(run, curve_estimators, max_examples, span_tables=tables)
    ex_sec = examples_section(
        run.tasks, len(payload["ex"]), run.n, curve_estimators[0] if curve_estimators else None, payload["w"]
    )
    title = f"tracecal report — {run.path.resolve().name}"
    certified = certified_summary(run, estimators)
    stats_sec = statistics_section(run.results, run.tasks, estimators, learning, certified)
    sections = [
        verdict_section(verdict),
        overview_section(run.results, run.tasks, estimators, skip, figures_dir, inputs),
        _results_section(run, estimators),
        stats_sec,
        *figure_sections(plots, run.results, estimators, curve_estimators, skip),
        localisation_section(run, tables, figures_dir, inputs),
        frontier_section(frontier),
        ex_sec,
    ]
    return page(title, _meta_lines(run, estimators), sections, json_for_script(payload))


def write_report(
    run_dir: str | os.PathLike[str] | RunStore,
    out: str | os.PathLike[str] | None = None,
    figures_dir: str | os.PathLike[str] | None = None,
    estimators: str | list[str] | None = None,
    max_examples: int | None = None,
    verdict: dict[str, Any] | None = None,
) -> Path:
    """Write the self-contained HTML report of a scored run directory and return its path.

    Args:
        run_dir: a run directory scored by `tracecal.evaluation.run.evaluate` (or its `RunStore`).
        out: the HTML file to write (default: the run's ``report.html``, written by its store); never one of the
            run's own files (`RUN_FILES`: `ValidationError`), written by `tracecal._outputs.atomic_write`.
        figures_dir: if given, every figure is also written there as ``<kind>_<task>.svg`` (the same way).
        estimators: estimators to show (comma-separated names or groups such as ``trace-only``, or a list;
            default: all of the run's, with the risk–coverage charts limited to TRACE, TRACE+ and the six
            others of highest mean AUROC).
        max_examples: at most this many answers per task in the example browser (default: all).
        verdict: what to use, in plain words, shown first (`tracecal.report.html.verdict_section`; default: the
            run's own, `tracecal.report.verdict.verdict_of`).

    Raises:
        tracecal.evaluation.runstore.NotARunError: ``run_dir`` is not a scored run directory (a `FileNotFoundError`).
        tracecal.evaluation.runstore.RunStoreError: ``run_dir`` is a file, or what it stores is damaged
            (a `ValueError`).
        ValueError: an estimator is not in the run.
    """
    store = open_run(run_dir)
    inputs = [("file of the run", store.path, pattern) for pattern in RUN_FILES]
    if out is not None:
        check_output(out, inputs, "--out")  # before anything is read
    if figures_dir is not None and os.path.exists(figures_dir) and not os.path.isdir(figures_dir):
        raise ValidationError(f"--figures {figures_dir} is not a folder: give a folder for the SVG figures")
    shown = select_estimators(list(read_results(store).get("estimators") or {}), estimators)
    run = load_run(store, shown)
    curves = shown if estimators is not None else default_curve_estimators(run, shown)
    learning = store.read_artefact("learning_curve")
    frontier = store.read_artefact("frontier")
    has_reference = "trace_plus" in (read_results(store).get("estimators") or {})
    if frontier is None and has_reference and any(store.shard_files("samples", t) for t in run.tasks):
        frontier = run_frontier(store)  # a run with a samples pass: its frontier (written into the run) is shown
    if verdict is None:
        from tracecal.report.verdict import verdict_of

        verdict = verdict_of(run, str(store.path)).to_json()
    html_text = build_html(run, shown, curves, figures_dir, max_examples, learning, inputs, verdict, frontier)
    if out is None or Path(out).resolve() == store.artefact_path(REPORT_FILE).resolve():
        return store.write_text(REPORT_FILE, html_text)
    atomic_write(out, lambda tmp: Path(tmp).write_text(html_text, encoding="utf-8"), inputs, "--out")
    return Path(out)
