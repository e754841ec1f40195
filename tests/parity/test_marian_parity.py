"""MarianMT (microformers-marian) against the reference on tiny random checkpoints, both directions."""

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
    make_reference_model,
)

pytest.importorskip("transformers")

PAD, EOS = 119, 0
TINY: dict[str, Any] = {
    "vocab_size": 120,
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 3,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 48,
    "decoder_ffn_dim": 40,
    "max_position_embeddings": 64,
    "pad_token_id": PAD,
    "decoder_start_token_id": PAD,
    "eos_token_id": EOS,
    "forced_eos_token_id": EOS,
    "scale_embedding": True,
    "attn_implementation": "eager",
}
VOCABULARIES: dict[str, dict[str, Any]] = {
    "shared": {},
    "separate": {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": 130},
}
HEADS = {"MarianModel": "AutoModel", "MarianMTModel": "AutoModelForSeq2SeqLM"}


def reference_checkpoint(head: str, tmp_path: Path, **config: Any) -> tuple[Path, Any]:
    """A random reference model saved to a folder; its position tables are put back to the sinusoids
    (the harness redraws every parameter, and the reference keeps the tables as frozen parameters)."""
    reference = make_reference_model("MarianConfig", head, **{**TINY, **config})
    with torch.no_grad():
        for module in reference.modules():
            if hasattr(module, "create_weight"):
                module.weight.copy_(module.create_weight())
    folder = tmp_path / f"reference-{head}"
    reference.save_pretrained(folder)
    return folder, reference


def source_batch(lengths: list[int], seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        real = torch.randint(1, PAD, (length,), generator=generator)
        real[-1] = EOS
        ids[row, :length], mask[row, :length] = real, 1
    return ids, mask


def target_batch(batch: int, length: int, seed: int = 5) -> torch.Tensor:
    return torch.randint(1, PAD, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("vocabulary", list(VOCABULARIES))
@pytest.mark.parametrize("head", list(HEADS))
def test_outputs_attentions_and_loss_match_on_a_padded_batch(head: str, vocabulary: str, tmp_path: Path) -> None:
    folder, reference = reference_checkpoint(head, tmp_path, **VOCABULARIES[vocabulary])
    ours = load_ours(folder, HEADS[head])
    ids, mask = source_batch([9, 6, 3])
    decoder_ids = target_batch(3, 5)
    settings = {"output_attentions": True, "output_hidden_states": True}
    labels = decoder_ids.clone()
    labels[0, -2:] = -100
    extra = {"labels": labels} if head == "MarianMTModel" else {}
    with torch.no_grad():
        got = ours(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, **settings, **extra)
        want = reference(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, **settings, **extra)
    assert_close(got[1 if extra else 0], want[1 if extra else 0], atol=1e-4)
    assert_close(got.encoder_last_hidden_state, want.encoder_last_hidden_state, atol=1e-4, mask=mask)
    for field in ("encoder_hidden_states", "encoder_attentions", "decoder_hidden_states", "decoder_attentions",
                  "cross_attentions"):  # fmt: skip
        assert len(got[field]) == len(want[field]), field
        for index, (mine, theirs) in enumerate(zip(got[field], want[field])):
            assert_close(mine, theirs, atol=1e-4, what=f"{field}[{index}]")
    if extra:
        policy_close(got.loss, want.loss, atol=1e-4, msg="loss")


@pytest.mark.parametrize("vocabulary", list(VOCABULARIES))
def test_labels_alone_and_incremental_decoding_match_the_reference(vocabulary: str, tmp_path: Path) -> None:
    folder, reference = reference_checkpoint("MarianMTModel", tmp_path, **VOCABULARIES[vocabulary])
    ours = load_ours(folder, "AutoModelForSeq2SeqLM")
    ids, mask = source_batch([8, 4])
    labels = target_batch(2, 6)
    with torch.no_grad():
        got, want = ours(input_ids=ids, attention_mask=mask, labels=labels), reference(
            input_ids=ids, attention_mask=mask, labels=labels
        )
        assert_close(got.logits, want.logits, atol=1e-4)
        policy_close(got.loss, want.loss, atol=1e-4, msg="loss")
        decoder_ids = ours.prepare_decoder_input_ids_from_labels(labels)
        assert torch.equal(decoder_ids, reference.prepare_decoder_input_ids_from_labels(labels))
        encoded = ours.get_encoder()(input_ids=ids, attention_mask=mask, return_dict=True)
        cache, steps = None, []
        for position in range(decoder_ids.shape[1]):
            step = ours(
                attention_mask=mask, decoder_input_ids=decoder_ids[:, position : position + 1],
                encoder_outputs=encoded, past_key_values=cache, use_cache=True, return_dict=True,
            )  # fmt: skip
            cache = step.past_key_values
            steps.append(step.logits)
    assert cache.get_seq_length() == decoder_ids.shape[1]
    assert_close(torch.cat(steps, dim=1), want.logits, atol=1e-4, what="cached decoding")


@pytest.mark.parametrize("vocabulary", list(VOCABULARIES))
@pytest.mark.parametrize("head", list(HEADS))
def test_reference_checkpoints_load_here_and_ours_load_there(head: str, vocabulary: str, tmp_path: Path) -> None:
    folder, reference = reference_checkpoint(head, tmp_path, **VOCABULARIES[vocabulary])
    ours = load_ours(folder, HEADS[head])
    saved = tmp_path / "ours"
    ours.save_pretrained(saved)
    back = load_reference(saved, head)
    # the position tables are recomputed on both sides (numpy there, torch here): equal to float rounding
    assert_same_state_dict(back.state_dict(), reference.state_dict(), atol=1e-6)
    ids, mask = source_batch([6, 4])
    decoder_ids = target_batch(2, 3)
    with torch.no_grad():
        got = ours(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids)[0]
        want = back(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids)[0]
    assert_close(got, want, atol=1e-4)


def test_saved_tensor_names_are_the_references(tmp_path: Path) -> None:
    from safetensors import safe_open

    folder, _ = reference_checkpoint("MarianMTModel", tmp_path)
    ours = load_ours(folder, "AutoModelForSeq2SeqLM")
    ours.save_pretrained(tmp_path / "ours")
    names = []
    for side in (tmp_path / "ours", folder):
        with safe_open(str(side / "model.safetensors"), "pt") as handle:
            names.append(set(handle.keys()))
    assert names[0] == names[1]
    assert "model.shared.weight" in names[0] and "final_logits_bias" in names[0]
    assert not any("embed_positions" in name or "layernorm_embedding" in name for name in names[0])


@pytest.mark.parametrize("settings", [{"num_beams": 1}, {"num_beams": 3}], ids=["greedy", "beam"])
def test_generate_matches_the_reference(settings: dict[str, Any], tmp_path: Path) -> None:
    folder, reference = reference_checkpoint("MarianMTModel", tmp_path)
    ours = load_ours(folder, "AutoModelForSeq2SeqLM")
    ids, mask = source_batch([7, 4])
    options = {"attention_mask": mask, "max_new_tokens": 6, "do_sample": False, **settings}
    got, want = generate_both(ours, reference, ids, **options)
    assert_generation_matches(got, want, prompt_length=1, what=str(settings))
