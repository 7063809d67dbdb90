"""`tracecal.traces.provenance`: the record every fitted file carries, read back strictly, and the comparison."""

from __future__ import annotations

import os

import pytest

from tracecal.errors import ValidationError
from tracecal.traces.provenance import FIELDS, mismatch, provenance, read_provenance, traces_provenance
from tracecal.traces.trace import Trace
from tracecal.version import __version__


def _trace(model: str, dtype: str | None) -> Trace:
    return Trace(text="a", token_ids=[1], surprisal=[0.1], entropy=[0.2], model_id=model, decoding={"dtype": dtype})


def test_a_record_names_model_dtype_version_and_an_absolute_run(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    rec = provenance("m", "float32", "runs/a")
    assert list(rec) == list(FIELDS) and rec == {
        "model": "m",
        "dtype": "float32",
        "tracecal": __version__,
        "run": os.path.join(str(tmp_path), "runs", "a"),
    }
    assert provenance("", None, None) == {"model": None, "dtype": None, "tracecal": __version__, "run": None}


def test_traces_record_what_their_answers_say() -> None:
    one = traces_provenance([_trace("m", "bfloat16"), _trace("m", "bfloat16")], "/t.parquet")
    assert (one["model"], one["dtype"], one["run"]) == ("m", "bfloat16", os.path.abspath("/t.parquet"))
    mixed = traces_provenance([_trace("b", None), _trace("a", "float32")], None)
    assert (mixed["model"], mixed["dtype"]) == ("a + b", "float32")  # belongs to no single served model
    assert mismatch(mixed, "a", "float32") is not None
    assert traces_provenance([_trace("", None)], None)["model"] is None


def test_reading_keeps_the_known_fields_and_refuses_malformed_records() -> None:
    assert read_provenance(None) is None
    assert read_provenance({"model": "m", "extra": 1}) == {"model": "m", "dtype": None, "tracecal": None, "run": None}
    for bad, what in (
        ("m", "must be a JSON object"),
        ({"dtype": 16}, "'dtype' must be a string"),
        ({"run": "x" * 5000}, "'run'"),
    ):
        with pytest.raises(ValidationError, match=what):
            read_provenance(bad)


def test_mismatch_compares_what_both_sides_know(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rec = provenance("m", "bfloat16", None)
    assert (
        mismatch(rec, "m", "bfloat16") is None
        and mismatch(rec, None, None) is None
        and mismatch(rec, "m", None) is None
    )
    assert mismatch(rec, "m", "float32") == (
        "was made on bfloat16 answers; this server's weights are float32 (the dtype changes answers)"
    )
    assert "this server serves 'n'" in str(mismatch(rec, "n", "bfloat16"))
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"")
    link = tmp_path / "y.gguf"
    link.symlink_to(gguf)
    assert mismatch(provenance(str(gguf), None, None), str(link), None) is None  # the same file, by another path
    other = tmp_path / "sub" / "x.gguf"
    assert mismatch(provenance(str(gguf), None, None), str(other), None) is not None  # same name, another file
