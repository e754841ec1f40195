"""``generate`` on encoder-decoder models (T5, BART, mBART, Marian) against the reference, on tiny random checkpoints.

The encoder runs once per call and the decoder starts from ``decoder_start_token_id``; greedy, beam
search (length penalty, several returned sequences, n-gram blocking, forced tokens), sampling,
assisted decoding, streamers and ``encoder_outputs=`` must give the reference's tokens (by the numeric
policy: rows may differ only after a near tie).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from microformers import GenerationError
from microformers_sdk.testing import assert_similar_generation
from parity.harness import (
    assert_generation_matches,
    generate_both,
    load_ours,
    load_reference,
    make_reference_checkpoint,
    padded_batch,
)

VOCAB = 96
SMALL = {"vocab_size": VOCAB, "d_model": 32}
BART_LIKE = {
    **SMALL,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 48,
    "decoder_ffn_dim": 48,
    "max_position_embeddings": 64,
}
FAMILIES = {
    "t5": (
        "T5Config",
        "T5ForConditionalGeneration",
        {**SMALL, "d_kv": 8, "d_ff": 48, "num_layers": 2, "num_heads": 4, "decoder_start_token_id": 0},
    ),
    "t5-gated": (
        "T5Config",
        "T5ForConditionalGeneration",
        {
            **SMALL,
            "d_kv": 8,
            "d_ff": 48,
            "num_layers": 2,
            "num_heads": 4,
            "feed_forward_proj": "gated-gelu",
            "tie_word_embeddings": False,
            "decoder_start_token_id": 0,
        },
    ),
    "bart": ("BartConfig", "BartForConditionalGeneration", {**BART_LIKE, "decoder_layers": 1}),
    "mbart": ("MBartConfig", "MBartForConditionalGeneration", BART_LIKE),
    "marian": ("MarianConfig", "MarianMTModel", {**BART_LIKE, "pad_token_id": 0, "decoder_start_token_id": 0}),
}


FOLDERS: dict[str, Any] = {}  # family -> checkpoint folder, for tests that reload the reference differently


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def pair(request: Any, tmp_path_factory: Any) -> tuple[Any, Any, int]:
    config_name, model_name, kwargs = FAMILIES[request.param]
    folder, _ = make_reference_checkpoint(config_name, model_name, tmp_path_factory.mktemp(request.param), **kwargs)
    # reloaded: what is not saved (Marian's sinusoidal positions) is computed again, as ours computes it
    reference = load_reference(folder, "AutoModelForSeq2SeqLM")
    ours = load_ours(folder, "AutoModelForSeq2SeqLM")
    FOLDERS[request.param] = folder
    return ours, reference, reference.config.pad_token_id


def _inputs(pad: int) -> dict[str, torch.Tensor]:
    # encoders read right-padded batches
    ids, mask = padded_batch(VOCAB, [7, 4, 6], pad_token_id=pad, seed=3, side="right")
    ids = ids.clamp(min=3).masked_fill(mask == 0, pad)  # no special token inside the text
    return {"input_ids": ids, "attention_mask": mask}


def _both(pair: tuple[Any, Any, int], **settings: Any) -> tuple[Any, Any]:
    ours, reference, pad = pair
    inputs = _inputs(pad)
    return generate_both(ours, reference, inputs.pop("input_ids"), **inputs, **settings)


def test_greedy_search_matches_the_reference_on_a_padded_batch(pair: Any) -> None:
    got, want = _both(pair, max_new_tokens=9, do_sample=False)
    assert got.sequences.shape[0] == 3
    assert_generation_matches(got, want, prompt_length=1, what="greedy")


def test_default_length_is_twenty_new_tokens_after_the_start_token(pair: Any) -> None:
    ours, reference, pad = pair
    inputs = _inputs(pad)
    with torch.no_grad():
        got = ours.generate(**inputs, eos_token_id=None, min_length=0)
        want = reference.generate(**inputs, eos_token_id=None, min_length=0)
    assert got.shape == want.shape


def test_beam_search_with_penalties_and_several_returned_sequences_matches_the_reference(pair: Any) -> None:
    got, want = _both(
        pair, max_new_tokens=7, num_beams=3, num_return_sequences=2, length_penalty=0.7, no_repeat_ngram_size=2
    )
    assert got.sequences.shape[0] == 6
    assert_generation_matches(got, want, prompt_length=1, what="beam search")


def test_forced_first_and_last_tokens_match_the_reference(pair: Any) -> None:
    got, want = _both(pair, max_new_tokens=6, forced_bos_token_id=5, forced_eos_token_id=7, eos_token_id=7)
    assert bool((got.sequences[:, 1] == 5).all())
    assert_generation_matches(got, want, prompt_length=1, what="forced tokens")


def test_processors_reading_the_encoder_input_match_the_reference(pair: Any) -> None:
    got, want = _both(pair, max_new_tokens=6, encoder_repetition_penalty=1.5, encoder_no_repeat_ngram_size=2)
    assert_generation_matches(got, want, prompt_length=1, what="encoder_* processors")
    got, want = _both(pair, max_new_tokens=6, num_beams=2, encoder_no_repeat_ngram_size=2)
    assert_generation_matches(got, want, prompt_length=1, what="encoder_no_repeat_ngram_size with beams")


def test_sampling_with_a_seed_matches_the_reference(pair: Any) -> None:
    ours, reference, pad = pair
    inputs = _inputs(pad)
    settings = {"max_new_tokens": 6, "do_sample": True, "top_k": 20, "temperature": 0.9}
    with torch.no_grad():
        torch.manual_seed(11)
        got = ours.generate(**inputs, **settings, output_scores=True, return_dict_in_generate=True)
        torch.manual_seed(11)
        want = reference.generate(**inputs, **settings, output_scores=True, return_dict_in_generate=True)
    assert_generation_matches(got, want, prompt_length=1, what="sampling")


def test_given_encoder_outputs_and_decoder_prefix_are_used(pair: Any) -> None:
    ours, reference, pad = pair
    inputs = _inputs(pad)
    prefix = torch.full((3, 2), 9, dtype=torch.long)  # no start token: generate puts it in front
    with torch.no_grad():
        encoded = ours.get_encoder()(**inputs, return_dict=True)
        got = ours.generate(
            encoder_outputs=encoded, attention_mask=inputs["attention_mask"], decoder_input_ids=prefix, max_new_tokens=5
        )
        want = reference.generate(**inputs, decoder_input_ids=prefix, max_new_tokens=5)
        plain = ours.generate(**inputs, decoder_input_ids=prefix, max_new_tokens=5)
    assert got.shape[1] <= 1 + 2 + 5
    start = reference.generation_config.decoder_start_token_id
    start = reference.generation_config.bos_token_id if start is None else start
    assert bool((got[:, 0] == start).all()) and bool((got[:, 1:3] == 9).all())
    # exact: the same model on the same encoder states through the same code path
    assert torch.equal(got, plain)
    assert got.shape == want.shape


def test_scores_attentions_and_hidden_states_come_back_like_the_reference(pair: Any, request: Any) -> None:
    ours, reference, pad = pair
    family = request.node.callspec.params["pair"]
    # the reference returns attention weights only from its eager attention
    reference = load_reference(FOLDERS[family], "AutoModelForSeq2SeqLM", attn_implementation="eager")
    inputs = _inputs(pad)
    settings = {
        "max_new_tokens": 3,
        "output_scores": True,
        "output_attentions": True,
        "output_hidden_states": True,
        "return_dict_in_generate": True,
    }
    with torch.no_grad():
        got = ours.generate(**inputs, **settings)
        want = reference.generate(**inputs, **settings)
    assert type(got).__name__ == "GenerateEncoderDecoderOutput"
    for name in ("encoder_attentions", "encoder_hidden_states"):
        assert len(got[name]) == len(want[name]), name
        for ours_layer, their_layer in zip(got[name], want[name]):
            assert ours_layer.shape == their_layer.shape, name
    for name in ("decoder_attentions", "cross_attentions", "decoder_hidden_states"):
        assert len(got[name]) == len(want[name]), name
        assert len(got[name][0]) == len(want[name][0]), name
        assert got[name][-1][-1].shape == want[name][-1][-1].shape, name


def test_beam_search_output_carries_beam_indices_and_sequence_scores(pair: Any) -> None:
    got, want = _both(pair, max_new_tokens=5, num_beams=2)
    assert type(got).__name__ == "GenerateBeamEncoderDecoderOutput"
    assert got.beam_indices.shape[0] == want.beam_indices.shape[0]
    assert_generation_matches(got, want, prompt_length=1, what="beam output")


def test_assisted_decoding_with_the_model_as_its_own_assistant_equals_greedy(pair: Any) -> None:
    ours, _, pad = pair
    ids = _inputs(pad)["input_ids"][:1]
    with torch.no_grad():
        greedy = ours.generate(ids, max_new_tokens=8)
        assisted = ours.generate(ids, max_new_tokens=8, assistant_model=ours)
        lookup = ours.generate(ids, max_new_tokens=8, prompt_lookup_num_tokens=3)
    # exact: assisted decoding keeps only tokens the model's own greedy choice confirms, same kernels
    assert torch.equal(assisted, greedy)
    assert torch.equal(lookup, greedy)


def test_static_cache_gives_the_same_tokens_as_the_dynamic_one(pair: Any) -> None:
    ours, _, pad = pair
    inputs = _inputs(pad)
    with torch.no_grad():
        dynamic = ours.generate(**inputs, max_new_tokens=6, output_scores=True, return_dict_in_generate=True)
        static = ours.generate(
            **inputs, max_new_tokens=6, cache_implementation="static", output_scores=True, return_dict_in_generate=True
        )
    assert_generation_matches(static, dynamic, prompt_length=1, what="static cache")


def test_streamer_receives_the_start_token_then_each_new_token(pair: Any) -> None:
    ours, _, pad = pair
    ids = _inputs(pad)["input_ids"][:1]
    received: list[torch.Tensor] = []

    class Collect:
        def put(self, value: torch.Tensor) -> None:
            received.append(value)

        def end(self) -> None:
            received.append(torch.tensor([-1]))

    with torch.no_grad():
        out = ours.generate(ids, max_new_tokens=4, streamer=Collect())
    streamed = torch.cat([t.reshape(-1) for t in received[:-1]])
    # exact: the streamer is handed the very tokens written into the output
    assert torch.equal(streamed, out[0])


def test_encoder_decoder_generate_without_encoder_input_is_refused(pair: Any) -> None:
    ours, _, _ = pair
    with pytest.raises(GenerationError, match="encoder"):
        ours.generate(max_new_tokens=3)


def test_t5_with_a_deeper_decoder_than_encoder_generates_what_its_forward_predicts(tmp_path: Any) -> None:
    # The reference's generate fails when num_decoder_layers differs from num_layers, so the oracle here
    # is its forward pass: a greedy loop over full (uncached) forwards of the reference model.
    config_name, model_name, kwargs = FAMILIES["t5-gated"]
    folder, reference = make_reference_checkpoint(
        config_name, model_name, tmp_path, **{**kwargs, "num_decoder_layers": 3}
    )
    ours = load_ours(folder, "AutoModelForSeq2SeqLM")
    assert len(ours.get_decoder().block) == 3 and len(ours.get_encoder().block) == 2
    inputs = _inputs(0)
    with torch.no_grad():
        got = ours.generate(
            **inputs, max_new_tokens=6, eos_token_id=None, output_scores=True, return_dict_in_generate=True
        )
        decoded = torch.zeros((3, 1), dtype=torch.long)
        step_scores = []
        for _ in range(6):
            logits = reference(**inputs, decoder_input_ids=decoded, use_cache=False).logits[:, -1]
            step_scores.append(logits)
            decoded = torch.cat((decoded, logits.argmax(-1, keepdim=True)), dim=1)
        beam = {"max_new_tokens": 5, "num_beams": 3, "eos_token_id": None, "output_scores": True}
        cached = ours.generate(**inputs, **beam, return_dict_in_generate=True)
        uncached = ours.generate(**inputs, **beam, return_dict_in_generate=True, use_cache=False)
    assert_similar_generation(got.sequences, decoded, tuple(step_scores), prompt_length=1)
    assert_generation_matches(cached, uncached, prompt_length=1, what="beam search with a deeper decoder")


def test_encoder_input_given_twice_or_as_embeddings_is_refused(pair: Any) -> None:
    ours, _, pad = pair
    ids = _inputs(pad)["input_ids"]
    with pytest.raises(GenerationError, match="both inputs and input_ids"):
        ours.generate(ids, input_ids=ids, max_new_tokens=2)
    with pytest.raises(GenerationError, match="inputs_embeds"):
        ours.generate(inputs_embeds=torch.zeros(1, 3, 32), max_new_tokens=2)
