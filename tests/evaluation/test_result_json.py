"""Standard JSON for every file of an evaluation (NaN and ±∞ as null, read back as NaN) and the one message of
an OS error of a write."""

from __future__ import annotations

import errno
import json
import math

import numpy as np

from tracecal.evaluation.result_json import nan_for_null, os_error_message, plain_json


def test_plain_json_is_standard_json() -> None:
    doc = {
        "a": math.nan,
        "b": [math.inf, -math.inf, 1.5, np.float32(2.5), np.float64(np.nan)],
        "c": {"n": np.int64(3), "ok": np.bool_(True), "arr": np.array([1.0, np.nan])},
        "s": "NaN",
        "none": None,
        "t": (1, 2),
    }
    text = json.dumps(plain_json(doc), allow_nan=False)  # raises on any NaN or ±∞ left
    back = json.loads(text)
    assert back == {
        "a": None,
        "b": [None, None, 1.5, 2.5, None],
        "c": {"n": 3, "ok": True, "arr": [1.0, None]},
        "s": "NaN",
        "none": None,
        "t": [1, 2],
    }


def test_nan_for_null_restores_metrics_and_interval_bounds_only() -> None:
    doc = {
        "config": {"model": None, "limit": None},
        "metrics": {"t": {"e": {"auroc": {"mean": None, "sd": None, "n_seeds": 0}}}},
        "statistics": {
            "comparisons": {
                "t": {"baseline": None, "estimators": {"e": {"auroc": {"diff": None, "lo": 0.1, "verdict": "n/a"}}}}
            },
            "selective": {"alpha": 0.1},
        },
    }
    out = nan_for_null(json.loads(json.dumps(plain_json(doc), allow_nan=False)))
    assert out["config"] == {"model": None, "limit": None}  # settings that are None stay None
    m = out["metrics"]["t"]["e"]["auroc"]
    assert math.isnan(m["mean"]) and math.isnan(m["sd"]) and m["n_seeds"] == 0
    comp = out["statistics"]["comparisons"]["t"]
    assert comp["baseline"] is None and comp["estimators"]["e"]["auroc"]["verdict"] == "n/a"
    assert math.isnan(comp["estimators"]["e"]["auroc"]["diff"]) and comp["estimators"]["e"]["auroc"]["lo"] == 0.1
    assert nan_for_null(None) is None and nan_for_null({"metrics": [1]}) == {"metrics": [1]}


def test_os_error_message_says_what_to_do() -> None:
    full = os_error_message(OSError(errno.ENOSPC, "No space left on device"), "/r/x.parquet")
    assert full.startswith("cannot write /r/x.parquet: No space left on device;") and "free some space" in full
    ro = os_error_message(OSError(errno.EROFS, "Read-only file system"), "/r", where="--out")
    assert "read-only or immutable" in ro and "another --out" in ro
    assert "\n" not in full + ro


def test_merge_partial_keeps_what_was_not_recomputed_and_refuses_other_settings() -> None:
    import pytest

    from tracecal.errors import ValidationError
    from tracecal.evaluation.result_json import merge_partial

    old = {"seed": 0, "variants": {"a": {"mean": 1}, "b": {"mean": 2}}, "transfer": {"x": 1}}
    new = {"seed": 0, "variants": {"a": {"mean": 5}, "b": {"mean": None}, "c": {"mean": None}}}
    out = merge_partial(old, new, ("seed",), ("variants", "transfer"), "R/ablations.json")
    assert out["variants"] == {"a": {"mean": 5}, "b": {"mean": 2}, "c": {"mean": None}} and out["transfer"] == {"x": 1}
    assert merge_partial(None, new, ("seed",), ("variants",), "w") is new
    with pytest.raises(ValidationError, match=r"R/ablations.json holds results made with seed=0, not 1"):
        merge_partial(old, {**new, "seed": 1}, ("seed",), ("variants",), "R/ablations.json")
