"""BART and mBART (microformers-bart) against the reference on tiny random checkpoints, both directions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from microformers_sdk.testing import assert_close as policy_close
from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from parity.harness import (
    assert_close,
    assert_generation_matches,
    assert_same_state_dict,
    generate_both,
    load_ours,
    load_reference,
    make_reference_checkpoint,
)

pytest.importorskip("transformers")

PAD, EOS = 1, 2
TINY: dict[str, Any] = {
    "vocab_size": 150,
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 48,
    "decoder_ffn_dim": 40,
    "max_position_embeddings": 64,
    "pad_token_id": PAD,
    "attn_implementation": "eager",
}
DEEPER_DECODER = {**TINY, "encoder_layers": 1, "decoder_layers": 3, "decoder_attention_heads": 2}
PREFIXES = ("Bart", "MBart")

# head suffix -> (our Auto class, compared output fields)
HEADS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Model": ("AutoModel", ("last_hidden_state", "encoder_last_hidden_state")),
    "ForConditionalGeneration": ("AutoModelForSeq2SeqLM", ("logits", "encoder_last_hidden_state")),
    "ForSequenceClassification": ("AutoModelForSequenceClassification", ("logits",)),
    "ForQuestionAnswering": ("AutoModelForQuestionAnswering", ("start_logits", "end_logits")),
}


def source_batch(lengths: list[int], seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """``<s> ... </s>`` rows (one eos each, last real token), right-padded with ``PAD``."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        real = torch.randint(3, TINY["vocab_size"], (length,), generator=generator)
        real[0], real[-1] = 0, EOS
        ids[row, :length], mask[row, :length] = real, 1
    return ids, mask


def target_batch(batch: int, length: int, seed: int = 5) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, TINY["vocab_size"], (batch, length), generator=generator)


def both(prefix: str, head: str, tmp_path: Path, **config: Any) -> tuple[Any, Any]:
    folder, reference = make_reference_checkpoint(f"{prefix}Config", f"{prefix}{head}", tmp_path, **{**TINY, **config})
    return load_ours(folder, HEADS[head][0]), reference


def labels_for(head: str, batch: int, target: torch.Tensor) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    if head == "ForConditionalGeneration":
        labels = target.clone()
        labels[0, -2:] = -100
        return {"labels": labels}
    if head == "ForSequenceClassification":
        return {"labels": torch.randint(0, 3, (batch,), generator=generator)}
    if head == "ForQuestionAnswering":
        return {
            "start_positions": torch.randint(0, 6, (batch,), generator=generator),
            "end_positions": torch.randint(0, 6, (batch,), generator=generator),
        }
    return {}


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("head", list(HEADS))
def test_outputs_and_loss_match_on_a_padded_batch(prefix: str, head: str, tmp_path: Path) -> None:
    ours, reference = both(prefix, head, tmp_path)
    ids, mask = source_batch([9, 6, 3])
    decoder_ids = target_batch(3, 6)
    inputs = {"input_ids": ids, "attention_mask": mask}
    if head != "ForSequenceClassification":  # the classifier reads input_ids shifted (denoising)
        inputs["decoder_input_ids"] = decoder_ids
    labels = labels_for(head, 3, decoder_ids)
    with torch.no_grad():
        got, want = ours(**inputs, **labels), reference(**inputs, **labels)
    for field in HEADS[head][1]:
        rows = mask if field == "encoder_last_hidden_state" else None
        assert_close(got[field], want[field], atol=1e-4, what=field, mask=rows)
    if labels:
        policy_close(got.loss, want.loss, atol=1e-4, msg="loss")


@pytest.mark.parametrize("prefix", PREFIXES)
def test_attentions_hidden_states_and_cross_attentions_match(prefix: str, tmp_path: Path) -> None:
    ours, reference = both(prefix, "ForConditionalGeneration", tmp_path, **DEEPER_DECODER)
    ids, mask = source_batch([8, 5])
    decoder_ids = target_batch(2, 4)
    settings = {"output_attentions": True, "output_hidden_states": True}
    with torch.no_grad():
        got = ours(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, **settings)
        want = reference(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, **settings)
    for field in ("encoder_hidden_states", "encoder_attentions", "decoder_hidden_states", "decoder_attentions",
                  "cross_attentions"):  # fmt: skip
        assert len(got[field]) == len(want[field]), field
        for index, (mine, theirs) in enumerate(zip(got[field], want[field])):
            assert_close(mine, theirs, atol=1e-4, what=f"{field}[{index}]")


@pytest.mark.parametrize("prefix", PREFIXES)
def test_labels_alone_shift_like_the_reference(prefix: str, tmp_path: Path) -> None:
    """Without decoder inputs the labels are shifted right (mBART: the language code wraps to the front)."""
    ours, reference = both(prefix, "ForConditionalGeneration", tmp_path)
    ids, mask = source_batch([7, 4])
    labels = target_batch(2, 5)
    labels[1, 3:] = -100
    with torch.no_grad():
        got, want = ours(input_ids=ids, attention_mask=mask, labels=labels), reference(
            input_ids=ids, attention_mask=mask, labels=labels
        )
    assert_close(got.logits, want.logits, atol=1e-4)
    policy_close(got.loss, want.loss, atol=1e-4, msg="loss")
    assert torch.equal(ours.prepare_decoder_input_ids_from_labels(labels),
                       reference.prepare_decoder_input_ids_from_labels(labels))  # fmt: skip


@pytest.mark.parametrize("prefix", PREFIXES)
def test_incremental_decoding_with_the_cache_matches_the_reference(prefix: str, tmp_path: Path) -> None:
    """Encoder once, then one decoder token at a time through the returned EncoderDecoderCache (generate's calls)."""
    ours, reference = both(prefix, "ForConditionalGeneration", tmp_path, **DEEPER_DECODER)
    ids, mask = source_batch([9, 4])
    decoder_ids = target_batch(2, 5)
    with torch.no_grad():
        want = reference(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, use_cache=False).logits
        encoded = ours.get_encoder()(input_ids=ids, attention_mask=mask, return_dict=True)
        cache, steps = None, []
        for position in range(decoder_ids.shape[1]):
            step = ours(
                attention_mask=mask, decoder_input_ids=decoder_ids[:, position : position + 1],
                encoder_outputs=encoded, past_key_values=cache, use_cache=True, return_dict=True,
            )  # fmt: skip
            cache = step.past_key_values
            steps.append(step.logits)
    assert type(cache).__name__ == "EncoderDecoderCache"
    assert cache.get_seq_length() == decoder_ids.shape[1]
    assert_close(torch.cat(steps, dim=1), want, atol=1e-4, what="cached decoding")


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("head", list(HEADS))
def test_reference_checkpoints_load_here_and_ours_load_there(prefix: str, head: str, tmp_path: Path) -> None:
    ours, reference = both(prefix, head, tmp_path)
    saved = tmp_path / "ours"
    ours.save_pretrained(saved)
    back = load_reference(saved, f"{prefix}{head}")
    assert_same_state_dict(back.state_dict(), reference.state_dict())
    ids, mask = source_batch([6, 4])
    with torch.no_grad():
        got, want = ours(input_ids=ids, attention_mask=mask), back(input_ids=ids, attention_mask=mask)
    field = HEADS[head][1][0]
    assert_close(got[field], want[field], atol=1e-4, what=field)


def test_checkpoint_tensor_names_are_the_references(tmp_path: Path) -> None:
    from safetensors import safe_open

    ours, reference = both("Bart", "ForConditionalGeneration", tmp_path)
    ours.save_pretrained(tmp_path / "ours")
    reference.save_pretrained(tmp_path / "theirs")
    names = []
    for side in ("ours", "theirs"):
        with safe_open(str(tmp_path / side / "model.safetensors"), "pt") as handle:
            names.append(set(handle.keys()))
    assert names[0] == names[1]
    for name in ("model.shared.weight", "model.encoder.layers.0.self_attn.k_proj.weight",
                 "model.encoder.layernorm_embedding.weight", "model.decoder.layers.0.encoder_attn.q_proj.weight",
                 "final_logits_bias"):  # fmt: skip
        assert name in names[0]


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("settings", [{"num_beams": 1}, {"num_beams": 3}], ids=["greedy", "beam"])
def test_generate_matches_the_reference(prefix: str, settings: dict[str, Any], tmp_path: Path) -> None:
    ours, reference = both(prefix, "ForConditionalGeneration", tmp_path, decoder_start_token_id=EOS)
    ids, mask = source_batch([7, 4])
    options = {"attention_mask": mask, "max_new_tokens": 6, "do_sample": False, **settings}
    got, want = generate_both(ours, reference, ids, **options)
    assert_generation_matches(got, want, prompt_length=1, what=f"{prefix} {settings}")
