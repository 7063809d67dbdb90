"""The cross-model evidence views: every number read from the documents given, gaps shown as "—"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tracecal_papers.evidence import ABLATION_ROWS, ablation_markdown, headline_markdown


def _cell(auroc: float, brier: float) -> dict[str, Any]:
    return {"auroc": {"mean": auroc}, "brier": {"mean": brier}}


def _results() -> dict[str, Any]:
    metrics = {
        "a": {"trace": _cell(0.8, 0.10), "trace_plus": _cell(0.7, 0.12), "min_prob": _cell(0.6, 0.2)},
        "b": {"trace": _cell(0.6, 0.30), "trace_plus": _cell(0.9, 0.05), "mean_prob": _cell(0.7, 0.1)},
    }
    comp = {
        "a": {"baseline": "min_prob", "estimators": {"trace": {"auroc": {"verdict": "better"}}}},
        "b": {"baseline": "mean_prob", "estimators": {"trace": {"auroc": {"verdict": "worse"}}}},
    }
    tasks = {"a": {"n": 500, "n_correct": 100, "accuracy": 0.2}, "b": {"n": 100, "n_correct": 40, "accuracy": 0.4}}
    return {"tasks": tasks, "metrics": metrics, "statistics": {"comparisons": comp}}


def test_headline_reads_each_task_and_averages_over_tasks() -> None:
    md = headline_markdown({"M": _results()}).splitlines()
    row = {line.split(" | ")[0].strip("| "): line for line in md if line.startswith("| ")}
    # the last column averages over the informative tasks only: a (100 correct), not b (40 < 50)
    assert md[2] == "| | a | b | mean | mean, ≥ 50 correct |"
    assert row["accuracy"] == "| accuracy | 0.200 | 0.400 | 0.300 | 0.200 |"
    assert row["TRACE"] == "| TRACE | 0.800 ▲ / 0.100 | 0.600 ▼ / 0.300 | 0.700 / 0.200 | 0.800 / 0.100 |"
    # the best baseline is each task's own (min_prob on a, mean_prob on b), averaged like any row
    assert row["best baseline"] == "| best baseline | 0.600 / 0.200 | 0.700 / 0.100 | 0.650 / 0.150 | 0.600 / 0.200 |"
    # an estimator the run lacks is a gap, and a mean over a gap is a gap (not a mean over fewer tasks)
    assert row["P(True)"] == "| P(True) | — / — | — / — | — / — | — / — |"
    assert "| TRACE | 0.800 ▲ / 0.100 | 0.600 ▼ / 0.300 | 0.700 / 0.200 | 0.700 / 0.200 |" in headline_markdown(
        {"M": _results()}, min_correct=40
    )
    assert "Best baseline per task: a `min_prob`, b `mean_prob`." in md


def _row(group: str, auroc: float, brier: float, ece: float) -> dict[str, Any]:
    """A variant on two tasks: "good" as given, "noise" (3 correct answers) far off, to be left out."""
    good = {"auroc": auroc, "brier": brier, "ece": ece}
    return {"group": group, "tasks": {"good": good, "noise": {"auroc": 0.1, "brier": 0.9, "ece": 0.9}}}


def _ablations(auroc: float, with_sweep: bool = True) -> dict[str, Any]:
    variants: dict[str, Any] = {
        "TRACE raw": _row("ladder", auroc, 0.2, 0.15),
        "D only": _row("operators", auroc - 0.1, 0.2, 0.05),
    }
    if with_sweep:
        for k, a in enumerate((auroc - 0.02, auroc, auroc + 0.01)):
            variants[f"λ={k}"] = _row("sweep", a, 0.2 + k / 100, 0.1)
    paper = {"TRACE raw": {"auroc": 0.772, "brier": None, "ece": 0.163}}
    band = {"auroc": [0.763, 0.775], "brier": [0.152, 0.16]}
    return {"n_correct": {"good": 80, "noise": 3}, "variants": variants, "paper": paper, "paper_sweep_band": band}


def test_ablations_side_by_side_with_the_paper_and_the_sweep_band() -> None:
    md = ablation_markdown({"small": _ablations(0.6), "large": _ablations(0.75, with_sweep=False)}).splitlines()
    assert md[0] == "| variant | small (good) | large (good) | paper (Qwen2.5-7B) |"  # the informative tasks
    assert "| TRACE raw | 0.600 / 0.150 | 0.750 / 0.150 | 0.772 / 0.163 |" in md
    assert "| D only | 0.500 / 0.050 | 0.650 / 0.050 |  |" in md
    band = next(line for line in md if line.startswith("| operator sweep band"))
    assert (
        band
        == "| operator sweep band | AUROC 0.580–0.610, Brier 0.200–0.220 | — | AUROC 0.763–0.775, Brier 0.152–0.160 |"
    )
    # variants no model holds are left out; the row order is the paper's
    assert not any(line.startswith("| TRACE+ |") for line in md)
    assert [r for r in ABLATION_ROWS if any(line.startswith(f"| {r} |") for line in md)] == ["TRACE raw", "D only"]


def test_the_results_tables_script_fills_the_block_from_stored_runs(tmp_path: Path) -> None:
    """scripts/results_tables.py on the committed SmolLM2 run: the block holds its numbers, prose stays."""
    repo = Path(__file__).resolve().parents[2]
    run = repo / "docs" / "runs" / "smollm1000"
    doc = tmp_path / "results.md"
    doc.write_text("# R\n<!-- evidence-tables:start -->\n<!-- evidence-tables:end -->\nkept\n", encoding="utf-8")
    script = str(repo / "scripts" / "results_tables.py")
    r = subprocess.run([sys.executable, script, f"S={run}", "--write", str(doc)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = doc.read_text(encoding="utf-8")
    trace_auroc = json.loads((run / "results.json").read_text())["metrics"]["triviaqa"]["trace"]["auroc"]["mean"]
    assert f"| TRACE | {trace_auroc:.3f}" in text and "### all four" in text and text.endswith("kept\n")
    bad = subprocess.run([sys.executable, script, f"S={tmp_path}"], capture_output=True, text=True)
    assert bad.returncode == 2 and "holds no results.json" in bad.stderr and "Traceback" not in bad.stderr


def _script_rows_missing_from(doc: str, script: str, args: list[str], prefix: str, at_least: int) -> list[str]:
    """The rows starting with ``prefix`` that ``scripts/<script> <args>`` prints and ``docs/<doc>`` lacks (the script
    ran, and printed at least ``at_least`` such rows)."""
    repo = Path(__file__).resolve().parents[2]
    r = subprocess.run(
        [sys.executable, str(repo / "scripts" / script), *args], capture_output=True, text=True, cwd=repo
    )
    assert r.returncode == 0, r.stderr
    text = (repo / "docs" / doc).read_text(encoding="utf-8")
    rows = [line for line in r.stdout.splitlines() if line.startswith(prefix)]
    assert len(rows) >= at_least, r.stdout
    return [row for row in rows if row not in text]


def test_the_localisation_tables_in_the_docs_are_what_the_script_makes() -> None:
    """docs/localisation.md's tables are generated, not typed: scripts/localisation_tables.py on the committed
    SmolLM2 run prints rows that stand verbatim in the document (issue 38)."""
    missing = _script_rows_missing_from(
        "localisation.md", "localisation_tables.py", ["--runs", "smollm1000"], "| smollm1000", 6
    )
    assert not missing, f"rows of the script not in docs/localisation.md (regenerate it): {missing}"


def test_the_hidden_probe_tables_in_the_docs_are_what_the_script_makes() -> None:
    """docs/results.md's probe tables are generated, not typed: scripts/hidden_tables.py on the committed SmolLM2
    hidden run prints rows that stand verbatim in the document (issue 39)."""
    run = str(Path(__file__).resolve().parents[2] / "docs" / "runs" / "hidden-smollm1000")
    missing = _script_rows_missing_from("results.md", "hidden_tables.py", [run], "| hidden-smollm1000", 30)
    assert not missing, f"rows of the script not in docs/results.md (regenerate them): {missing}"


def test_the_qwen_frontier_table_in_the_docs_is_the_committed_runs() -> None:
    """docs/results.md's Qwen frontier table is `tracecal frontier`'s own table of the committed run (issue 39)."""
    repo = Path(__file__).resolve().parents[2]
    made = (repo / "docs" / "runs" / "frontier-qwen-lc-triviaqa" / "frontier.md").read_text(encoding="utf-8")
    rows = [line for line in made.splitlines() if line.startswith("| ") and "|--" not in line]
    assert len(rows) >= 17, made  # header, 4 single-pass rows, 12 sampling rows (K = 2, 5, 10)
    doc = (repo / "docs" / "results.md").read_text(encoding="utf-8")
    missing = [row for row in rows if row not in doc]
    assert not missing, f"rows of frontier.md not in docs/results.md (paste the new table): {missing}"


def _pass_run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    repo = Path(__file__).resolve().parents[2]
    script = [str(repo / "scripts" / "pass_run.sh"), *args]
    return subprocess.run(
        ["bash", *script], capture_output=True, text=True, timeout=300, env=os.environ | {"PY": sys.executable} | env
    )


def test_pass_run_refuses_an_unknown_pass_and_merges_only_a_complete_scored_pass(tmp_path: Path) -> None:
    """scripts/pass_run.sh (issue 39's added passes): a pass it does not know is refused; ``merge`` copies the run
    back into the committed folder only once the pass is stored for every shard of every task."""
    from tracecal.evaluation.runstore import RunStore
    from tracecal.testing import add_synthetic_passes, write_synthetic_run

    r = _pass_run("beams", "smollm1000")
    assert r.returncode == 2 and "unknown pass 'beams'" in r.stdout
    run = write_synthetic_run(tmp_path / "run", tasks=("triviaqa",), n_per_task=8, shard_size=4, n_seeds=2)
    seed = tmp_path / "seed"
    seed.mkdir()
    shutil.copy(run / "config.json", seed / "config.json")
    where = {"RUN": str(run), "SEED": str(seed)}
    r = _pass_run("semantic", "x", "merge", **where)
    assert r.returncode == 1 and "semantic pass of triviaqa is incomplete" in r.stderr
    assert [p.name for p in seed.iterdir()] == ["config.json"]  # nothing merged
    add_synthetic_passes(RunStore(run), ["triviaqa"], shard_size=4)
    r = _pass_run("semantic", "x", "merge", **where)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (seed / "semantic" / "triviaqa").iterdir()) == ["00000.parquet", "00001.parquet"]
