"""How far each estimator's AUROC moved between two runs, in units of the split standard deviation.

For every (task, estimator) in both results.json files: d = mean_B - mean_A of the AUROC over the splits, and
|d| / max(sd_A, sd_B). Prints the largest shifts and counts those beyond one and two split-sd ("average" rows,
which have no sd, are left out).

    python scripts/auroc_shift.py A/results.json B/results.json [--top 30]
"""

import argparse
import json


def shifts(a: dict, b: dict) -> list[tuple[float, str, str, float, float, float]]:
    """(|d|/sd, task, estimator, mean_A, mean_B, d) for every pair present in both, largest first."""
    rows = []
    for task, ests in a["metrics"].items():
        for est, m in ests.items():
            other = b["metrics"].get(task, {}).get(est)
            if other is None or m["auroc"]["sd"] is None or other["auroc"]["sd"] is None:
                continue
            x, y = m["auroc"], other["auroc"]
            if x["mean"] is None or y["mean"] is None:
                continue
            d = y["mean"] - x["mean"]
            rows.append((abs(d) / max(x["sd"], y["sd"], 1e-12), task, est, x["mean"], y["mean"], d))
    return sorted(rows, reverse=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    with open(args.a) as fa, open(args.b) as fb:
        rows = shifts(json.load(fa), json.load(fb))
    for z, task, est, ma, mb, d in rows[: args.top]:
        print(f"{task:11s} {est:24s} {ma:.3f} -> {mb:.3f}  d={d:+.3f}  |d|/sd={z:.2f}")
    n1, n2 = sum(r[0] > 1 for r in rows), sum(r[0] > 2 for r in rows)
    print(f"{len(rows)} pairs; {sum(r[0] == 0 for r in rows)} identical; {n1} beyond 1 sd; {n2} beyond 2 sd")


if __name__ == "__main__":
    main()
