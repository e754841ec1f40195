"""Stopping: several eos ids, stop strings, max_new_tokens; finished rows are padded."""

from __future__ import annotations

import threading

import pytest
import torch
from generation_similarity import assert_same_generation

from microformers import GenerationError, TextIteratorStreamer
from microformers_generation import EosTokenCriteria, MaxLengthCriteria, MaxTimeCriteria, StopStringCriteria


def test_max_new_tokens_gives_exactly_that_many(model, prompts):
    out = model.generate(**prompts["batch"], max_new_tokens=9)
    assert out.shape == (3, 8 + 9)


def test_any_of_several_eos_ids_stops_and_finished_rows_get_pad(model, reference_model, prompts):
    free = model.generate(**prompts["batch"], max_new_tokens=12)[:, 8:]
    eos = [int(free[0, 2]), int(free[2, 4])]  # tokens rows 0 and 2 would produce
    kwargs = {"max_new_tokens": 12, "eos_token_id": eos, "pad_token_id": 0}
    scored = model.generate(**prompts["batch"], **kwargs, return_dict_in_generate=True, output_scores=True)
    expected = reference_model.generate(**prompts["batch"], **kwargs, return_dict_in_generate=True, output_scores=True)
    # two libraries' kernels: the same tokens up to a near tie
    assert_same_generation(scored, expected, prompt_length=8, pad_token_id=0)
    out = scored.sequences
    for row in out[:, 8:].tolist():
        hits = [i for i, token in enumerate(row) if token in eos]
        if hits:
            assert all(token == 0 for token in row[hits[0] + 1 :])  # pad after the first eos
    assert any(row[-1] == 0 for row in out[:, 8:].tolist())
    first_eos = [next(i for i, t in enumerate(row) if t in eos) for row in out[[0, 2], 8:].tolist()]
    assert first_eos[0] <= 2 and first_eos[1] <= 4


def test_generation_ends_early_when_all_rows_finish(model, prompts):
    free = model.generate(**prompts["single"], max_new_tokens=12)[0, 8:]
    out = model.generate(**prompts["single"], max_new_tokens=12, eos_token_id=int(free[3]))
    assert out.shape[1] <= 8 + 4
    assert int(out[0, -1]) == int(free[3])


def test_stop_strings_stop_at_the_string(model, prompts, char_tokenizer):
    free = model.generate(**prompts["single"], max_new_tokens=12)[0, 8:]
    text = char_tokenizer.decode(free)
    stop = text[4:6]
    out = model.generate(
        **prompts["single"], max_new_tokens=12, stop_strings=[stop, "never seen"], tokenizer=char_tokenizer
    )
    generated = char_tokenizer.decode(out[0, 8:])
    assert generated.endswith(stop)
    assert stop not in generated[:-1]
    assert len(generated) <= 6


def test_stop_strings_need_the_tokenizer(model, prompts):
    with pytest.raises(GenerationError, match="tokenizer="):
        model.generate(**prompts["single"], max_new_tokens=4, stop_strings="x")


def test_stop_string_may_span_tokens_and_overhang(char_tokenizer):
    alphabet = char_tokenizer.alphabet
    ids = [[alphabet.index(c) + 3 for c in word] for word in ("xxstop", "xstopx", "stopxx", "xxxsto")]
    criterion = StopStringCriteria(char_tokenizer, ["stop"])
    done = criterion(torch.tensor(ids), None)
    assert done.tolist() == [True, False, False, False]

    class WordTokenizer:
        words = ["", "la", "stopper", "st", "op", "s"]

        def decode(self, ids, **kwargs):
            return "".join(self.words[i] for i in ids)

    words = StopStringCriteria(WordTokenizer(), "stop")
    assert words(torch.tensor([[1, 2], [3, 4], [2, 5]]), None).tolist() == [True, True, False]


def test_simple_criteria():
    ids = torch.tensor([[5, 6, 2], [5, 6, 7]])
    assert EosTokenCriteria([9, 2])(ids).tolist() == [True, False]
    assert MaxLengthCriteria(3)(ids).tolist() == [True, True]
    assert MaxLengthCriteria(4)(ids).tolist() == [False, False]
    assert MaxTimeCriteria(0.001, initial_timestamp=0.0)(ids).tolist() == [True, True]
    assert MaxTimeCriteria(1000.0)(ids).tolist() == [False, False]


def test_max_time_stops_generation(model, prompts):
    out = model.generate(**prompts["single"], max_new_tokens=50, max_time=1e-9)
    assert out.shape[1] == 8 + 1


def test_iterator_streamer_gets_the_generated_text(model, prompts, char_tokenizer):
    streamer = TextIteratorStreamer(char_tokenizer, skip_prompt=True, timeout=60)
    result = {}
    worker = threading.Thread(
        target=lambda: result.update(out=model.generate(**prompts["single"], max_new_tokens=10, streamer=streamer))
    )
    worker.start()
    text = "".join(streamer)
    worker.join()
    assert text == char_tokenizer.decode(result["out"][0, 8:])


@pytest.mark.parametrize("max_time", [0, -1.5, float("nan")])
def test_max_time_must_be_a_positive_number_of_seconds(max_time: float) -> None:
    with pytest.raises(GenerationError, match=r"max_time=.* must be a positive number of seconds"):
        MaxTimeCriteria(max_time)
