"""Keep a long evaluation run across machines: copy its run directory into the repository without the questions.

Evidence runs (issue 19) take longer than one session, and a session may start on a fresh machine. This script
copies a run directory (config, timings, results, every trace and pass shard) into ``docs/runs/<run>/`` with the
prompt text and prompt token ids of every trace blanked, so no question of the shared data is copied into the
repository (the passes rebuild their prompts from the task data, scoring never reads them), and copies it back
onto a fresh machine to resume the run there:

    python scripts/evidence_snapshot.py save /root/tracecal-runs/qwen1000 docs/runs/qwen1000
    python scripts/evidence_snapshot.py restore docs/runs/qwen1000 /root/tracecal-runs/qwen1000

    python scripts/evidence_snapshot.py save RUN OUT --only hidden,results.json   # only these (relative paths)

``rows.parquet`` and ``report.html`` (questions and golds) are never copied. ``save`` rewrites only shards that
changed (same name and size of the stripped file are kept); ``restore`` copies only what the run
directory lacks. Lock folders are never copied.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

BLANKED = {"prompt": pa.string(), "prompt_ids": pa.list_(pa.int64())}


def stripped(table: pa.Table) -> pa.Table:
    """The table with ``prompt`` = "" and ``prompt_ids`` = [] in every row (other columns and metadata kept)."""
    for name, typ in BLANKED.items():
        if name in table.column_names:
            empty = [] if pa.types.is_list(typ) else ""
            col = pa.array([empty] * table.num_rows, type=table.schema.field(name).type)
            table = table.set_column(table.column_names.index(name), name, col)
    return table


# the scored rows hold each question and its golds (shared data), and so does the report's example table; scoring
# rebuilds the one, `tracecal report RUN` the other
NEVER_COPIED = {"rows.parquet", "report.html"}


def _files(root: Path, only: set[str] | None = None) -> list[Path]:
    """The files under ``root`` a snapshot holds; ``only``: those at or under these relative paths."""
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and ".locks" not in p.relative_to(root).parts
        and p.name not in NEVER_COPIED
        and (only is None or any(_under(p.relative_to(root), o) for o in only))
    )


def _under(rel: Path, prefix: str) -> bool:
    return rel.parts[: len(Path(prefix).parts)] == Path(prefix).parts


def save(run: Path, out: Path, only: set[str] | None = None) -> int:
    n = 0
    for src in _files(run, only):
        dst = out / src.relative_to(run)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.suffix == ".parquet":
            if dst.exists() and dst.stat().st_mtime >= src.stat().st_mtime:
                continue
            table = pq.read_table(src)
            pq.write_table(stripped(table), dst)
        elif src.name.endswith(".tmp") or ".tmp" in src.name:
            continue
        else:
            shutil.copy2(src, dst)
        n += 1
    return n


def restore(snapshot: Path, run: Path) -> int:
    n = 0
    for src in _files(snapshot):
        dst = run / src.relative_to(snapshot)
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
            n += 1
    return n


def main(argv: list[str]) -> int:
    only = None
    if len(argv) == 5 and argv[0] == "save" and argv[3] == "--only":
        only, argv = set(argv[4].split(",")), argv[:3]
    if len(argv) != 3 or argv[0] not in ("save", "restore"):
        usage = "usage: evidence_snapshot.py save RUN OUT [--only A,B] | restore OUT RUN"
        print(__doc__.strip().splitlines()[0], "\n" + usage)
        return 2
    src, dst = Path(argv[1]), Path(argv[2])
    if not src.is_dir():
        print(f"error: {src} is not a folder")
        return 2
    n = save(src, dst, only) if argv[0] == "save" else restore(src, dst)
    print(f"{argv[0]}: {n} files → {dst}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
