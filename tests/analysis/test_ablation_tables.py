"""The ablation tables as Markdown: one table per group present, means and per-task AUROC, the ranked-task note."""

from __future__ import annotations

from tracecal.analysis.ablation_tables import GROUP_TITLES, ablation_markdown


def _doc() -> dict:
    row = {"auroc": 0.7, "brier": 0.2, "ece": 0.05}
    return {
        "run": "runs/x",
        "model": "m",
        "dtype": "bfloat16",
        "tasks": ["a", "b"],
        "n": {"a": 300, "b": 200},
        "n_correct": {"a": 100, "b": 4},
        "n_seeds": 5,
        "cal_frac": 0.35,
        "not_ranked": {"b": "4 correct answers of 200 (fewer than 50): too few to rank or calibrate"},
        "paper": {},
        "variants": {"trace": {"group": "ladder", "kind": "score", "tasks": {"a": row, "b": None}, "mean": row}},
    }


def test_each_group_present_gets_its_table_and_the_unranked_task_is_named() -> None:
    md = ablation_markdown(_doc())
    assert md.startswith("# TRACE ablations — m (bfloat16)")
    assert f"## {GROUP_TITLES['ladder']}" in md and "| trace | 0.700 |" in md.replace("  ", " ")
    assert "Not ranked (left out of the means): b: 4 correct answers" in md
    assert all(f"## {t}" not in md for g, t in GROUP_TITLES.items() if g != "ladder")
