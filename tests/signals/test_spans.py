"""Risky spans: the per-token profile rebuilds TRACE's operators, the merging rule, the operator flag, character
ranges that are whole-character substrings for byte-level pieces (hypothesis, SmolLM2's and Qwen's tokenizers),
and the batch function equal to a per-answer loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracecal
from tracecal.backends.base import char_offsets
from tracecal.errors import ValidationError
from tracecal.signals.operators import TraceConfig, decayed_mean, length_norm_sum, window_peak
from tracecal.signals.spans import OPERATORS, char_bounds, risk_profile, risk_spans, span_table, token_char_bounds
from tracecal.traces.trace import Trace, TraceBatch


def _trace(text: str, s, h, offsets=None, strings=None) -> Trace:
    n = len(s)
    off = np.asarray(offsets or [], np.int64)
    return Trace(text=text, token_ids=np.arange(n), surprisal=s, entropy=h, offsets=off, token_strings=strings or [])


@given(
    st.lists(st.lists(st.floats(0, 8), min_size=0, max_size=12), min_size=1, max_size=6),
    st.integers(1, 6),
)
@settings(max_examples=60, deadline=None)
def test_profile_rebuilds_the_operators(values: list[list[float]], w: int) -> None:
    """Σ weight·H = D_λ(H); max window_mean = M^(w)(H); Σ s / T^ρ = L_ρ(s); r = (α+β)H + γs."""
    cfg = TraceConfig(window=w)
    b = TraceBatch.from_lists([v[::-1] for v in values], values)
    p = risk_profile(b, cfg)
    seg = b.segments
    np.testing.assert_allclose(seg.reduce(np.add, p.decay_weight * p.entropy), decayed_mean(b.entropy, seg, cfg.lam))
    wm = np.where(np.isnan(p.window_mean), -np.inf, p.window_mean)
    np.testing.assert_allclose(seg.reduce(np.maximum, wm), window_peak(b.entropy, seg, w), equal_nan=True)
    np.testing.assert_allclose(
        seg.reduce(np.add, p.surprisal) / seg.lengths**cfg.rho, length_norm_sum(b.surprisal, seg), equal_nan=True
    )
    np.testing.assert_allclose(p.risk, 0.8 * b.entropy + 0.2 * b.surprisal)


@given(st.lists(st.lists(st.floats(0, 8), min_size=1, max_size=15), min_size=1, max_size=6), st.floats(0.05, 1.0))
@settings(max_examples=80, deadline=None)
def test_the_merging_rule(values: list[list[float]], threshold: float) -> None:
    """Every span is a maximal run of tokens with r ≥ threshold·max r; the riskiest token is in the first span."""
    b = TraceBatch.from_lists(values, values)
    tab = span_table(b, k=100, threshold=threshold)
    for i, v in enumerate(values):
        r = np.asarray(v)
        risky = r >= threshold * r.max()
        mine = tab["answer"] == i
        covered = np.zeros(len(v), bool)
        for a, z, risk in zip(tab["token_start"][mine], tab["token_end"][mine], tab["risk"][mine], strict=True):
            assert risky[a:z].all() and (a == 0 or not risky[a - 1]) and (z == len(v) or not risky[z])
            assert risk == pytest.approx(r[a:z].max())
            covered[a:z] = True
        np.testing.assert_array_equal(covered, risky)
        assert tab["token_start"][mine][0] <= int(np.argmax(r)) < tab["token_end"][mine][0]
        assert np.all(np.diff(tab["risk"][mine]) <= 0)


def test_top_k_and_the_operator_flag() -> None:
    """A lone hesitant token outside the peak window is D_λ's; the peak window is M^(w)'s; a sampled unlikely token
    from a sharp distribution is L_ρ's."""
    h = [0.0, 3.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0, 0.0]
    s = [0.0] * 10
    s[3] = 9.0  # γ·s = 1.8 > (α+β)·H = 0
    t = _trace("x" * 10, s, h, offsets=list(range(10)))
    spans = risk_spans([t], k=5)[0]
    assert [(x.token_start, x.token_end, x.operator) for x in spans] == [
        (1, 2, "entropy"),
        (3, 4, "surprisal"),
        (5, 9, "peak"),
    ]
    assert [x.token_start for x in risk_spans([t], k=1)[0]] == [1]
    assert set(OPERATORS) == {"entropy", "peak", "surprisal"}


def test_bad_parameters_are_user_errors() -> None:
    t = _trace("ab", [0.1, 0.2], [0.3, 0.4], [0, 1])
    for kw in ({"k": 0}, {"k": 1.5}, {"threshold": 0.0}, {"threshold": 1.5}):
        with pytest.raises(ValidationError):
            risk_spans([t], **kw)


def _byte_trace(text: str, cuts: list[int], values: list[float]) -> tuple[Trace, list[bytes]]:
    """``text`` cut into byte-level pieces at ``cuts`` (possibly inside a character), offsets as a backend records."""
    raw = text.encode()
    bounds = sorted({0, len(raw), *(c % (len(raw) + 1) for c in cuts)})
    pieces = [raw[a:z] for a, z in zip(bounds[:-1], bounds[1:], strict=True)]
    prefixes = [b"".join(pieces[:i]).decode("utf-8", errors="replace") for i in range(len(pieces) + 1)]
    offsets, strings = char_offsets(prefixes, text)
    n = len(pieces)
    h = (values * n)[:n]
    return _trace(text, h[::-1], h, offsets.tolist(), strings), pieces


def _check_char_ranges(t: Trace, pieces: list[bytes], spans: list[tracecal.RiskSpan]) -> None:
    """The characters of a span are a substring of the text, at least every character completed inside the span
    and at most every character one of its bytes belongs to."""
    starts = np.concatenate([[0], np.cumsum([len(p) for p in pieces])])
    for x in spans:
        assert x.text == t.text[x.char_start : x.char_end] and x.text in t.text
        b0, b1 = int(starts[x.token_start]), int(starts[x.token_end])
        lo = len(t.text.encode()[:b0].decode("utf-8", errors="ignore"))  # chars wholly before the span's bytes
        hi = len(t.text.encode()[:b1].decode("utf-8", errors="replace"))  # chars touched up to its last byte
        assert lo <= x.char_start <= x.char_end <= hi
        assert x.char_end > x.char_start or b1 == b0


TEXTS = st.lists(st.sampled_from([*"ab 1.", "你", "好", "é", "😀", "👍🏽", "ß", "\n"]), min_size=1, max_size=14).map(
    "".join
)


@given(
    st.lists(st.tuples(TEXTS, st.lists(st.integers(0, 80), max_size=20)), min_size=1, max_size=5),
    st.lists(st.floats(0, 6), min_size=1, max_size=7),
    st.integers(1, 4),
)
@settings(max_examples=120, deadline=None)
def test_byte_pieces_map_to_whole_characters_and_batch_equals_loop(cases, values, k) -> None:
    built = [_byte_trace(text, cuts, values) for text, cuts in cases]
    traces = [t for t, _ in built]
    batch = risk_spans(traces, k=k)
    assert batch == [risk_spans([t], k=k)[0] for t in traces]
    flat = token_char_bounds(  # the column-wise form (a stored run) gives the same characters
        np.concatenate([t.offsets for t in traces]),
        np.concatenate([[0], np.cumsum([t.length for t in traces])]),
        np.array([len(t.text) for t in traces]),
    )
    np.testing.assert_array_equal(np.stack(flat), np.stack(char_bounds(traces)))
    for (t, pieces), spans in zip(built, batch, strict=True):
        assert 1 <= len(spans) <= k
        _check_char_ranges(t, pieces, spans)


def test_char_bounds_fallbacks() -> None:
    """No offsets but tiling token strings: their cumulative lengths; offsets past the text are clipped."""
    t = _trace("ab你", [0.1, 0.2, 3.0], [0.1, 0.2, 3.0], strings=["a", "b", "你"])
    start, end = char_bounds([t])
    assert start.tolist() == [0, 1, 2] and end.tolist() == [1, 2, 3]
    bad = _trace("abc", [0.1, 0.2], [0.1, 0.2], offsets=[1, 7])
    start, end = char_bounds([bad])
    assert start.tolist() == [1, 3] and end.tolist() == [3, 3]
    assert risk_spans([]) == [] and char_bounds([])[0].size == 0


def _answer_traces(tok, answers: list[list[int]], seed: float) -> list[Trace]:
    """Traces of answers given as token ids, decoded as the backends decode them (prefix by prefix)."""
    from tracecal.backends.base import decoded_prefixes

    out = []
    for j, ids in enumerate(answers):
        prefixes = decoded_prefixes(tok, ids)
        offsets, strings = char_offsets(prefixes, prefixes[-1])
        h = np.abs(np.sin(np.arange(len(ids)) * (j + seed))) * 3
        out.append(_trace(prefixes[-1], h / 2, h, offsets.tolist(), strings))
    return out


def _plain_ids(tok, texts: list[str]) -> list[list[int]]:
    return [tok.encode(text, add_special_tokens=False) or tok.encode(" ", add_special_tokens=False) for text in texts]


def _chat_ids(tok, texts: list[str]) -> list[list[int]]:
    """The answer part of a chat in the tokenizer's own template: the ids after the generation prompt."""
    msgs = [{"role": "user", "content": "Say it."}]
    prompt = tok.encode(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False))
    out = []
    for text in texts:
        chat = tok.apply_chat_template([*msgs, {"role": "assistant", "content": text}], tokenize=False)
        full = tok.encode(chat, add_special_tokens=False)
        # an answer starting with a newline merges with the prompt's last one in BPE: then the answer as the model
        # emits it after the prompt, token by token
        rest = full[len(prompt) :] if full[: len(prompt)] == prompt else tok.encode(text, add_special_tokens=False)
        out.append([i for i in rest if i not in tok.all_special_ids] or tok.encode(" ", add_special_tokens=False))
    return out


SAMPLES = ["The answer is 1912.", "北京是中国的首都。", "Great job 👍🏽😀!", "Ça coûte 3 €, non?", "東京タワー 333m 🗼"]


def _check_real(ts: list[Trace], k: int = 3, threshold: float = 0.3) -> None:
    batch = risk_spans(ts, k=k, threshold=threshold)
    assert batch == [risk_spans([t], k=k, threshold=threshold)[0] for t in ts]
    for t, spans in zip(ts, batch, strict=True):
        assert spans if t.length else not spans
        for x in spans:
            assert x.text == t.text[x.char_start : x.char_end] and x.text in t.text and x.text
            assert "\ufffd" not in x.text  # whole characters only
            assert "".join(t.token_strings[x.token_start : x.token_end]) in x.text


@pytest.fixture(scope="module")
def qwen():
    """Qwen2.5-Coder's tokenizer and chat template (loading the tokenizer only is cheap, offline)."""
    from transformers import AutoTokenizer

    from tracecal.backends.catalogue import model_cache_dir

    found = sorted(Path(model_cache_dir(), "hf").glob("qwen2.5-coder-1.5b-instruct*"))
    if not found:
        pytest.skip("Qwen's converted checkpoint is not in the model cache (tracecal models)")
    return AutoTokenizer.from_pretrained(str(found[0]))


def test_default_tokenizer_byte_level_pieces(tokenizer) -> None:
    """SmolLM2's byte-level BPE splits CJK characters and emoji into pieces; spans still cover whole characters."""
    traces = _answer_traces(tokenizer, _plain_ids(tokenizer, SAMPLES), 1.3)
    assert any("" in t.token_strings for t in traces)  # some token completes no character: the case at stake
    _check_real(traces)


def test_qwen_chat_template_answers(qwen) -> None:
    """The answer part of a Qwen chat (its template, its tokenizer): byte-level pieces here too."""
    traces = _answer_traces(qwen, _chat_ids(qwen, SAMPLES), 0.7)
    assert any("" in t.token_strings for t in traces)
    _check_real(traces)


@given(st.lists(TEXTS, min_size=1, max_size=4), st.integers(1, 4), st.floats(0.05, 1.0), st.floats(0.1, 3.0))
@settings(max_examples=40, deadline=None)
def test_generated_texts_on_both_tokenizers(tokenizer, qwen, texts: list[str], k: int, threshold: float, seed) -> None:
    """Hypothesis-generated texts of CJK, emoji (with a skin-tone modifier), accents and ASCII, tokenised by the
    default model's tokenizer and as the answer of Qwen's chat template: every span a whole-character substring,
    the batch equal to a per-answer loop."""
    _check_real(_answer_traces(tokenizer, _plain_ids(tokenizer, texts), seed), k, threshold)
    _check_real(_answer_traces(qwen, _chat_ids(qwen, texts), seed), k, threshold)
