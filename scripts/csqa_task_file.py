"""A user's task file for issue #39's transfer check: CommonsenseQA's dev questions as a short-answer task file.

    python scripts/csqa_task_file.py OUT.jsonl [--data-dir ../shared/data] [--limit 1000]

Each row is what a user would write for `tracecal evaluate --tasks OUT.jsonl` (docs/formats.md, task files): the
question stem followed by its five options ("... Options: bank, library, department store, mall, new york."), and
the correct option's text as the gold ``answer`` (correct when it occurs in the model's answer as whole words after
normalisation, the file tasks' rule). None of the built-in tasks is multiple-choice commonsense, so a probe fitted
on TriviaQA meets a new question type, answer form and labelling rule here. The file is written where OUT says
(outside the repository: the data is never copied into it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def rows(source: Path, limit: int) -> list[dict[str, str]]:
    """The first ``limit`` questions of CommonsenseQA's ``dev_rand_split.jsonl`` as task-file rows."""
    out = []
    for line in source.read_text(encoding="utf-8").splitlines()[:limit]:
        doc = json.loads(line)
        q = doc["question"]
        options = [c["text"] for c in q["choices"]]
        gold = next(c["text"] for c in q["choices"] if c["label"] == doc["answerKey"])
        question = f"{q['stem']} Options: {', '.join(options)}."
        out.append({"id": f"csqa-{doc['id']}", "question": question, "answer": gold})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--limit", type=int, default=1000)
    a = ap.parse_args()
    got = rows(Path(a.data_dir) / "commonsenseqa" / "dev_rand_split.jsonl", a.limit)
    Path(a.out).write_text("".join(json.dumps(r) + "\n" for r in got), encoding="utf-8")
    print(f"{len(got)} rows → {a.out}")


if __name__ == "__main__":
    main()
