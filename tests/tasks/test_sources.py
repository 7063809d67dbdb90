"""`tracecal.tasks.sources`: where the evaluation data is found (env var, repository, never ancestors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tasks.helpers import jsonl_text, needs_data, write_file
from tracecal import tasks
from tracecal.tasks import (
    data_dir,
    get_task,
)
from tracecal.tasks import sources as tasks_sources


def test_data_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_dir = tmp_path / "envdata"
    env_dir.mkdir()
    monkeypatch.setenv("TRACECAL_DATA", str(env_dir))
    assert data_dir() == env_dir.resolve()
    assert data_dir(tmp_path) == tmp_path.resolve()  # an explicit override wins
    with pytest.raises(FileNotFoundError, match="given explicitly"):
        data_dir(tmp_path / "nope")
    monkeypatch.setenv("TRACECAL_DATA", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="TRACECAL_DATA"):
        data_dir()
    # ../shared/data relative to the working directory
    monkeypatch.delenv("TRACECAL_DATA")
    fake_source = tmp_path / "checkout" / "src" / "tracecal" / "tasks" / "sources.py"
    monkeypatch.setattr(tasks_sources, "__file__", str(fake_source))
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")
    assert data_dir() == (tmp_path / "shared" / "data").resolve()
    # ../shared/data relative to the source checkout (<repo>/src/tracecal/tasks/sources.py)
    monkeypatch.chdir(env_dir)
    (tmp_path / "shared" / "data").rename(tmp_path / "moved")
    nested = tmp_path / "outer" / "checkout" / "src" / "tracecal" / "tasks" / "sources.py"
    (tmp_path / "outer" / "shared" / "data").mkdir(parents=True)
    monkeypatch.setattr(tasks_sources, "__file__", str(nested))
    assert data_dir() == (tmp_path / "outer" / "shared" / "data").resolve()
    # nothing in the fixed places: the error names every place tried
    monkeypatch.setattr(tasks_sources, "__file__", str(fake_source))
    with pytest.raises(FileNotFoundError) as err:
        data_dir()
    msg = str(err.value)
    assert "TRACECAL_DATA" in msg and "--data-dir" in msg
    assert str(env_dir / ".." / "shared" / "data") in msg and str(tmp_path / "shared" / "data") in msg


def test_data_dir_never_walks_up_ancestors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a shared/data two or more levels above the working directory or the checkout is not used
    monkeypatch.delenv("TRACECAL_DATA", raising=False)
    (tmp_path / "shared" / "data").mkdir(parents=True)
    deep = tmp_path / "a" / "b" / "repo"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    monkeypatch.setattr(tasks_sources, "__file__", str(deep / "src" / "tracecal" / "tasks" / "sources.py"))
    found = [p.resolve() for p in tasks.data_dir_candidates()]
    assert found == [(tmp_path / "a" / "b" / "shared" / "data").resolve()] * 2
    with pytest.raises(FileNotFoundError, match="none of these exist"):
        data_dir()
    # an installed package (not under src/) adds no candidate of its own
    monkeypatch.setattr(tasks_sources, "__file__", str(tmp_path / "site-packages" / "tracecal" / "tasks" / "x.py"))
    assert [p.resolve() for p in tasks.data_dir_candidates()] == [(tmp_path / "a" / "b" / "shared" / "data").resolve()]


@needs_data
def test_data_dir_env_var_is_used_by_loaders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_file(
        tmp_path / "triviaqa" / "triviaqa_sm_sub.jsonl",
        jsonl_text({"context": "Question: 2+2?\nAnswer:", "answer": "4", "aliases": ["four"]}),
    )
    monkeypatch.setenv("TRACECAL_DATA", str(tmp_path))
    ex = get_task("triviaqa").load()
    assert len(ex) == 1 and ex[0].question == "2+2?" and ex[0].golds == ["4", "four"]
    with pytest.raises(FileNotFoundError, match="svamp"):
        get_task("svamp").load()


def test_a_folder_given_as_a_task_file_is_named_as_a_folder(tmp_path: Path) -> None:
    from tracecal.tasks.example import TaskFileNotFoundError
    from tracecal.tasks.sources import FileSource

    (tmp_path / "d.jsonl").mkdir()
    with pytest.raises(TaskFileNotFoundError, match=r"d.jsonl is a folder: give the path of a file"):
        FileSource(str(tmp_path / "d.jsonl"), relative=False).resolve()


def test_every_row_reader_drops_a_byte_order_mark(tmp_path: Path) -> None:
    """Excel saves CSV as UTF-8 with a BOM: the first column must still be named ``id``, not ``\\ufeffid``."""
    from tracecal.tasks.sources import iter_csv, iter_json_list, iter_jsonl

    bom = "\ufeff"
    csv_rows = list(iter_csv(write_file(tmp_path / "a.csv", bom + "id,question\r\nq1,Hi?\r\n")))
    assert [r.record for r in csv_rows] == [{"id": "q1", "question": "Hi?"}]
    assert [r.record for r in iter_jsonl(write_file(tmp_path / "a.jsonl", bom + '{"id": 1}\n'))] == [{"id": 1}]
    assert [r.record for r in iter_json_list(write_file(tmp_path / "a.json", bom + '[{"id": 2}]'))] == [{"id": 2}]
