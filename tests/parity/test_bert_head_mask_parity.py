"""BERT ``head_mask`` and ``prune_heads`` (the BERTology API), checked against the reference.

The reference (transformers 5.23) accepts ``head_mask`` but no longer applies it and has no
``prune_heads``. Multiplying a head's attention probabilities by ``m`` multiplies that head's context by
``m``, so the oracle is the reference model with the matching input columns of each layer's attention
output projection scaled by ``m`` (0 for a pruned head).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from microformers import MicroformersError
from parity.harness import assert_close, load_ours, make_reference_checkpoint, random_ids

LAYERS, HEADS, HIDDEN = 2, 4, 32
HEAD_DIM = HIDDEN // HEADS


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    return make_reference_checkpoint(
        "BertConfig", "BertModel", tmp_path_factory.mktemp("bert-heads"), vocab_size=40, hidden_size=HIDDEN,
        intermediate_size=48, num_hidden_layers=LAYERS, num_attention_heads=HEADS, max_position_embeddings=24,
    )


def _reference_with_scaled_heads(reference: object, mask: torch.Tensor) -> object:
    import copy

    scaled = copy.deepcopy(reference)
    with torch.no_grad():
        for layer, row in zip(scaled.encoder.layer, mask):
            weight = layer.attention.output.dense.weight
            weight.mul_(row.repeat_interleave(HEAD_DIM).view(1, -1))
    return scaled


@pytest.mark.parametrize(
    "mask",
    [
        torch.tensor([1.0, 0.0, 1.0, 0.0]),
        torch.tensor([[0.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.5, 0.0]]),
    ],
)
def test_head_mask_matches_scaled_reference(bert: tuple[Path, object], mask: torch.Tensor) -> None:
    folder, reference = bert
    ours = load_ours(folder, "AutoModel")
    ids = random_ids(40, batch=2, length=7)
    attention_mask = torch.ones_like(ids)
    attention_mask[1, 5:] = 0
    full = mask if mask.dim() == 2 else mask.expand(LAYERS, HEADS)
    oracle = _reference_with_scaled_heads(reference, full)(ids, attention_mask=attention_mask).last_hidden_state
    got = ours(ids, attention_mask=attention_mask, head_mask=mask, output_attentions=True)
    assert_close(got.last_hidden_state, oracle)
    plain = ours(ids, attention_mask=attention_mask).last_hidden_state
    assert (plain - got.last_hidden_state).abs().max() > 1e-3  # the mask did something
    for layer, weights in enumerate(got.attentions):  # returned probabilities are the masked ones
        assert torch.all(weights[:, full[layer] == 0] == 0)


def test_head_mask_flows_through_heads(bert: tuple[Path, object]) -> None:
    folder = bert[0]
    ours = load_ours(folder, "AutoModelForSequenceClassification", strict=False)
    ids = random_ids(40, batch=1, length=6)
    mask = torch.tensor([0.0, 1.0, 1.0, 1.0])
    assert not torch.allclose(ours(ids).logits, ours(ids, head_mask=mask).logits)


def test_head_mask_shape_is_checked(bert: tuple[Path, object]) -> None:
    ours = load_ours(bert[0], "AutoModel")
    with pytest.raises(MicroformersError, match=r"head_mask has shape \(3,\)"):
        ours(random_ids(40, batch=1, length=4), head_mask=torch.ones(3))


def test_prune_heads_matches_reference_and_round_trips(bert: tuple[Path, object], tmp_path: Path) -> None:
    folder, reference = bert
    ours = load_ours(folder, "AutoModel")
    before = ours.num_parameters()
    ours.prune_heads({0: [1, 3], 1: [2]})
    ours.prune_heads({1: [0]})
    assert ours.encoder.layer[0].attention.self.query.out_features == 2 * HEAD_DIM
    assert ours.encoder.layer[1].attention.output.dense.in_features == 2 * HEAD_DIM
    assert ours.num_parameters() < before
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]])
    ids = random_ids(40, batch=2, length=7)
    oracle = _reference_with_scaled_heads(reference, mask)(ids).last_hidden_state
    assert_close(ours(ids).last_hidden_state, oracle)
    # a head mask still names the original heads after pruning
    assert_close(ours(ids, head_mask=torch.ones(HEADS)).last_hidden_state, oracle)
    ours.save_pretrained(tmp_path / "pruned")
    again = load_ours(tmp_path / "pruned", "AutoModel")
    assert {int(k): v for k, v in again.config.pruned_heads.items()} == {0: [1, 3], 1: [0, 2]}
    assert_close(again(ids).last_hidden_state, oracle)
    with pytest.raises(MicroformersError, match="layer 5 does not exist"):
        ours.prune_heads({5: [0]})
