"""The BERT-family heads and internals of issue 40 item 4 against the reference on tiny random checkpoints.

Multiple choice (BERT, RoBERTa, XLM-R, DistilBERT, through ``AutoModelForMultipleChoice``), BERT and RoBERTa as
decoders (``BertLMHeadModel`` / ``RobertaForCausalLM`` through ``AutoModelForCausalLM``: forward, loss, cached
steps and greedy generation), feed-forward chunking (``chunk_size_feed_forward``) in every encoder family, and
the ``apply_chunking_to_forward`` / ``prune_linear_layer`` helpers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from parity.harness import (
    assert_close,
    assert_generation_matches,
    generate_both,
    load_ours,
    load_reference,
    make_reference_checkpoint,
    padded_batch,
    random_ids,
    reference_module,
)

pytest.importorskip("transformers")

BERT: dict[str, Any] = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}
ROBERTA: dict[str, Any] = {**BERT, "type_vocab_size": 1, "pad_token_id": 1}
DISTILBERT: dict[str, Any] = {
    "vocab_size": 99,
    "dim": 32,
    "hidden_dim": 48,
    "n_layers": 2,
    "n_heads": 4,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}
# family -> (reference config class, class prefix, config, takes token_type_ids)
FAMILIES: dict[str, tuple[str, str, dict[str, Any], bool]] = {
    "bert": ("BertConfig", "Bert", BERT, True),
    "roberta": ("RobertaConfig", "Roberta", ROBERTA, True),
    "xlm-roberta": ("XLMRobertaConfig", "XLMRoberta", ROBERTA, True),
    "distilbert": ("DistilBertConfig", "DistilBert", DISTILBERT, False),
}
BATCH, CHOICES, LENGTH = 2, 3, 8


def _choice_inputs(family: str) -> dict[str, torch.Tensor]:
    """``(batch, choices, length)`` right-padded rows (one length per choice row) with their masks."""
    _, _, config, token_types = FAMILIES[family]
    lengths = [8, 5, 3, 7, 8, 4]
    ids, mask = padded_batch(config["vocab_size"], lengths, pad_token_id=config["pad_token_id"], seed=3, side="right")
    if family != "bert":  # keep RoBERTa's padding id out of the real tokens (it would shift its positions)
        ids = ids.masked_fill((ids == config["pad_token_id"]) & (mask == 1), 5)
    inputs = {"input_ids": ids.view(BATCH, CHOICES, LENGTH), "attention_mask": mask.view(BATCH, CHOICES, LENGTH)}
    if token_types and family == "bert":
        types = torch.zeros_like(ids)
        types[:, 3:] = 1
        inputs["token_type_ids"] = (types * mask).view(BATCH, CHOICES, LENGTH)
    return inputs


@pytest.mark.parametrize("family", FAMILIES)
def test_multiple_choice_matches_reference(family: str, tmp_path: Path) -> None:
    config_name, prefix, config, _ = FAMILIES[family]
    folder, reference = make_reference_checkpoint(config_name, f"{prefix}ForMultipleChoice", tmp_path, **config)
    ours = load_ours(folder, "AutoModelForMultipleChoice")
    assert type(ours).__name__ == f"{prefix}ForMultipleChoice"
    inputs = _choice_inputs(family)
    labels = torch.tensor([2, 0])
    with torch.no_grad():
        got = ours(**inputs, labels=labels, output_hidden_states=True)
        want = reference(**inputs, labels=labels, output_hidden_states=True)
    assert tuple(got.logits.shape) == (BATCH, CHOICES)
    assert_close(got.logits, want.logits, what="logits")
    assert_close(got.loss, want.loss, what="loss")
    flat_mask = inputs["attention_mask"].view(-1, LENGTH)
    assert len(got.hidden_states) == len(want.hidden_states)
    assert_close(got.hidden_states[-1], want.hidden_states[-1], what="last hidden state per choice", mask=flat_mask)


def test_multiple_choice_checkpoint_round_trips_through_the_reference(tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint("BertConfig", "BertForMultipleChoice", tmp_path, **BERT)
    ours = load_ours(folder, "AutoModelForMultipleChoice")
    ours.save_pretrained(tmp_path / "ours")
    reloaded = load_reference(tmp_path / "ours", "BertForMultipleChoice")
    theirs, back = reference.state_dict(), reloaded.state_dict()
    assert back.keys() == theirs.keys()
    for name, tensor in theirs.items():
        assert torch.equal(back[name], tensor), name  # exact: the weights are only copied, never computed
    inputs = _choice_inputs("bert")
    with torch.no_grad():
        # the same weights at other addresses: torch's default (non-vector) kernels may round the sums differently
        assert_close(reloaded(**inputs).logits, reference(**inputs).logits)


def test_multiple_choice_inputs_embeds_match_reference(tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint("BertConfig", "BertForMultipleChoice", tmp_path, **BERT)
    ours = load_ours(folder, "AutoModelForMultipleChoice")
    embeds = torch.randn(BATCH, CHOICES, LENGTH, BERT["hidden_size"], generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert_close(ours(inputs_embeds=embeds).logits, reference(inputs_embeds=embeds).logits)


def test_multiple_choice_refuses_inputs_without_a_choice_axis(tmp_path: Path) -> None:
    from microformers_bert import BertInputError

    folder, _ = make_reference_checkpoint("BertConfig", "BertForMultipleChoice", tmp_path, **BERT)
    ours = load_ours(folder, "AutoModelForMultipleChoice")
    with pytest.raises(BertInputError, match=r"input_ids has shape \(2, 8\).*\(batch, num_choices, length\)"):
        ours(input_ids=random_ids(BERT["vocab_size"], batch=2, length=8))


# -- BERT and RoBERTa as decoders ------------------------------------------------------------------------
# family -> (reference config class, reference model class, config)
DECODERS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "bert": ("BertConfig", "BertLMHeadModel", {**BERT, "is_decoder": True}),
    "roberta": ("RobertaConfig", "RobertaForCausalLM", {**ROBERTA, "is_decoder": True}),
    "xlm-roberta": ("XLMRobertaConfig", "XLMRobertaForCausalLM", {**ROBERTA, "is_decoder": True}),
}


@pytest.fixture(scope="module")
def decoders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any]]:
    built = {}
    for family, (config_name, model_name, config) in DECODERS.items():
        folder, reference = make_reference_checkpoint(config_name, model_name, tmp_path_factory.mktemp(family), **config)
        built[family] = (reference, load_ours(folder, "AutoModelForCausalLM"))
    return built


@pytest.mark.parametrize("family", DECODERS)
def test_decoder_forward_and_loss_match_reference(family: str, decoders: dict[str, tuple[Any, Any]]) -> None:
    reference, ours = decoders[family]
    assert type(ours).__name__ == DECODERS[family][1]
    ids = random_ids(BERT["vocab_size"], batch=2, length=9, seed=5, low=3)
    labels = ids.clone()
    labels[0, :3] = -100
    with torch.no_grad():
        got, want = ours(ids, labels=labels), reference(ids, labels=labels)
    assert_close(got.logits, want.logits)
    assert_close(got.loss, want.loss, what="loss")
    # causal: changing the last token changes no earlier position's logits
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % BERT["vocab_size"]
    with torch.no_grad():
        assert_close(ours(changed).logits[:, :-1], got.logits[:, :-1], atol=1e-6, what="earlier positions")


@pytest.mark.parametrize("family", DECODERS)
def test_decoder_cached_steps_match_reference(family: str, decoders: dict[str, tuple[Any, Any]]) -> None:
    reference, ours = decoders[family]
    ids = random_ids(BERT["vocab_size"], batch=2, length=8, seed=6, low=3)
    with torch.no_grad():
        full = reference(ids).logits
        step = ours(ids[:, :5], use_cache=True)
        cache, logits = step.past_key_values, [step.logits]
        for position in range(5, 8):
            step = ours(ids[:, position : position + 1], past_key_values=cache, use_cache=True)
            cache = step.past_key_values
            logits.append(step.logits)
    assert cache.get_seq_length() == 8
    assert_close(torch.cat(logits, dim=1), full, what="cached decoding vs the reference's full forward")


@pytest.mark.parametrize("family", ["bert", "roberta"])  # XLM-R's decoder is RoBERTa's class under another config
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left-padded"])
def test_decoder_greedy_generation_matches_reference(
    family: str, padded: bool, decoders: dict[str, tuple[Any, Any]]
) -> None:
    reference, ours = decoders[family]
    pad = DECODERS[family][2]["pad_token_id"]
    if padded:
        ids, mask = padded_batch(BERT["vocab_size"], [7, 4], pad_token_id=pad, seed=8, side="left")
        ids = ids.masked_fill((ids == pad) & (mask == 1), 5)
        settings: dict[str, Any] = {"attention_mask": mask}
    else:
        ids, settings = random_ids(BERT["vocab_size"], batch=2, length=6, seed=7, low=3), {}
    settings.update(max_new_tokens=8, do_sample=False, pad_token_id=pad)
    got, want = generate_both(ours, reference, ids, **settings)
    assert got.sequences.shape[1] == ids.shape[1] + 8
    assert_generation_matches(got, want, prompt_length=ids.shape[1], what=f"{family} greedy")


def test_bert_lm_head_without_is_decoder_is_bidirectional_as_in_the_reference(tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint("BertConfig", "BertLMHeadModel", tmp_path, **BERT)
    ours = load_ours(folder, "AutoModelForCausalLM")
    ids = random_ids(BERT["vocab_size"], batch=2, length=9, seed=5)
    with torch.no_grad():
        got = ours(ids).logits
        assert_close(got, reference(ids).logits)
        changed = ids.clone()
        changed[:, -1] = (changed[:, -1] + 1) % BERT["vocab_size"]
        assert not torch.allclose(ours(changed).logits[:, 0], got[:, 0]), "the first position sees the last token"


def test_decoder_refuses_cross_attention_inputs(decoders: dict[str, tuple[Any, Any]]) -> None:
    from microformers_bert import BertInputError

    _, ours = decoders["bert"]
    ids = random_ids(BERT["vocab_size"], batch=1, length=4)
    with pytest.raises(BertInputError, match="encoder_hidden_states.*add_cross_attention"):
        ours(ids, encoder_hidden_states=torch.zeros(1, 3, BERT["hidden_size"]))


def test_encoder_refuses_a_cache(tmp_path: Path) -> None:
    from microformers_bert import BertInputError
    from microformers_sdk.cache import DynamicCache

    folder, _ = make_reference_checkpoint("BertConfig", "BertModel", tmp_path, **BERT)
    ours = load_ours(folder, "AutoModel")
    with pytest.raises(BertInputError, match="is_decoder=False"):
        ours(random_ids(BERT["vocab_size"], batch=1, length=4), past_key_values=DynamicCache())


# -- feed-forward chunking ---------------------------------------------------------------------------------
# family -> (reference config class, model class, config, module whose output is intermediate_size wide)
CHUNKED: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "bert": ("BertConfig", "BertModel", BERT, "intermediate.dense"),
    "roberta": ("RobertaConfig", "RobertaModel", ROBERTA, "intermediate.dense"),
    "distilbert": ("DistilBertConfig", "DistilBertModel", DISTILBERT, "ffn.lin1"),
}


@pytest.mark.parametrize("family", CHUNKED)
def test_feed_forward_chunking_matches_reference_and_bounds_the_wide_activation(family: str, tmp_path: Path) -> None:
    config_name, model_name, config, wide = CHUNKED[family]
    folder, reference = make_reference_checkpoint(config_name, model_name, tmp_path, **config)
    plain = load_ours(folder, "AutoModel")
    chunked = load_ours(folder, "AutoModel", chunk_size_feed_forward=4)
    assert chunked.config.chunk_size_feed_forward == 4
    widths: list[int] = []
    for name, module in chunked.named_modules():
        if name.endswith(wide):
            module.register_forward_hook(lambda _m, _i, output: widths.append(output.shape[1]))
    reference.config.chunk_size_feed_forward = 4  # the reference reads it at build time: rebuild it chunked
    transformers = reference_module()
    chunked_reference = getattr(transformers, model_name).from_pretrained(str(folder), chunk_size_feed_forward=4)
    low = 3 if family != "bert" else 0
    ids = random_ids(config["vocab_size"], batch=2, length=12, seed=2, low=low)  # 12: the reference needs k | length
    with torch.no_grad():
        got = chunked(ids).last_hidden_state
        assert_close(got, chunked_reference.eval()(ids).last_hidden_state, what="chunked vs the reference, chunked")
        assert_close(got, plain(ids).last_hidden_state, atol=1e-6, what="chunked vs unchunked")
        assert widths and max(widths) == 4, f"the MLP saw {max(widths)} positions at once, not 4"
        # a length the chunk does not divide (the reference refuses it): the last chunk is shorter
        odd = random_ids(config["vocab_size"], batch=2, length=10, seed=3, low=low)
        assert_close(chunked(odd).last_hidden_state, plain(odd).last_hidden_state, atol=1e-6, what="10 = 4+4+2")


def test_chunk_size_must_be_a_non_negative_integer() -> None:
    from microformers.errors import ConfigError, MicroformersError
    from microformers_bert import BertConfig

    for bad in (-1, 2.5, "4"):
        with pytest.raises((ConfigError, MicroformersError), match="chunk_size_feed_forward"):
            BertConfig(**BERT, chunk_size_feed_forward=bad)


def test_apply_chunking_to_forward_and_prune_linear_layer_match_reference() -> None:
    from microformers_sdk.pytorch_utils import apply_chunking_to_forward, prune_linear_layer

    reference = reference_module().pytorch_utils
    generator = torch.Generator().manual_seed(0)
    linear = torch.nn.Linear(6, 5)
    states = torch.randn(2, 8, 6, generator=generator)
    other = torch.randn(2, 8, 5, generator=generator)

    def forward(hidden: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        return torch.relu(linear(hidden)) + extra

    with torch.no_grad():
        for chunk in (0, 2, 8):
            assert_close(
                apply_chunking_to_forward(forward, chunk, 1, states, other),
                reference.apply_chunking_to_forward(forward, chunk, 1, states, other),
                atol=0.0,
                what=f"chunk {chunk}",
            )
    index = torch.tensor([4, 0, 2])
    for dim in (0, 1):
        mine, theirs = prune_linear_layer(linear, index, dim), reference.prune_linear_layer(linear, index, dim)
        assert mine.weight.shape == theirs.weight.shape
        assert_close(mine.weight, theirs.weight, atol=0.0, what=f"weight, dim={dim}")
        assert_close(mine.bias, theirs.bias, atol=0.0, what=f"bias, dim={dim}")
