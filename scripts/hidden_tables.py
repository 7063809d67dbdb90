"""The hidden-state probe tables of docs/results.md (issue #39 item 3), from committed snapshots of hidden runs.

    python scripts/hidden_tables.py docs/runs/hidden-smollm1000 [docs/runs/hidden-lc-qwen3k ...]

Per run (a snapshot `scripts/pass_run.sh hidden NAME save` wrote: its scored ``results.json``, ``learning_curve.json``
from ``tracecal learning-curve RUN --focus hidden_probe,hidden_probe_trace_plus`` and ``hidden_transfer.md`` from
``scripts/hidden_transfer.py RUN``), Markdown on stdout:

1. the protocol (35 % calibration split, 20 splits): AUROC mean ± split sd per ranked task of TRACE, TRACE+,
   ``trace_plus_cv``, the best other statistic of the run and the two probes;
2. the learning curves: AUROC mean [95 % bootstrap interval] per calibration-set size; a probe's cell is marked ▲ / ▼
   where its paired interval against TRACE lies above / below 0;
3. the transfer table as the script wrote it.

Every row starts with ``| <run name> |`` so a test can find the rows in the document.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SHOWN = ["trace", "trace_plus", "trace_plus_cv", "hidden_probe", "hidden_probe_trace_plus"]
PROBES = ("hidden_probe", "hidden_probe_trace_plus")
MARK = {"better": " ▲", "worse": " ▼"}


def protocol(name: str, res: dict[str, Any]) -> list[str]:
    tasks = [t for t, v in res["tasks"].items() if v.get("informative")]
    leader = {t: _best_other(res["metrics"][t]) for t in tasks}
    named = [f"{t} ({res['tasks'][t]['n_correct']}/{res['tasks'][t]['n']} right)" for t in tasks]
    head = f"| run | estimator | {' | '.join(named)} |"
    out = [head, "|---|---|" + "--:|" * len(tasks)]
    for est in SHOWN:
        cells = [_mean_sd(res["metrics"][t].get(est, {}).get("auroc")) for t in tasks]
        out.append(f"| {name} | `{est}` | " + " | ".join(cells) + " |")
    best = [f"{_mean_sd(res['metrics'][t][leader[t]]['auroc'])} (`{leader[t]}`)" if leader[t] else "—" for t in tasks]
    out.append(f"| {name} | best other estimator | " + " | ".join(best) + " |")
    return out


def _ours(estimator: str) -> bool:
    """TRACE, its fitted variants and the probes (the rest are the baselines)."""
    return estimator.startswith("trace") or estimator in PROBES


def _best_other(metrics: dict[str, Any]) -> str | None:
    """The baseline (not `_ours`: statistics, beams, P(True) ...) of highest mean AUROC."""
    others = {e: m["auroc"]["mean"] for e, m in metrics.items() if not _ours(e) and m.get("auroc", {}).get("mean")}
    return max(others, key=lambda e: others[e]) if others else None


def _mean_sd(m: dict[str, Any] | None) -> str:
    return "—" if not m or m.get("mean") is None else f"{m['mean']:.3f} ± {m['sd']:.3f}"


def curves(name: str, lc: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for task, doc in lc["tasks"].items():
        sizes = doc["sizes"]
        out += ["", f"{task}: {doc['n']} answers, {doc['n_correct']} right; AUROC by calibration-set size", ""]
        out += [f"| run | estimator | {' | '.join(str(s) for s in sizes)} |", "|---|---|" + "--:|" * len(sizes)]
        for est, points in doc["estimators"].items():
            cells = [_point(p, est) for p in points]
            out.append(f"| {name} | `{est}` | " + " | ".join(cells) + " |")
    return out


def _point(p: dict[str, Any], est: str) -> str:
    a = p["auroc"]
    mark = MARK.get(p.get("vs", {}).get("trace", {}).get("auroc", {}).get("verdict", ""), "") if est in PROBES else ""
    return f"{a['mean']:.3f} [{a['lo']:.3f}, {a['hi']:.3f}]{mark}"


def transfer(name: str, md: str) -> list[str]:
    def row(line: str) -> str:
        if line.startswith("| fit"):
            return "| run " + line
        return ("|---" if line.startswith("|---") else f"| {name} ") + line if line.startswith("|") else line

    return [row(line) for line in md.strip().splitlines()]


def tables(run: Path) -> str:
    name = run.name
    res = json.loads((run / "results.json").read_text(encoding="utf-8"))
    model = res["config"].get("model") or "smollm2-135m-instruct"
    out = [f"### {name}: {model}", "", "The protocol (AUROC, mean ± sd over 20 splits):", "", *protocol(name, res)]
    if (run / "learning_curve.json").is_file():
        out += ["", "Learning curves (▲ / ▼: the probe's paired 95 % interval against TRACE above / below 0):"]
        out += curves(name, json.loads((run / "learning_curve.json").read_text(encoding="utf-8")))
    if (run / "hidden_transfer.md").is_file():
        out += ["", "Transfer (AUROC; rows: fitted on all of a task's answers, columns: evaluated on):", ""]
        out += transfer(name, (run / "hidden_transfer.md").read_text(encoding="utf-8"))
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[0] + "\nusage: hidden_tables.py RUN [RUN ...]")
        return 2
    print("\n\n".join(tables(Path(a)) for a in argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
