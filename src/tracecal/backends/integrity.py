"""Content checks of cached model files that do not trust modification times.

A model file's SHA-256 is remembered beside it (``.<name>.sha256``, JSON) with a *stamp* of the file (size, mtime,
ctime and inode) and a *sampled digest* (the SHA-256 of `SAMPLES` blocks of `BLOCK` bytes spread evenly over the
file, the first and last included). `verified_sha256` is the cheap check made at every use: the remembered digest
is returned only when the stamp is the same and the sampled blocks hash the same; otherwise (and always with
``full=True``, as ``tracecal models fetch`` asks) the whole file is hashed again. ``ctime`` is set by the kernel
on every write and cannot be set back (``touch`` and copy tools restore mtime, never ctime), so a file
overwritten in place with its mtime restored fails the stamp and is hashed in full.

>>> import tempfile, pathlib, os
>>> p = pathlib.Path(tempfile.mkdtemp()) / "m.gguf"
>>> _ = p.write_bytes(bytes(range(256)) * 4096)
>>> a = verified_sha256(p)
>>> st = p.stat()
>>> with p.open("r+b") as f:
...     _ = f.seek(500_000)
...     _ = f.write(b"x" * 4096)
>>> os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime restored
>>> verified_sha256(p) == a
False
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

__all__ = ["BLOCK", "SAMPLES", "file_sha256", "remember_sha256", "sampled_digest", "verified_sha256"]

SAMPLES = 64
"""Blocks read by the cheap check (64 × 4 KiB = 256 KiB, whatever the file's size)."""
BLOCK = 4096


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def sampled_digest(path: Path) -> str:
    """Hex SHA-256 of the file's size and `SAMPLES` blocks of `BLOCK` bytes at evenly spaced offsets (the first
    and the last block included): a cheap check that changes when any sampled block changes."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    last = max(size - BLOCK, 0)
    with path.open("rb") as f:
        for i in range(SAMPLES):
            f.seek(last * i // (SAMPLES - 1))
            digest.update(f.read(BLOCK))
    return digest.hexdigest()


def _stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def verified_sha256(path: Path, full: bool = False) -> str:
    """The SHA-256 of ``path``: the one remembered beside it when the file's stamp (size, mtime, ctime, inode) and
    its `sampled_digest` are unchanged, else (and with ``full``) the whole file hashed again and remembered."""
    record = path.with_name(f".{path.name}.sha256")
    stamp = _stamp(path)
    if not full:
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            known = json.loads(record.read_text(encoding="utf-8"))
            if known["stamp"] == stamp and known["sampled"] == sampled_digest(path):
                return str(known["sha256"])
    digest = file_sha256(path)
    remember_sha256(path, digest, stamp)
    return digest


def remember_sha256(path: Path, digest: str, stamp: list[int] | None = None) -> None:
    """Record ``digest`` (the SHA-256 of ``path``, known from writing or hashing it) with the file's stamp and
    `sampled_digest` for the next `verified_sha256`; a read-only cache records nothing (it is hashed each time)."""
    record = path.with_name(f".{path.name}.sha256")
    doc = {"stamp": stamp or _stamp(path), "sampled": sampled_digest(path), "sha256": digest}
    with contextlib.suppress(OSError):
        record.write_text(json.dumps(doc), encoding="utf-8")
