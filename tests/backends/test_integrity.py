"""Content checks of cached model files (tracecal.backends.integrity): a file overwritten in place with its mtime
restored is hashed again (it was accepted by a size + mtime stamp), the cheap check reads a bounded amount, and
``full`` always hashes the whole file."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tracecal.backends import integrity
from tracecal.backends.integrity import BLOCK, SAMPLES, file_sha256, remember_sha256, sampled_digest, verified_sha256


def _model(tmp_path: Path, size: int = 3_000_000) -> Path:
    p = tmp_path / "m.gguf"
    p.write_bytes(os.urandom(size))
    return p


def _overwrite_keeping_mtime(p: Path, offset: int) -> None:
    st = p.stat()
    with p.open("r+b") as f:
        f.seek(offset)
        f.write(b"\0" * 4096)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_mtime_ns == st.st_mtime_ns and p.stat().st_size == st.st_size


def test_4_kib_overwritten_with_mtime_restored_is_caught(tmp_path: Path) -> None:
    p = _model(tmp_path)
    good = verified_sha256(p)
    assert good == hashlib.sha256(p.read_bytes()).hexdigest()
    _overwrite_keeping_mtime(p, 1_234_567)  # between the sampled blocks: the stamp's ctime catches it
    assert verified_sha256(p) == file_sha256(p) != good


def test_the_cheap_check_trusts_an_unchanged_file_and_reads_a_bounded_amount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _model(tmp_path)
    remember_sha256(p, "f" * 64)  # as assembly records it: the next use does not hash the file
    calls: list[Path] = []
    monkeypatch.setattr(integrity, "file_sha256", lambda q: calls.append(q) or "0" * 64)
    assert verified_sha256(p) == "f" * 64 and not calls
    assert verified_sha256(p, full=True) == "0" * 64 and calls == [p]  # models fetch: always the whole file
    record = json.loads(p.with_name(".m.gguf.sha256").read_text())
    assert record["sampled"] == sampled_digest(p) and SAMPLES * BLOCK <= 1 << 18


def test_a_changed_sampled_block_is_caught_even_with_a_forged_stamp(tmp_path: Path) -> None:
    p = _model(tmp_path)
    good = verified_sha256(p)
    _overwrite_keeping_mtime(p, 0)  # the first block is always sampled
    record = p.with_name(".m.gguf.sha256")
    doc = json.loads(record.read_text())
    st = p.stat()
    doc["stamp"] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]  # a stamp that matches the new file
    record.write_text(json.dumps(doc))
    assert verified_sha256(p) != good
