"""Compare two results.json files: every number to an absolute tolerance of 1e-12 (NaN equals NaN), every other value
equal; timings and versions are skipped; null (how tracecal writes a NaN) equals NaN. Exit 1 on any difference.

    python scripts/compare_results.py A/results.json B/results.json
"""

import json
import math
import sys


def walk(a, b, path, out, tol):
    a, b = (math.nan if x is None and isinstance(y, float) else x for x, y in ((a, b), (b, a)))
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k in ("elapsed_s", "created", "timings", "version", "tracecal_version", "scored_at"):
                continue
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'first' if k in a else 'second'}")
                continue
            walk(a[k], b[k], f"{path}/{k}", out, tol)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: lengths {len(a)} != {len(b)}")
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            walk(x, y, f"{path}[{i}]", out, tol)
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if (a is None) != (b is None):
            out.append(f"{path}: {a} vs {b}")
            return
        fa, fb = float(a), float(b)
        if math.isnan(fa) and math.isnan(fb):
            return
        if not abs(fa - fb) <= tol:
            out.append(f"{path}: {a} vs {b}")
    elif a != b:
        out.append(f"{path}: {str(a)[:80]!r} vs {str(b)[:80]!r}")


a, b = (json.load(open(p)) for p in sys.argv[1:3])
out = []
n = [0]
walk(a, b, "", out, 1e-12)
print(f"{len(out)} differences")
print("\n".join(out[:40]))
sys.exit(1 if out else 0)
