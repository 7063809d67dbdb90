"""`tracecal.backends.llamacpp_load`: opening a GGUF — what is refused before llama.cpp is called, and the extra
buffer switch restored after the block."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracecal.backends.llamacpp_load import import_llama_cpp, llama_model_params, open_gguf
from tracecal.errors import ValidationError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("key", "kwargs"), [("dtype", {"dtype": "float32"}), ("device", {"device": "cuda"})])
def test_dtype_and_device_must_stay_auto(key: str, kwargs: dict[str, str]) -> None:
    args = {"dtype": "auto", "device": "auto"} | kwargs
    with pytest.raises(ValidationError, match=f"{key}=.*does not apply to llama.cpp"):
        open_gguf(None, 256, 1, None, args["dtype"], args["device"], False)


def test_a_file_that_is_not_gguf_or_missing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"runs a \.gguf file or a named model .* is neither"):
        open_gguf(ROOT / "README.md", 256, 1, None, "auto", "auto", False)
    with pytest.raises(FileNotFoundError, match="GGUF file not found"):
        open_gguf(tmp_path / "absent.gguf", 256, 1, None, "auto", "auto", False)


def test_extra_buffers_switch_is_set_inside_the_block_and_restored() -> None:
    lib = import_llama_cpp().llama_cpp
    before = lib.llama_model_default_params
    with llama_model_params(True):
        assert lib.llama_model_default_params().use_extra_bufts is True
    assert lib.llama_model_default_params is before


def test_a_misspelt_named_model_gets_the_names_and_a_suggestion() -> None:
    from tracecal.backends import load_model

    with pytest.raises(ValidationError, match="named model .*did you mean 'qwen2.5-coder-1.5b'"):
        load_model("qwen2.5-coder-1.5", backend="llamacpp")


def test_llama_cpp_warnings_go_to_its_logger_not_the_terminal(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A context shorter than the model's training context makes llama.cpp warn at load (n_ctx_per_seq <
    n_ctx_train); llama-cpp-python 0.3.16 printed it whatever ``verbose`` said. It reaches `LLAMA_LOG` at WARNING,
    shown only when a user lowers that logger's level."""
    import logging

    from tracecal.backends.hf import default_gguf_path

    capfd.readouterr()
    open_gguf(default_gguf_path(), 256, 1, None, "auto", "auto", False)
    assert "n_ctx" not in capfd.readouterr().err
    with caplog.at_level(logging.WARNING, logger="tracecal.llamacpp"):
        open_gguf(default_gguf_path(), 256, 1, None, "auto", "auto", False)
    assert any(r.levelno == logging.WARNING and "n_ctx_per_seq" in r.getMessage() for r in caplog.records)
