"""question-answering: exact spans, probabilities, ranking, long contexts in overlapping windows, errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import microformers
from microformers import ConfigError

CONTEXT = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
    "It is named after the engineer Gustave Eiffel, whose company designed and built the tower."
)
QUESTION = "Who designed the tower?"


@pytest.fixture(scope="module")
def qa(make_bert):
    return microformers.pipeline("question-answering", model=str(make_bert("AutoModelForQuestionAnswering", seed=3)))


def brute_force(qa, question: str, context: str, max_seq_len: int, doc_stride: int, max_answer_len: int):
    """Best (start_char, end_char, score) over every window, computed directly from the model's logits."""
    tok = qa.tokenizer
    enc = tok(
        question,
        context,
        truncation="only_second",
        max_length=max_seq_len,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    best = (None, None, -1.0)
    for w in range(len(enc["input_ids"])):
        ids = torch.tensor([enc["input_ids"][w]])
        with torch.no_grad():
            out = qa.model(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                token_type_ids=torch.tensor([enc["token_type_ids"][w]]),
            )
        seq = enc.sequence_ids(w)
        allowed = [s == 1 or i == 0 for i, s in enumerate(seq)]  # context tokens and [CLS]

        def probs(logits, allowed=allowed):
            x = logits[0].double().numpy()
            x = np.where(allowed, x, -np.inf)
            e = np.exp(x - x.max())
            return e / e.sum()

        ps, pe = probs(out.start_logits), probs(out.end_logits)
        for i in range(len(seq)):
            for j in range(i, min(i + max_answer_len, len(seq))):
                if seq[i] == 1 and seq[j] == 1 and ps[i] * pe[j] > best[2]:
                    best = (enc["offset_mapping"][w][i][0], enc["offset_mapping"][w][j][1], ps[i] * pe[j])
    return best


def test_answer_is_an_exact_span_with_a_probability(qa):
    answer = qa(question=QUESTION, context=CONTEXT)
    assert list(answer) == ["score", "start", "end", "answer"]
    assert CONTEXT[answer["start"] : answer["end"]] == answer["answer"] and answer["answer"]
    assert 0.0 <= answer["score"] <= 1.0
    start, end, score = brute_force(qa, QUESTION, CONTEXT, 384, 128, 15)
    assert (answer["start"], answer["end"]) == (start, end)
    assert answer["score"] == pytest.approx(score, rel=1e-4)


def test_top_k_is_best_first_and_distinct(qa):
    answers = qa(question=QUESTION, context=CONTEXT, top_k=5)
    assert len(answers) == 5
    scores = [a["score"] for a in answers]
    assert scores == sorted(scores, reverse=True)
    assert len({(a["start"], a["end"]) for a in answers}) == 5
    for a in answers:
        assert CONTEXT[a["start"] : a["end"]] == a["answer"] and 0 <= a["score"] <= 1
    assert answers[0] == qa(question=QUESTION, context=CONTEXT)  # exact: the same forward, only top_k differs


def test_max_answer_len_bounds_the_span(qa):
    for a in qa(question=QUESTION, context=CONTEXT, top_k=10, max_answer_len=2):
        assert len(qa.tokenizer(a["answer"], add_special_tokens=False)["input_ids"]) <= 2


def test_long_context_is_covered_by_overlapping_windows(qa):
    long_context = " ".join(f"Sentence number {i} talks about item {i * 7}." for i in range(60)) + " " + CONTEXT
    windows = list(qa.preprocess({"question": QUESTION, "context": long_context}, max_seq_len=48, doc_stride=12))
    assert len(windows) > 5
    covered = np.zeros(len(long_context), dtype=bool)
    spans = []
    for w in windows:
        mask = w["context_mask"][0]
        offsets = w["offsets"][0][mask].tolist()
        spans.append((offsets[0][0], offsets[-1][1]))
        for s, e in offsets:
            covered[s:e] = True
    for (_, end), (next_start, _) in itertools.pairwise(spans):
        assert next_start < end  # neighbours overlap
    assert all(covered[i] for i, c in enumerate(long_context) if not c.isspace())

    answer = qa(question=QUESTION, context=long_context, max_seq_len=48, doc_stride=12)
    start, end, score = brute_force(qa, QUESTION, long_context, 48, 12, 15)
    assert (answer["start"], answer["end"]) == (start, end)
    assert long_context[answer["start"] : answer["end"]] == answer["answer"]
    assert answer["score"] == pytest.approx(score, rel=1e-4)


def test_impossible_answer_competes_when_asked(qa):
    answers = qa(question=QUESTION, context=CONTEXT, top_k=400, handle_impossible_answer=True)
    empty = [a for a in answers if a["answer"] == ""]
    assert len(empty) == 1 and empty[0]["start"] == 0 and empty[0]["end"] == 0
    assert 0 <= empty[0]["score"] <= 1
    assert all(a["answer"] for a in qa(question=QUESTION, context=CONTEXT, top_k=400))


def test_input_forms_and_batching_agree(qa):
    one = qa(question=QUESTION, context=CONTEXT)
    # exact below: each input form runs one question at a time (batch_size 1), the same path and shapes
    assert qa({"question": QUESTION, "context": CONTEXT}) == one
    assert qa(QUESTION, CONTEXT) == one
    other = {"question": "Where is the tower?", "context": CONTEXT}
    listed = qa([{"question": QUESTION, "context": CONTEXT}, other])
    assert listed[0] == one
    assert qa(question=[QUESTION, other["question"]], context=CONTEXT) == listed
    batched = qa([{"question": QUESTION, "context": CONTEXT}, other], batch_size=2)
    for a, b in zip(batched, listed):
        assert (a["start"], a["end"]) == (b["start"], b["end"]) and a["score"] == pytest.approx(b["score"], abs=1e-5)
    assert list(qa(iter([other]))) == [listed[1]]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"question": "", "context": CONTEXT}, "empty"),
        ({"question": QUESTION, "context": "   "}, "empty"),
        (
            {"question": "What is the name of the engineer who built it?", "context": "Gustave."},
            "shorter than the question",
        ),
        ({"question": QUESTION}, "both"),
    ],
)
def test_bad_inputs_are_clear_errors(qa, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        qa(**kwargs)


def test_question_too_long_for_the_window(qa):
    with pytest.raises(ConfigError, match="max_seq_len"):
        qa(question=QUESTION * 3, context=CONTEXT * 2, max_seq_len=16)
    with pytest.raises(ConfigError, match="question"):
        qa(["not a dict"])
    with pytest.raises(ConfigError, match="top_k"):
        qa(question=QUESTION, context=CONTEXT, top_k=0)


def test_impossible_answer_score_is_the_lowest_null_score_of_the_windows(qa, monkeypatch):
    """Like the reference: over overlapping windows the "no answer" score is the minimum of the windows' null
    scores (each window is a separate chance to find the answer), not the maximum or the last."""
    long_context = " ".join(f"Sentence number {i} talks about item {i * 7}." for i in range(30)) + " " + CONTEXT
    seen: list[float] = []
    original = type(qa)._window_spans

    def spy(self, window, top_k, max_answer_len):
        spans, null = original(self, window, top_k, max_answer_len)
        seen.append(null)
        return spans, null

    monkeypatch.setattr(type(qa), "_window_spans", spy)
    answers = qa(
        question=QUESTION,
        context=long_context,
        max_seq_len=48,
        doc_stride=12,
        top_k=1000,
        handle_impossible_answer=True,
    )
    assert len(seen) > 3 and min(seen) < max(seen)  # the windows disagree, so the choice matters
    (empty,) = [a for a in answers if a["answer"] == ""]
    assert empty["score"] == pytest.approx(min(seen), rel=1e-6)
