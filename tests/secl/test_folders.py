"""Atomic writes of a folder (`tracecal.secl.folders`): a temporary sibling renamed into place, an earlier output of
the same kind replaced whole, and never a file, a device, a folder of the user's files or one holding an input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.traces.disk import fill, read_only, small_filesystem
from tracecal.errors import ValidationError
from tracecal.secl.folders import FolderKind, atomic_write_dir, check_output_dir

KIND = FolderKind("a saved adapter", marker="cfg.json", names=frozenset({"cfg.json", "weights.bin"}))


def writer(payload: bytes = b"w" * 64):  # type: ignore[no-untyped-def]
    def write(folder: str) -> None:
        (Path(folder) / "cfg.json").write_text("{}")
        (Path(folder) / "weights.bin").write_bytes(payload)

    return write


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.endswith(".tmp"))


def test_a_new_an_empty_and_an_earlier_folder_are_written_whole(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "ad"
    atomic_write_dir(out, writer(b"one"), KIND)
    assert files(out) == {"cfg.json": b"{}", "weights.bin": b"one"}
    assert (out.stat().st_mode & 0o777) == (0o777 & ~_umask()) and leftovers(out.parent) == []
    atomic_write_dir(out, writer(b"two"), KIND)  # an earlier output of the same kind: replaced
    assert files(out) == {"cfg.json": b"{}", "weights.bin": b"two"} and leftovers(out.parent) == []
    empty = tmp_path / "empty"
    empty.mkdir()
    atomic_write_dir(empty, writer(), KIND)
    assert sorted(files(empty)) == ["cfg.json", "weights.bin"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("extra", [None, "notes.txt"])
def test_a_folder_of_other_files_is_refused_and_left_as_is(tmp_path: Path, extra: str | None) -> None:
    """A folder without the marker, or an earlier output with a file of the user's added, is not replaced."""
    mine = tmp_path / "mine"
    mine.mkdir()
    if extra is None:
        (mine / "thesis.tex").write_text("years of work")
    else:
        atomic_write_dir(mine, writer(), KIND)
        (mine / extra).write_text("mine")
    before = files(mine)
    with pytest.raises(ValidationError, match=r"--x .*mine is not empty and is not a saved adapter \(it holds '"):
        atomic_write_dir(mine, writer(b"new"), KIND, option="--x")
    assert files(mine) == before and leftovers(tmp_path) == []


def test_a_file_a_device_and_a_folder_holding_an_input_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "cache.json"
    f.write_text("input")
    for target in (f, Path("/dev/null")):
        with pytest.raises(ValidationError, match="is not a folder .*give a folder for a saved adapter"):
            atomic_write_dir(target, writer(), KIND)
    assert f.read_text() == "input"
    with pytest.raises(ValidationError, match=r"holds the cache file .*cache.json: the folder is replaced whole"):
        check_output_dir(tmp_path, KIND, [("cache file", f), ("model", None)])
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(ValidationError, match="is the model folder"):
        check_output_dir(tmp_path, KIND, [("model folder", link)])


def test_a_link_to_a_folder_is_followed_and_kept(tmp_path: Path) -> None:
    real = tmp_path / "real"
    atomic_write_dir(real, writer(b"a"), KIND)
    link = tmp_path / "ad"
    link.symlink_to(real)
    atomic_write_dir(link, writer(b"b"), KIND)
    assert link.is_symlink() and files(real)["weights.bin"] == b"b"


def test_a_failed_write_keeps_the_earlier_folder_and_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "ad"
    atomic_write_dir(out, writer(b"old"), KIND)

    def half_then_fail(folder: str) -> None:
        (Path(folder) / "cfg.json").write_text("{half")
        raise RuntimeError("the writer failed")

    with pytest.raises(RuntimeError, match="the writer failed"):
        atomic_write_dir(out, half_then_fail, KIND)
    assert files(out) == {"cfg.json": b"{}", "weights.bin": b"old"} and leftovers(tmp_path) == []


def test_a_full_or_read_only_disk_names_the_folder_and_keeps_the_earlier_one(tmp_path: Path) -> None:
    with small_filesystem(tmp_path) as mnt:
        out = mnt / "ad"
        atomic_write_dir(out, writer(b"old"), KIND)
        fill(mnt)
        with pytest.raises(OSError, match="No space left on device") as e:
            atomic_write_dir(out, writer(b"x" * 400_000), KIND)
        assert e.value.filename == str(out) and files(out)["weights.bin"] == b"old" and leftovers(mnt) == []
        (mnt / ".filler").unlink()
        read_only(mnt)
        with pytest.raises(OSError, match="(?i)read-only file system") as e:
            atomic_write_dir(out, writer(), KIND)
        assert e.value.filename == str(out) and files(out)["weights.bin"] == b"old"
