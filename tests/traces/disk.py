"""A small file system for fault tests: a tmpfs of a few hundred KiB mounted inside the test's folder (filled
up, or remounted read-only), skipped with the reason where this process may not mount one (not root, no
``mount``, a container without the capability)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["fill", "leave_free", "read_only", "small_filesystem", "tmp_files"]


@contextlib.contextmanager
def small_filesystem(where: Path, size_kib: int = 512) -> Iterator[Path]:
    """A fresh tmpfs of ``size_kib`` KiB at ``where/small_fs`` for the ``with`` block (unmounted after it)."""
    mnt = where / "small_fs"
    mnt.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root and `mount`: the full-disk / read-only test cannot run here")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({r.stderr.decode(errors='replace').strip()})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def fill(mnt: Path) -> None:
    """Fill the file system of ``mnt`` up: a file ``.filler`` grows until the disk is full (ENOSPC)."""
    with open(mnt / ".filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e


def leave_free(mnt: Path, kib: int) -> None:
    """Fill the file system of ``mnt`` up, then free ``kib`` KiB of it again (the ``.filler`` file shrunk)."""
    fill(mnt)
    filler = mnt / ".filler"
    os.truncate(filler, max(0, filler.stat().st_size - kib * 1024))


def read_only(mnt: Path) -> None:
    """Remount ``mnt`` read-only."""
    subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True, capture_output=True)


def tmp_files(folder: Path) -> list[str]:
    """Names of the temporary files `tracecal._outputs.atomic_write` would leave behind in ``folder``."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))
