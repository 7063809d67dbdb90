"""Run the SECL grid (`tracecal_papers.secl_grid`: the default configuration and the seven ablations) for one model,
resumably: every (variant, seed) goes to ``docs/runs/secl-<model>-<variant>-s<seed>/secl.json``; a run whose
file is there is skipped, so the same command continues an interrupted grid. The frozen pass is computed once per
model and size and shared through a cache; full results (with per-question records) and logs stay in ``--work``.

    python scripts/secl_grid.py --model smollm2-135m-instruct --per-domain 150 --seeds 0,1,2 --variants default
    python scripts/secl_grid.py --model qwen2.5-coder-1.5b --per-domain 150 --seeds 0,1,2          # all variants
    python scripts/secl_grid.py --model qwen2.5-coder-1.5b --per-domain 150 --dry-run              # plan, estimate
    nohup python scripts/secl_grid.py --model ... > runs/secl-grid.log 2>&1 &                      # in the background

``--variants`` takes variant names and group keys (default, signal, gating, accumulation, loss, order, hyper,
layers), comma-separated. Then ``python scripts/secl_tables.py --write docs/secl.md`` redraws the tables.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from tracecal.errors import TracecalError
from tracecal_papers.secl_grid import estimate_seconds, finish_run, model_slug, plan, secl_args, select_variants
from tracecal_papers.secl_tables import load_runs, measured_rates

REFERENCE = "smollm2-135m-instruct"
DOC_RUNS = Path(__file__).resolve().parents[1] / "docs" / "runs"


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True, help="a named model (tracecal models) or a model path")
    p.add_argument("--per-domain", type=int, required=True, help="questions per domain (4 domains)")
    p.add_argument("--seeds", default="0", help="comma-separated LoRA seeds [0]")
    p.add_argument("--variants", default="all", help="variant names / group keys, comma-separated [all]")
    p.add_argument("--runs", type=Path, default=Path("docs/runs"), help="where the run folders go [docs/runs]")
    p.add_argument("--work", type=Path, default=Path("runs/secl-grid"), help="frozen cache, full results, logs")
    p.add_argument(
        "--cache", type=Path, default=None, help="frozen-pass cache [WORK/frozen-<model>[-<dtype>]-<n>.json]"
    )
    p.add_argument("--dtype", default=None, help="weights dtype of every run (float32, bfloat16) [tracecal's auto]")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads per run")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the estimate, run nothing")
    return p.parse_args()


def _estimate(runs_dir: Path, model: str, per_domain: int, n_todo: int, cached: bool) -> str:
    measured = load_runs(runs_dir)[0] + (load_runs(DOC_RUNS)[0] if runs_dir.resolve() != DOC_RUNS.resolve() else [])
    rates, basis = measured_rates(measured, model), f"measured on {model}'s runs"
    if rates is None:
        rates, basis = measured_rates(measured, REFERENCE), f"no {model} run yet: at SmolLM2-135M's measured rate"
        basis += " (a larger model is slower)"
    if rates is None:
        return "no measured run to estimate the time from"
    secs = estimate_seconds(n_todo, per_domain, rates[0], rates[1], cached)
    return (
        f"≈ {secs / 3600:.1f} h ({basis}: SECL pass {rates[0]:.2f} s/question, frozen pass {rates[1]:.2f} "
        f"s/question{'' if cached else ', once'}, ~25 s start per run; gate-never runs take only the start)"
    )


def main() -> int:
    a = _args()
    try:
        seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
        variants = select_variants(a.variants)
        if a.per_domain < 1 or not seeds:
            raise ValueError("--per-domain must be ≥ 1 and --seeds must name at least one seed")
    except (TracecalError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    runs = plan(a.runs, a.model, variants, seeds)
    todo = [r for r in runs if not r.done]
    tag = f"{model_slug(a.model)}-{a.dtype}" if a.dtype else model_slug(a.model)
    cache = a.cache or a.work / f"frozen-{tag}-{a.per_domain}.json"
    print(
        f"SECL grid on {a.model}, {a.per_domain} per domain: {len(variants)} variants × {len(seeds)} seeds = "
        f"{len(runs)} runs, {len(runs) - len(todo)} done, {len(todo)} to do"
    )
    print("estimate: " + _estimate(a.runs, a.model, a.per_domain, len(todo), cache.is_file()))
    if a.dry_run:
        for r in todo:
            args = secl_args(a.model, a.per_domain, r, cache, Path("OUT.json"), a.threads, a.dtype)
            print(f"  {r.folder}: tracecal {' '.join(args)}")
        return 0
    a.work.mkdir(parents=True, exist_ok=True)
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    failed = 0
    for k, r in enumerate(todo, 1):
        full, log = a.work / f"{r.folder.name}.json", a.work / f"{r.folder.name}.log"
        argv = [
            sys.executable,
            "-m",
            "tracecal.cli",
            *secl_args(a.model, a.per_domain, r, cache, full, a.threads, a.dtype),
        ]
        t0 = time.time()
        print(f"[{k}/{len(todo)}] {r.folder.name} {time.strftime('%H:%M:%S')} …", flush=True)
        with log.open("w") as f:
            rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
        if rc != 0 or not full.is_file():
            failed += 1
            print(f"    failed (exit {rc}); see {log}", flush=True)
            continue
        finish_run(full, r.folder)
        print(f"    done in {time.time() - t0:.0f} s → {r.folder}/secl.json", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
