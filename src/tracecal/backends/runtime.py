"""How a local model runs on this machine: the one rule for the weights' dtype and the CPU threads that every
command (``generate``, ``score-answers``, ``evaluate``, ``serve``, ``secl``) and `tracecal.load_model` follow.

**dtype** (`resolve_dtype`): ``auto`` is ``bfloat16`` on a GPU and on a CPU with bf16 matrix units (the
``amx_bf16`` or ``avx512_bf16`` flag of ``/proc/cpuinfo``: `cpu_has_bf16`), else ``float32``. The dtype changes
the answers, so it is part of what they record (a run's identity, a trace's ``decoding``, a calibrator's
provenance); a run directory resumed with ``auto`` keeps the dtype it recorded (`tracecal.evaluation.run`).

**threads** (`auto_threads`): the CPUs this process may run on (`usable_cpus`: its affinity mask, capped by a
cgroup CPU quota) minus the CPUs' worth of time other processes keep busy on them (`busy_cpus`: a 0.2 s sample of
``/proc/stat``), a CPU counting as free when it is at least 75 % idle; at least 1, and never more than torch's own
default (its physical cores). The reason: torch's OpenMP threads spin-wait for each other, so with more threads
than free CPUs a decode step waits for a thread that another process has preempted; on a 2-core machine with one
busy process, torch's default of 2 threads ran ``generate --limit 8`` 5.8× slower than 1 thread
(docs/benchmarks.md, ``benchmarks/bench_threads.py``). An explicit ``--threads N`` (``threads=N``) always wins, and
so does ``OMP_NUM_THREADS`` when it is set. The rule is applied once per process, when a command starts or its
first model loads (`apply_threads`), and never raises the count torch runs at that moment (a
``torch.set_num_threads`` made before stands); every later ``auto`` leaves torch's count as it is. Load that
starts after the sample is not seen.

>>> resolve_dtype("auto", cuda=True), resolve_dtype("auto", cuda=False, bf16=False)
('bfloat16', 'float32')
>>> resolve_dtype("auto", cuda=False, bf16=True), resolve_dtype("float32", cuda=True)
('bfloat16', 'float32')
>>> threads_for(usable=2, busy=0.1), threads_for(usable=2, busy=1.0), threads_for(usable=2, busy=2.0)
(2, 1, 1)
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Sequence

from tracecal.errors import ValidationError

__all__ = [
    "BF16_FLAGS",
    "DTYPES",
    "FREE_SHARE",
    "MAX_THREADS",
    "apply_threads",
    "auto_threads",
    "busy_cpus",
    "check_threads",
    "cpu_has_bf16",
    "resolve_dtype",
    "resolve_threads",
    "threads_for",
    "usable_cpus",
]

DTYPES = ("auto", "float32", "bfloat16", "float16")
"""The values of every ``--dtype`` option (the weights of the HF backend)."""
BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})
"""The ``/proc/cpuinfo`` flags of bf16 matrix units (Intel AMX, AVX-512-BF16 on Intel and AMD Zen 4+)."""
FREE_SHARE = 0.75
MAX_THREADS = 4096
"""The most CPU threads a model may be given (torch and llama.cpp take a C int; more is no machine's)."""
"""A CPU counts as free for a torch thread when at least this share of it is idle (`threads_for`)."""
CPUINFO = "/proc/cpuinfo"
PROC_STAT = "/proc/stat"
CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"
_torch_default: int | None = None
_decided = False  # whether `apply_threads` set a count in this process: a later "auto" leaves torch's as it is


def cpu_has_bf16(cpuinfo: str = CPUINFO) -> bool:
    """Whether this CPU has bf16 matrix units (a `BF16_FLAGS` flag in ``cpuinfo``); False where the file is missing
    (not Linux). The one place the rule reads the CPU: tests patch it to play a bf16 CPU."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return bool(BF16_FLAGS & set(flags))


def resolve_dtype(dtype: str, cuda: bool | None = None, bf16: bool | None = None) -> str:
    """The weights' dtype a ``--dtype`` value means on this machine: a named one is itself; ``auto`` is bfloat16
    on a GPU (``cuda``; default: whether torch sees one) or on a CPU with bf16 matrix units (``bf16``; default
    `cpu_has_bf16`), else float32."""
    if dtype != "auto":
        return dtype
    if cuda is None:
        import torch

        cuda = bool(torch.cuda.is_available())
    if cuda:
        return "bfloat16"
    return "bfloat16" if (cpu_has_bf16() if bf16 is None else bf16) else "float32"


def usable_cpus(cpu_max: str = CGROUP_CPU_MAX) -> int:
    """The CPUs this process may run on: its affinity mask (``os.sched_getaffinity``; ``os.cpu_count`` where the
    OS has none), capped by a cgroup v2 CPU quota (``cpu.max``: ``quota period``, rounded up); at least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        with open(cpu_max, encoding="utf-8") as f:
            quota, period = (f.read().split() + ["max", "100000"])[:2]
        if quota != "max":
            n = min(n, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(1, n)


def _cpu_times(cpus: Iterable[int] | None, stat: str) -> tuple[float, float]:
    """(busy, total) jiffies summed over the ``cpuN`` lines of ``stat`` for ``cpus`` (None: the ``cpu`` line of
    all); busy is every field but idle and iowait (steal counts: a CPU the hypervisor gave away is not free)."""
    want = None if cpus is None else {f"cpu{i}" for i in cpus}
    busy = total = 0.0
    with open(stat, encoding="utf-8") as f:
        for line in f:
            name, *fields = line.split()
            if not name.startswith("cpu") or (name != "cpu" if want is None else name not in want):
                continue
            v = [float(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal (guest is in user)
            total += sum(v)
            busy += sum(v) - v[3] - v[4]
    return busy, total


def busy_cpus(cpus: Sequence[int] | None = None, window_s: float = 0.2, stat: str = PROC_STAT) -> float:
    """The CPUs' worth of time other processes kept busy on ``cpus`` (default: this process's affinity mask) over
    ``window_s`` seconds: Δbusy/Δtotal of ``/proc/stat`` times the number of CPUs, less this process's own CPU
    time in the window (``time.process_time``). 0.0 where ``/proc/stat`` cannot be read (not Linux)."""
    if cpus is None:
        try:
            cpus = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = None
    try:
        b0, t0 = _cpu_times(cpus, stat)
        own0, wall0 = time.process_time(), time.monotonic()
        time.sleep(window_s)
        b1, t1 = _cpu_times(cpus, stat)
        own, wall = time.process_time() - own0, time.monotonic() - wall0
    except (OSError, ValueError):
        return 0.0
    n = len(cpus) if cpus is not None else (os.cpu_count() or 1)
    if t1 <= t0:
        return 0.0
    return max(0.0, n * (b1 - b0) / (t1 - t0) - own / max(wall, 1e-9))


def threads_for(usable: int, busy: float, cap: int | None = None) -> int:
    """The rule: ``usable`` CPUs of which ``busy`` CPUs' worth are taken by other processes leave
    ⌊usable − busy + (1 − `FREE_SHARE`)⌋ free ones (a CPU ≥ 75 % idle counts); at least 1, at most ``cap``."""
    n = math.floor(usable - busy + (1.0 - FREE_SHARE) + 1e-9)
    return max(1, min(n, usable, cap if cap else usable))


def auto_threads(window_s: float = 0.2) -> int:
    """The torch threads a model gets when none are asked for (the module's rule): ``OMP_NUM_THREADS`` when set,
    else `threads_for` of `usable_cpus` and `busy_cpus`, capped by torch's own default."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return threads_for(usable_cpus(), busy_cpus(window_s=window_s), _torch_threads_default())


def _torch_threads_default() -> int | None:
    """torch's own thread count (its physical cores), as it was before this module first set one; None when torch
    is not imported (llama.cpp alone)."""
    global _torch_default
    if _torch_default is None:
        try:
            import torch
        except ImportError:
            return None
        _torch_default = int(torch.get_num_threads())
    return _torch_default


def check_threads(threads: int | str | None, name: str = "threads") -> int | str | None:
    """``threads`` if it is ``auto``, None or a whole number ≥ 1, else `ValidationError`."""
    ok = threads is None or threads == "auto" or (isinstance(threads, int) and not isinstance(threads, bool))
    if not ok or (isinstance(threads, int) and not 1 <= threads <= MAX_THREADS):
        raise ValidationError(f"{name} must be a whole number in [1, {MAX_THREADS}] or 'auto', got {threads!r}")
    return threads


def resolve_threads(threads: int | str | None) -> int | None:
    """The thread count ``threads`` asks for: a number is itself; None is None (leave the thread count as it is);
    ``auto`` is decided once per process: the first time, `auto_threads` (never above the count torch runs now, so
    a ``torch.set_num_threads`` made before stands), afterwards the count torch runs (a command's ``--threads``,
    the rule's choice, or what the user set since)."""
    check_threads(threads)
    if threads is None:
        return None
    if threads != "auto":
        return int(threads)
    import torch

    now = int(torch.get_num_threads())
    return now if _decided else min(auto_threads(), now)


def apply_threads(threads: int | str | None = "auto") -> int:
    """Set torch's CPU threads to what ``threads`` asks for (`resolve_threads`; None: leave them) and return the
    count torch now runs; after it, this process's ``auto`` is decided."""
    global _decided
    import torch

    _torch_threads_default()  # recorded before the first change
    n = resolve_threads(threads)
    if n is not None:
        _decided = True
        if n != torch.get_num_threads():
            torch.set_num_threads(n)
    return int(torch.get_num_threads())
