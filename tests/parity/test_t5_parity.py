"""T5, Flan-T5 (v1.1), mT5 and UMT5 against the reference implementation on tiny random checkpoints.

Logits, losses, attentions and hidden states on padded batches, cached decoding, checkpoints both ways, the
encoder-only and task heads, and encoder/decoder stacks of different depths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from microformers_sdk.testing import assert_close
from parity.harness import (
    assert_generation_matches,
    generate_both,
    load_ours,
    load_reference,
    make_reference_checkpoint,
    padded_batch,
    randomize_weights,
)

TINY: dict[str, Any] = {
    "vocab_size": 128,
    "d_model": 32,
    "d_kv": 8,
    "d_ff": 64,
    "num_layers": 2,
    "num_heads": 4,
    "relative_attention_num_buckets": 8,
    "relative_attention_max_distance": 20,
    "decoder_start_token_id": 0,
}

VARIANTS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "t5-v1.0-relu": ("T5Config", "T5ForConditionalGeneration", {}),
    "t5-v1.1-gated-gelu-untied": (
        "T5Config", "T5ForConditionalGeneration", {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
    ),
    "mt5": ("MT5Config", "MT5ForConditionalGeneration", {}),
    "umt5": ("UMT5Config", "UMT5ForConditionalGeneration", {}),
    "deeper-decoder": ("T5Config", "T5ForConditionalGeneration", {"num_decoder_layers": 3}),
    "shallower-decoder": ("T5Config", "T5ForConditionalGeneration", {"num_decoder_layers": 1}),
}

SEQ_FIELDS = ("encoder_attentions", "decoder_attentions", "cross_attentions", "encoder_hidden_states",
              "decoder_hidden_states")  # fmt: skip


def _batch(vocab_size: int) -> dict[str, torch.Tensor]:
    """Encoder inputs padded on the right and left, labels padded with -100."""
    ids, mask = padded_batch(vocab_size, [9, 5, 7], side="right", seed=1)
    targets, target_mask = padded_batch(vocab_size, [6, 3, 4], side="right", seed=2)
    return {"input_ids": ids, "attention_mask": mask, "labels": targets.masked_fill(target_mask == 0, -100)}


def _variant(name: str, tmp_path: Path) -> tuple[Path, Any, Any]:
    config_name, model_name, extra = VARIANTS[name]
    folder, reference = make_reference_checkpoint(config_name, model_name, tmp_path, **TINY, **extra)
    return folder, reference, load_ours(folder, "AutoModelForSeq2SeqLM")


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_logits_and_loss_match_on_padded_batches(name: str, tmp_path: Path) -> None:
    _, reference, ours = _variant(name, tmp_path)
    batch = _batch(TINY["vocab_size"])
    with torch.no_grad():
        got, want = ours(**batch), reference(**batch)
    assert_close(got.logits, want.logits, atol=1e-4, rtol=0, msg=f"{name} logits")
    assert_close(got.loss, want.loss, atol=1e-4, rtol=0, msg=f"{name} loss")
    assert_close(got.encoder_last_hidden_state, want.encoder_last_hidden_state, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["t5-v1.0-relu", "umt5", "deeper-decoder"])
def test_attentions_and_hidden_states_match(name: str, tmp_path: Path) -> None:
    _, reference, ours = _variant(name, tmp_path)
    reference.set_attn_implementation("eager")  # the reference returns probabilities only from eager attention
    batch = _batch(TINY["vocab_size"])
    with torch.no_grad():
        got = ours(**batch, output_attentions=True, output_hidden_states=True)
        want = reference(**batch, output_attentions=True, output_hidden_states=True)
    for field in SEQ_FIELDS:
        assert len(got[field]) == len(want[field]), f"{field}: {len(got[field])} tensors, want {len(want[field])}"
        for index, (mine, theirs) in enumerate(zip(got[field], want[field])):
            assert_close(mine, theirs, atol=1e-4, rtol=0, msg=f"{field}[{index}]")


def test_decoder_attention_mask_matches(tmp_path: Path) -> None:
    _, reference, ours = _variant("t5-v1.0-relu", tmp_path)
    batch = _batch(TINY["vocab_size"])
    decoder_input_ids, decoder_mask = padded_batch(TINY["vocab_size"], [6, 3, 4], side="right", seed=3)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
              "decoder_input_ids": decoder_input_ids, "decoder_attention_mask": decoder_mask}  # fmt: skip
    with torch.no_grad():
        got, want = ours(**inputs).logits, reference(**inputs).logits
    real = decoder_mask.bool()
    assert_close(got[real], want[real], atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["t5-v1.0-relu", "t5-v1.1-gated-gelu-untied", "umt5", "shallower-decoder"])
def test_cached_decoding_step_by_step_equals_full_forward(name: str, tmp_path: Path) -> None:
    """The generation contract: the encoder once, then one new decoder token per call with the returned cache."""
    _, reference, ours = _variant(name, tmp_path)
    ids, mask = padded_batch(TINY["vocab_size"], [8, 4], side="left", seed=4)
    decoder_input_ids, _ = padded_batch(TINY["vocab_size"], [7, 7], seed=5)
    with torch.no_grad():
        want = reference(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids).logits
        encoder_outputs = ours.get_encoder()(input_ids=ids, attention_mask=mask, return_dict=True)
        cache, steps = None, []
        for position in range(decoder_input_ids.shape[1]):
            step = ours(
                attention_mask=mask, decoder_input_ids=decoder_input_ids[:, position : position + 1],
                encoder_outputs=encoder_outputs, past_key_values=cache, use_cache=True, return_dict=True,
            )  # fmt: skip
            cache = step.past_key_values
            steps.append(step.logits)
    assert_close(torch.cat(steps, dim=1), want, atol=1e-4, rtol=0, msg="cached decoding vs reference full forward")
    assert cache.get_seq_length() == decoder_input_ids.shape[1]
    assert len(cache) == ours.config.num_decoder_layers


def test_greedy_decoding_with_different_depths_matches_reference_forward(tmp_path: Path) -> None:
    """num_decoder_layers != num_layers through the cached decoding loop (the reference's generate fails there)."""
    _, reference, ours = _variant("deeper-decoder", tmp_path)
    ids, mask = padded_batch(TINY["vocab_size"], [6, 3], side="right", seed=6)
    with torch.no_grad():
        encoder_outputs = ours.get_encoder()(input_ids=ids, attention_mask=mask, return_dict=True)
        tokens = torch.zeros(2, 1, dtype=torch.long)
        cache, new = None, tokens
        for _ in range(6):
            step = ours(attention_mask=mask, decoder_input_ids=new, encoder_outputs=encoder_outputs,
                        past_key_values=cache, use_cache=True, return_dict=True)  # fmt: skip
            cache = step.past_key_values
            new = step.logits[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, new], dim=1)
        want = reference(input_ids=ids, attention_mask=mask, decoder_input_ids=tokens[:, :-1]).logits
    assert torch.equal(want.argmax(-1), tokens[:, 1:]), "greedy tokens differ from the reference's argmax"


@pytest.mark.parametrize("name", ["t5-v1.0-relu", "t5-v1.1-gated-gelu-untied", "mt5", "shallower-decoder"])
def test_our_checkpoint_loads_in_the_reference(name: str, tmp_path: Path) -> None:
    """Ours built from a config (untied lm_head where asked), saved; the reference loads it to the same numbers."""
    import microformers

    config_name, model_name, extra = VARIANTS[name]
    config = microformers.AutoConfig.for_model(config_name.removesuffix("Config").lower(), **TINY, **extra)
    torch.manual_seed(0)
    ours = microformers.AutoModelForSeq2SeqLM.from_config(config)
    randomize_weights(ours)
    ours.eval().save_pretrained(tmp_path / "ours")
    reference = load_reference(tmp_path / "ours", model_name)
    if extra.get("tie_word_embeddings") is False:
        assert not torch.equal(reference.lm_head.weight, reference.shared.weight), "the reference tied our lm_head"
    batch = _batch(TINY["vocab_size"])
    with torch.no_grad():
        got, want = ours(**batch), reference(**batch)
    assert_close(got.logits, want.logits, atol=1e-4, rtol=0)
    assert_close(got.loss, want.loss, atol=1e-4, rtol=0)
    theirs = {k: v for k, v in reference.state_dict().items() if not k.endswith("embed_tokens.weight")}
    mine = {k: v for k, v in ours.state_dict().items() if not k.endswith("embed_tokens.weight")}
    assert set(mine) == set(theirs)
    for key, tensor in mine.items():
        assert torch.equal(tensor, theirs[key]), key


def test_reference_checkpoint_with_its_own_lm_head_loads_here(tmp_path: Path) -> None:
    """A Flan-T5-like file (lm_head.weight stored apart from shared.weight) keeps its lm_head here too."""
    folder, reference = make_reference_checkpoint(
        "T5Config", "T5ForConditionalGeneration", tmp_path, **TINY, feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
    )  # fmt: skip
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    tensors["lm_head.weight"] = torch.randn(tensors["shared.weight"].shape, generator=torch.Generator().manual_seed(3))
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    reference = load_reference(folder, "T5ForConditionalGeneration")
    ours = load_ours(folder, "AutoModelForSeq2SeqLM")
    assert torch.equal(ours.lm_head.weight, tensors["lm_head.weight"])
    assert torch.equal(ours.shared.weight, tensors["shared.weight"])
    batch = _batch(TINY["vocab_size"])
    with torch.no_grad():
        assert_close(ours(**batch).logits, reference(**batch).logits, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("config_name", "model_name", "auto_name"),
    [
        ("T5Config", "T5Model", "AutoModel"),
        ("T5Config", "T5EncoderModel", "AutoModelForTextEncoding"),
        ("MT5Config", "MT5EncoderModel", "AutoModelForTextEncoding"),
        ("T5Config", "T5ForTokenClassification", "AutoModelForTokenClassification"),
        ("T5Config", "T5ForQuestionAnswering", "AutoModelForQuestionAnswering"),
    ],
)
def test_other_heads_match(config_name: str, model_name: str, auto_name: str, tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint(config_name, model_name, tmp_path, **TINY, num_labels=2)
    if auto_name == "AutoModelForTextEncoding":  # the reference's Auto class for T5EncoderModel; not a kernel name
        from microformers.auto import auto_class

        ours = auto_class(auto_name).from_pretrained(folder).eval()
    else:
        ours = load_ours(folder, auto_name)
    assert type(ours).__name__ == model_name
    batch = _batch(TINY["vocab_size"])
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    if model_name in ("T5Model",):
        inputs["decoder_input_ids"] = batch["labels"].clamp(min=0)
    with torch.no_grad():
        got, want = ours(**inputs), reference(**inputs)
    for field in ("last_hidden_state", "logits", "start_logits", "end_logits", "encoder_last_hidden_state"):
        if want.get(field) is not None:
            assert_close(got[field], want[field], atol=1e-4, rtol=0, msg=field)


def test_sequence_classification_matches(tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint(
        "T5Config", "T5ForSequenceClassification", tmp_path, **TINY, num_labels=3
    )
    ours = load_ours(folder, "AutoModelForSequenceClassification")
    ids, mask = padded_batch(TINY["vocab_size"], [7, 5, 6], side="right", seed=7)
    ids = ids.masked_fill(ids == 1, 2)
    ids[torch.arange(3), mask.sum(1) - 1] = 1  # one eos per row, at its end
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        got = ours(input_ids=ids, attention_mask=mask, labels=labels)
        want = reference(input_ids=ids, attention_mask=mask, labels=labels)
    assert_close(got.logits, want.logits, atol=1e-4, rtol=0)
    assert_close(got.loss, want.loss, atol=1e-4, rtol=0)


def test_encoder_model_loads_a_full_checkpoint_through_architectures(tmp_path: Path) -> None:
    """A T5EncoderModel folder resolves by config.architectures; a full T5 file loads into the encoder alone."""
    import microformers
    from microformers.plugins import registry

    folder, reference = make_reference_checkpoint("T5Config", "T5ForConditionalGeneration", tmp_path, **TINY)
    encoder_class = registry.get("architectures", "T5EncoderModel").load()
    encoder = encoder_class.from_pretrained(folder)
    batch = _batch(TINY["vocab_size"])
    with torch.no_grad():
        want = reference.get_encoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        got = encoder.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    assert_close(got.last_hidden_state, want.last_hidden_state, atol=1e-4, rtol=0)
    encoder.save_pretrained(tmp_path / "encoder")
    assert microformers.AutoConfig.from_pretrained(tmp_path / "encoder").architectures == ["T5EncoderModel"]
    reloaded = load_reference(tmp_path / "encoder", "T5EncoderModel")
    with torch.no_grad():
        again = reloaded(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    assert_close(again.last_hidden_state, want.last_hidden_state, atol=1e-4, rtol=0)


GENERATION_VARIANTS = ["t5-v1.0-relu", "t5-v1.1-gated-gelu-untied", "mt5", "umt5"]


def _prompts() -> dict[str, torch.Tensor]:
    ids, mask = padded_batch(TINY["vocab_size"], [7, 4, 6], side="right", seed=8)
    return {"input_ids": ids.clamp(min=3).masked_fill(mask == 0, 0), "attention_mask": mask}


@pytest.mark.parametrize("name", GENERATION_VARIANTS)
@pytest.mark.parametrize("settings", [{"num_beams": 1}, {"num_beams": 3, "num_return_sequences": 2}],
                         ids=["greedy", "beam"])  # fmt: skip
def test_generate_matches_the_reference(name: str, settings: dict[str, Any], tmp_path: Path) -> None:
    _, reference, ours = _variant(name, tmp_path)
    prompts = _prompts()
    common = {"attention_mask": prompts["attention_mask"], "max_new_tokens": 8, "do_sample": False,
              "eos_token_id": None, **settings}  # fmt: skip
    got, want = generate_both(ours, reference, prompts["input_ids"], **common)
    assert_generation_matches(got, want, prompt_length=1, what=f"{name} {settings}")


def test_generate_with_different_encoder_and_decoder_depths(tmp_path: Path) -> None:
    """Greedy and beam generate run with num_decoder_layers != num_layers; greedy equals a cached argmax loop."""
    _, _, ours = _variant("deeper-decoder", tmp_path)
    prompts = _prompts()
    with torch.no_grad():
        greedy = ours.generate(**prompts, max_new_tokens=6, do_sample=False, eos_token_id=None)
        beams = ours.generate(**prompts, max_new_tokens=6, num_beams=3, do_sample=False, eos_token_id=None)
        encoder_outputs = ours.get_encoder()(**prompts, return_dict=True)
        tokens = torch.zeros(3, 1, dtype=torch.long)
        cache, new = None, tokens
        for _ in range(6):
            step = ours(attention_mask=prompts["attention_mask"], decoder_input_ids=new, encoder_outputs=encoder_outputs,
                        past_key_values=cache, use_cache=True)  # fmt: skip
            cache, new = step.past_key_values, step.logits[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, new], dim=1)
    assert torch.equal(greedy, tokens)
    assert beams.shape == (3, 7)
