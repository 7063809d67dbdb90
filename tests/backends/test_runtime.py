"""The one rule of dtype and threads (`tracecal.backends.runtime`): what ``auto`` resolves to, how busy CPUs are read,
and that every way a model is loaded applies it (an explicit count always wins)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import tracecal.backends.runtime as runtime
from tracecal.errors import ValidationError


@pytest.fixture
def fresh(monkeypatch):  # type: ignore[no-untyped-def]
    """No thread count chosen yet in this process, no OMP_NUM_THREADS, torch's count restored after."""
    before = torch.get_num_threads()
    monkeypatch.setattr(runtime, "_decided", False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    yield runtime
    torch.set_num_threads(before)


def test_auto_dtype_is_bf16_on_a_gpu_or_a_bf16_cpu_and_float32_elsewhere(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tracecal.backends.defaults import torch_dtype

    for flags, want in (("fpu sse2 amx_bf16 amx_tile", True), ("fpu avx512f avx512_bf16", True), ("fpu avx2", False)):
        info = tmp_path / "cpuinfo"
        info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\n")
        assert runtime.cpu_has_bf16(str(info)) is want
    assert runtime.cpu_has_bf16(str(tmp_path / "missing")) is False
    for bf16, cpu in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(runtime, "cpu_has_bf16", lambda bf16=bf16: bf16)
        assert runtime.resolve_dtype("auto", cuda=False) == str(cpu).removeprefix("torch.")
        assert torch_dtype("auto", "cpu") == cpu and torch_dtype("auto", "cuda:0") == torch.bfloat16
        assert runtime.resolve_dtype("float16", cuda=False) == "float16" and torch_dtype("fp32", "cpu") == torch.float32


def test_the_rule_leaves_the_cpus_other_processes_keep_busy() -> None:
    assert [runtime.threads_for(2, b) for b in (0.0, 0.2, 0.3, 1.0, 1.24, 1.3, 2.0, 5.0)] == [2, 2, 1, 1, 1, 1, 1, 1]
    assert runtime.threads_for(8, 3.0) == 5 and runtime.threads_for(8, 3.0, cap=4) == 4
    assert runtime.threads_for(1, 0.0) == 1 and runtime.threads_for(4, 0.0, cap=None) == 4


def test_usable_cpus_read_the_affinity_and_a_cgroup_quota(tmp_path: Path) -> None:
    mine = len(os.sched_getaffinity(0))
    assert runtime.usable_cpus(str(tmp_path / "none")) == mine
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert runtime.usable_cpus(str(tmp_path / "cpu.max")) == min(mine, 2)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert runtime.usable_cpus(str(tmp_path / "cpu.max")) == mine


def test_busy_cpus_read_proc_stat_per_cpu_less_this_process(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # fields: user nice system idle iowait irq softirq steal guest guest_nice
    lines = ["cpu  10 0 10 80 0 0 0 0 0 0", "cpu0 5 0 5 40 0 0 0 0 0 0", "cpu1 5 0 5 40 0 0 0 0 0 0", "intr 1"]
    stat.write_text("\n".join(lines) + "\n")
    assert runtime.busy_cpus([0, 1], window_s=0.0, stat=str(stat)) == 0.0  # nothing moved
    assert runtime.busy_cpus(window_s=0.0, stat=str(tmp_path / "missing")) == 0.0  # not Linux: nothing known
    b0, t0 = runtime._cpu_times([1], str(stat))
    assert (b0, t0) == (10.0, 50.0)  # cpu1 alone: idle and iowait are free time, the rest busy


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="reads /proc/stat")
def test_a_busy_process_is_seen_and_the_default_leaves_its_cpu() -> None:
    """A busy loop beside us counts as about one busy CPU (the sample ends before the hog does)."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the rule always gives 1")
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        busy = runtime.busy_cpus(window_s=0.5)
        n = runtime.threads_for(runtime.usable_cpus(), busy)
    finally:
        hog.kill()
        hog.wait()
    assert busy >= 0.7, busy  # the hog, and whatever else runs on this machine
    assert n <= runtime.usable_cpus() - 1


def test_an_explicit_count_or_omp_num_threads_wins_and_auto_is_decided_once(fresh, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert fresh.auto_threads() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    sampled: list[int] = []
    monkeypatch.setattr(fresh, "busy_cpus", lambda **k: sampled.append(1) or 0.0)
    assert fresh.auto_threads() == min(fresh.usable_cpus(), fresh._torch_threads_default() or 99)
    torch.set_num_threads(1)  # set by the user before any load: auto never raises it
    assert fresh.apply_threads("auto") == 1 and len(sampled) == 2
    torch.set_num_threads(2)  # set after: auto leaves it (decided), an explicit count wins
    assert fresh.apply_threads("auto") == 2 and fresh.resolve_threads("auto") == 2 and len(sampled) == 2
    assert fresh.apply_threads(1) == 1 == torch.get_num_threads()
    assert fresh.apply_threads(None) == 1 and fresh.resolve_threads(None) is None  # None: left as it is
    for bad in (0, -1, "3", 1.5, True):
        with pytest.raises(ValidationError, match="threads must be a whole number in .1, 4096. or 'auto'"):
            fresh.apply_threads(bad)


def test_a_busy_cpu_lowers_the_first_auto_of_a_process(fresh, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    torch.set_num_threads(2)
    monkeypatch.setattr(fresh, "usable_cpus", lambda: 2)
    monkeypatch.setattr(fresh, "busy_cpus", lambda **k: 1.0)
    monkeypatch.setattr(fresh, "_torch_default", 2)
    assert fresh.apply_threads("auto") == 1 == torch.get_num_threads()


def test_every_load_applies_the_rule_and_an_explicit_count_wins(fresh, monkeypatch, tmp_path: Path, tiny_model) -> None:  # type: ignore[no-untyped-def]
    """`load_model` / `HFModel.load` set torch's threads (the rule, once per process; ``threads=N`` wins); the
    llama.cpp backend gets the same count as its ``n_threads``; an HTTP backend takes none."""
    import tracecal.backends.llamacpp as llamacpp
    from tracecal.backends import load_model

    tiny_model.model.save_pretrained(tmp_path / "m")
    tiny_model.tokenizer.save_pretrained(tmp_path / "m")
    torch.set_num_threads(2)
    monkeypatch.setattr(fresh, "auto_threads", lambda window_s=0.2: 1)
    lm = load_model(tmp_path / "m", dtype="float32")
    assert torch.get_num_threads() == 1 and lm.model.dtype == torch.float32
    load_model(tmp_path / "m", threads=2)
    assert torch.get_num_threads() == 2
    seen: dict[str, object] = {}
    monkeypatch.setattr(llamacpp.LlamaCppModel, "load", classmethod(lambda cls, p, **k: seen.update(k)))
    load_model(None, backend="llamacpp")
    assert seen["n_threads"] == 2  # what this process runs
    load_model(None, backend="llamacpp", threads=3)
    assert seen["n_threads"] == 3
    load_model(None, backend="llamacpp", n_threads=4)
    assert seen["n_threads"] == 4
    with pytest.raises(ValidationError, match="threads must be"):
        load_model("http://127.0.0.1:9/v1", threads=0)


def test_the_docstring_examples_run() -> None:
    import doctest

    assert doctest.testmod(runtime).failed == 0
