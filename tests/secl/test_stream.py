"""`tracecal.secl.stream`: the stream of questions, the per-question detector statistic and the self-evaluation
prompts."""

from __future__ import annotations

import numpy as np
import pytest

from tracecal.errors import ValidationError
from tracecal.secl import answer_statistic, build_stream
from tracecal.secl.config import STATISTICS
from tracecal.secl.stream import order_domains, verbal_prompts
from tracecal.tasks.prompts import self_eval_question


def test_the_stream_is_domain_after_domain(stream) -> None:  # type: ignore[no-untyped-def]
    assert [it.domain for it in stream] == ["triviaqa"] * 4 + ["arc_easy"] * 4
    assert len({it.id for it in stream}) == 8 and stream[0].id.startswith("triviaqa/")
    assert [it.id for it in build_stream(["triviaqa", "arc_easy"], 4)] == [it.id for it in stream]
    with pytest.raises(ValidationError, match="per_domain must be a whole number ≥ 1, got 0"):
        build_stream("triviaqa", 0)
    with pytest.raises(ValidationError, match="at least one task"):
        build_stream(" , ", 2)


def test_answer_statistic_of_each_name() -> None:
    h, s = np.array([2.0, 1.0, 3.0]), np.array([0.5, 0.1, 0.3])
    got = {name: answer_statistic(h, s, name) for name in STATISTICS}
    assert got == {"mean_entropy": 2.0, "max_entropy": 3.0, "mean_surprisal": pytest.approx(0.3), "first_entropy": 2.0}
    assert np.isnan(answer_statistic(np.zeros(0), np.zeros(0)))  # a zero-token answer has no statistic
    with pytest.raises(ValueError, match="unknown statistic"):
        answer_statistic(h, s, "median_entropy")


def test_self_evaluation_prompts_show_the_question_as_the_shared_builder(tiny_model, stream) -> None:  # type: ignore[no-untyped-def]
    # the self-evaluation prompts show the question as the shared builder does (options for multiple choice)
    mc = stream[4]
    assert mc.example.choices and "A. " in self_eval_question(mc.example)
    assert tiny_model.tokenizer.decode(verbal_prompts(tiny_model, [mc], ["B"])[0]).count(mc.example.choices[0]) == 1


def test_the_domain_order_permutes_the_stream(stream) -> None:  # type: ignore[no-untyped-def]
    four = "triviaqa,svamp,arc_easy,truthfulqa"
    assert order_domains(four, None) == order_domains(four, "given") == four.split(",")
    assert order_domains(four, "reverse") == ["truthfulqa", "arc_easy", "svamp", "triviaqa"]
    assert order_domains(four, "2,4,1,3") == ["svamp", "truthfulqa", "triviaqa", "arc_easy"]
    assert order_domains(four, "svamp, triviaqa,truthfulqa,arc_easy") == ["svamp", "triviaqa", "truthfulqa", "arc_easy"]
    for bad in ("1,2,3", "1,1,2,3", "1,2,3,5", "svamp,triviaqa,gsm8k,arc_easy", "0,1,2,3"):
        with pytest.raises(ValidationError, match="--domain-order must name each of the stream's 4 domains"):
            order_domains(four, bad)
    reordered = build_stream(order_domains("triviaqa,arc_easy", "reverse"), 4)
    assert [it.id for it in reordered] == [it.id for it in stream[4:]] + [it.id for it in stream[:4]]
