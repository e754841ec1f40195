"""BLOOM (microformers-bloom) against the reference implementation on tiny random checkpoints.

Cases: the default layout (4 heads, tied embeddings); 6 heads (ALiBi slopes beyond a power of two) with the
residuals taken after the norms and an untied head. Then a GGUF file written from a tiny model the way
llama.cpp's converter writes BLOOM (QKV rows regrouped), loaded by us and by the reference's GGUF loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from parity.harness import (
    assert_close,
    assert_generation_matches,
    assert_same_state_dict,
    generate_both,
    load_ours,
    load_reference,
    make_reference_checkpoint,
    make_reference_model,
    max_abs_diff,
    padded_batch,
    position_ids_for,
    random_ids,
)

pytest.importorskip("transformers")

TINY: dict[str, Any] = {
    "vocab_size": 96,
    "hidden_size": 32,
    "n_layer": 2,
    "n_head": 4,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 1,
}

CASES: dict[str, dict[str, Any]] = {
    "default": {},
    "six-heads-post-ln-untied": {
        "n_head": 6,
        "hidden_size": 48,
        "apply_residual_connection_post_layernorm": True,
        "tie_word_embeddings": False,
    },
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any, Any]]:
    built: dict[str, tuple[Path, Any, Any]] = {}
    for name, overrides in CASES.items():
        folder, reference = make_reference_checkpoint(
            "BloomConfig", "BloomForCausalLM", tmp_path_factory.mktemp(name), **{**TINY, **overrides}
        )
        built[name] = (folder, reference, load_ours(folder))
    return built


@pytest.mark.parametrize("case", CASES)
def test_logits_and_loss_match_reference(case: str, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    _, reference, ours = checkpoints[case]
    assert type(ours).__name__ == "BloomForCausalLM"
    ids = random_ids(TINY["vocab_size"], batch=2, length=9, seed=1)
    labels = ids.clone()
    labels[0, :3] = -100
    with torch.no_grad():
        got, want = ours(ids, labels=labels), reference(ids, labels=labels)
    assert_close(got.logits, want.logits, atol=1e-4)
    assert_close(got.loss, want.loss, atol=1e-5, what="loss")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_left_padded_batch_and_cached_steps_match_reference(
    case: str, attn_implementation: str, checkpoints: dict[str, tuple[Path, Any, Any]]
) -> None:
    folder, reference, _ = checkpoints[case]
    ours = load_ours(folder, attn_implementation=attn_implementation)
    ids, mask = padded_batch(TINY["vocab_size"], [8, 5, 2], pad_token_id=0, seed=2)
    with torch.no_grad():
        got = ours(ids, attention_mask=mask).logits
        want = reference(ids, attention_mask=mask, position_ids=position_ids_for(mask)).logits
        out = ours(ids[:, :3], attention_mask=mask[:, :3], use_cache=True)
        steps = [out.logits]
        for t in range(3, ids.shape[1]):
            out = ours(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], past_key_values=out.past_key_values)
            steps.append(out.logits)
    assert_close(got, want, atol=1e-4, mask=mask)
    assert_close(torch.cat(steps, dim=1), want, atol=1e-4, mask=mask, what="cached steps vs reference")


@pytest.mark.parametrize("case", CASES)
def test_greedy_generation_matches_reference(case: str, checkpoints: dict[str, tuple[Path, Any, Any]]) -> None:
    _, reference, ours = checkpoints[case]
    ids, mask = padded_batch(TINY["vocab_size"], [5, 3], pad_token_id=0, seed=11, side="left")
    settings = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0, "eos_token_id": None}
    got, want = generate_both(ours, reference, ids, attention_mask=mask, **settings)
    assert_generation_matches(got, want, prompt_length=ids.shape[1])


@pytest.mark.parametrize("case", CASES)
def test_our_checkpoint_loads_in_reference(
    case: str, checkpoints: dict[str, tuple[Path, Any, Any]], tmp_path: Path
) -> None:
    _, _, ours = checkpoints[case]
    ours.save_pretrained(tmp_path / "ours")
    reference = load_reference(tmp_path / "ours", "AutoModelForCausalLM")
    assert type(reference).__name__ == "BloomForCausalLM"
    assert_same_state_dict(dict(ours.state_dict()), dict(reference.state_dict()))
    ids = random_ids(TINY["vocab_size"], batch=2, length=9, seed=4)
    with torch.no_grad():
        assert max_abs_diff(ours(ids).logits, reference(ids).logits) <= 1e-4


def test_base_model_and_sequence_classification_match_reference(tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint(
        "BloomConfig", "BloomForSequenceClassification", tmp_path, num_labels=3, **TINY
    )
    ours = load_ours(folder, "AutoModelForSequenceClassification")
    ids, mask = padded_batch(TINY["vocab_size"], [9, 5, 3], pad_token_id=0, seed=5, side="right")
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        got = ours(ids, attention_mask=mask, labels=labels)
        want = reference(ids, attention_mask=mask, position_ids=position_ids_for(mask), labels=labels)
        assert_close(got.logits, want.logits, atol=1e-4)
        assert_close(got.loss, want.loss, atol=1e-5, what="loss")
        base, reference_base = load_ours(folder, "AutoModel"), load_reference(folder, "AutoModel")
        assert_close(base(ids).last_hidden_state, reference_base(ids).last_hidden_state, atol=1e-4)


# -- GGUF ------------------------------------------------------------------------------------------


def write_bloom_gguf(reference: Any, path: Path) -> Path:
    """``reference`` as llama.cpp's converter writes a BLOOM model (F32): QKV rows regrouped as all queries,
    then all keys, then all values; the embeddings also written as the output."""
    gguf = pytest.importorskip("gguf")
    from gguf.constants import MODEL_ARCH

    config = reference.config
    heads = config.n_head
    writer = gguf.GGUFWriter(str(path), "bloom")
    writer.add_context_length(2048)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(4 * config.hidden_size)
    writer.add_block_count(config.n_layer)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_layer_norm_eps(config.layer_norm_epsilon)
    tokens = ["<pad>", "<|endoftext|>", *(f"t{i}" for i in range(config.vocab_size - 2))]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3] + [1] * (len(tokens) - 2))
    writer.add_token_merges([])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(1)
    name_map = gguf.get_tensor_name_map(MODEL_ARCH.BLOOM, config.n_layer)
    for hf_name, tensor in reference.state_dict().items():
        stem, _, suffix = hf_name.rpartition(".")
        mapped = name_map.get_name(stem) or name_map.get_name(stem.removeprefix("transformer."))
        if mapped is None or (hf_name == "lm_head.weight" and config.tie_word_embeddings):
            continue
        array = tensor.float().numpy()
        if "query_key_value" in hf_name:  # per-head q, k, v -> all q, all k, all v
            per_head = array.reshape(heads, 3, -1, *array.shape[1:])
            array = np.concatenate([per_head[:, i].reshape(-1, *array.shape[1:]) for i in range(3)])
        writer.add_tensor(f"{mapped}.{suffix}", np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# llama.cpp runs BLOOM's usual residuals only (no metadata key for apply_residual_connection_post_layernorm)
GGUF_CASES: dict[str, dict[str, Any]] = {
    "tied": {},
    "six-heads-untied": {"n_head": 6, "hidden_size": 48, "tie_word_embeddings": False},
}


@pytest.mark.parametrize("case", GGUF_CASES)
def test_gguf_file_matches_the_original_model_and_the_reference_gguf_loader(tmp_path: Path, case: str) -> None:
    import transformers

    import microformers

    reference = make_reference_model("BloomConfig", "BloomForCausalLM", **{**TINY, **GGUF_CASES[case]})
    write_bloom_gguf(reference, tmp_path / "m.gguf")
    ours = microformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf").eval()
    assert type(ours).__name__ == "BloomForCausalLM"
    assert ours.config.tie_word_embeddings == reference.config.tie_word_embeddings
    ids = random_ids(TINY["vocab_size"], batch=2, length=9, seed=7)
    with torch.no_grad():
        assert_close(ours(ids).logits, reference(ids).logits, atol=1e-4, what="ours from GGUF vs the original model")
        if reference.config.tie_word_embeddings:  # the reference's GGUF loader always ties BLOOM's head
            theirs = transformers.AutoModelForCausalLM.from_pretrained(
                tmp_path, gguf_file="m.gguf", dtype=torch.float32
            )
            assert_close(ours(ids).logits, theirs.eval()(ids).logits, atol=1e-4, what="ours vs reference GGUF loader")
