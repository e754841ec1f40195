"""RoBERTa and XLM-RoBERTa (microformers-roberta) against the reference on tiny random checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from microformers_sdk.testing import assert_close as policy_close
from microformers_sdk.testing import one_thread  # noqa: F401  (an autouse fixture, found by name)
from parity.harness import (
    assert_close,
    assert_same_state_dict,
    load_ours,
    load_reference,
    make_reference_checkpoint,
    max_abs_diff,
    reference_module,
)

pytest.importorskip("transformers")


PAD = 1
TINY: dict[str, Any] = {
    "vocab_size": 80,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 48,
    "max_position_embeddings": 40,
    "type_vocab_size": 1,  # as in the released checkpoints
    "pad_token_id": PAD,
}
ARCHITECTURES = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta"}

# head suffix -> (our Auto class, output fields to compare, compare per real token)
HEADS: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "Model": ("AutoModel", ("last_hidden_state", "pooler_output"), True),
    "ForMaskedLM": ("AutoModelForMaskedLM", ("logits",), True),
    "ForSequenceClassification": ("AutoModelForSequenceClassification", ("logits",), False),
    "ForTokenClassification": ("AutoModelForTokenClassification", ("logits",), True),
    "ForQuestionAnswering": ("AutoModelForQuestionAnswering", ("start_logits", "end_logits"), True),
}


def padded(lengths: list[int], side: str, seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """``<s> ... </s>`` rows of real tokens (never the pad id), padded with ``PAD`` on ``side``."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        real = torch.randint(3, TINY["vocab_size"], (length,), generator=generator)
        real[0], real[-1] = 0, 2
        span = slice(width - length, width) if side == "left" else slice(0, length)
        ids[row, span], mask[row, span] = real, 1
    return ids, mask


def labels_for(head: str, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    batch, length = ids.shape
    if head == "ForMaskedLM":
        labels = ids.clone()
        labels[:, ::2] = -100
        return {"labels": labels}
    if head == "ForSequenceClassification":
        return {"labels": torch.randint(0, 2, (batch,), generator=generator)}
    if head == "ForTokenClassification":
        return {"labels": torch.randint(0, 2, (batch, length), generator=generator)}
    if head == "ForQuestionAnswering":
        return {
            "start_positions": torch.randint(0, length, (batch,), generator=generator),
            "end_positions": torch.randint(0, length, (batch,), generator=generator),
        }
    return {}


@pytest.mark.parametrize("model_type", ARCHITECTURES)
@pytest.mark.parametrize("head", HEADS)
def test_head_matches_reference_with_padding_and_loss(model_type: str, head: str, tmp_path: Path) -> None:
    prefix = ARCHITECTURES[model_type]
    auto, fields, per_token = HEADS[head]
    folder, reference = make_reference_checkpoint(f"{prefix}Config", f"{prefix}{head}", tmp_path, **TINY)
    ours = load_ours(folder, auto)
    assert type(ours).__name__ == f"{prefix}{head}"
    assert ours.config.model_type == model_type
    for side in ("right", "left"):
        ids, mask = padded([9, 6, 3], side)
        labels = labels_for(head, ids)
        with torch.no_grad():
            got = ours(ids, attention_mask=mask, **labels)
            want = reference(ids, attention_mask=mask, **labels)
        for field in fields:
            compare_mask = mask if per_token and field != "pooler_output" else None
            assert_close(
                getattr(got, field), getattr(want, field), atol=1e-4, what=f"{field} ({side})", mask=compare_mask
            )
        if labels:
            assert_close(got.loss, want.loss, atol=1e-5, what=f"loss ({side})")


def test_positions_start_after_the_padding_index(tmp_path: Path) -> None:
    from microformers_roberta.modeling_roberta import create_position_ids_from_input_ids

    transformers = reference_module()
    ids, _ = padded([7, 4], "left")
    want = transformers.models.roberta.modeling_roberta.RobertaEmbeddings.create_position_ids_from_input_ids(ids, PAD)
    got = create_position_ids_from_input_ids(ids, PAD)
    assert torch.equal(got, want)
    assert got[1].tolist() == [PAD, PAD, PAD, 2, 3, 4, 5]  # padding keeps the padding index

    # left and right padding give real tokens the same positions, so the same states
    folder, _ = make_reference_checkpoint("RobertaConfig", "RobertaModel", tmp_path, **TINY)
    ours = load_ours(folder, "AutoModel")
    right, right_mask = padded([7, 4], "right")
    left, left_mask = padded([7, 4], "left")
    with torch.no_grad():
        a = ours(right, attention_mask=right_mask).last_hidden_state[1, :4]
        b = ours(left, attention_mask=left_mask).last_hidden_state[1, 3:]
    assert max_abs_diff(a, b) <= 1e-5


def test_inputs_embeds_explicit_positions_and_token_types(tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint("XLMRobertaConfig", "XLMRobertaForMaskedLM", tmp_path, **TINY)
    ours = load_ours(folder, "AutoModelForMaskedLM")
    ids, mask = padded([8, 5], "right")
    with torch.no_grad():
        embeds = ours.get_input_embeddings()(ids)
        # from embeddings positions run padding_idx + 1, padding_idx + 2, ... (padding cannot be seen)
        assert_close(ours(inputs_embeds=embeds).logits, reference(inputs_embeds=embeds).logits, atol=1e-4)
        positions = torch.arange(2, 10).expand(2, -1)
        types = torch.zeros_like(ids)
        got = ours(ids, attention_mask=mask, position_ids=positions, token_type_ids=types).logits
        want = reference(ids, attention_mask=mask, position_ids=positions, token_type_ids=types).logits
    assert_close(got, want, atol=1e-4, mask=mask)


@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_hidden_states_attentions_and_checkpoints_both_ways(model_type: str, tmp_path: Path) -> None:
    prefix = ARCHITECTURES[model_type]
    folder, reference = make_reference_checkpoint(
        f"{prefix}Config", f"{prefix}ForMaskedLM", tmp_path, attn_implementation="eager", **TINY
    )
    ours = load_ours(folder, "AutoModelForMaskedLM")
    ids, mask = padded([8, 5], "right", seed=4)
    with torch.no_grad():
        got = ours(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
        want = reference(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
    assert len(got.hidden_states) == len(want.hidden_states) == TINY["num_hidden_layers"] + 1
    for i, (a, b) in enumerate(zip(got.hidden_states, want.hidden_states)):
        assert_close(a, b, atol=1e-4, what=f"hidden_states[{i}]", mask=mask)
    assert len(got.attentions) == len(want.attentions) == TINY["num_hidden_layers"]
    for i, (a, b) in enumerate(zip(got.attentions, want.attentions)):
        assert_close(a, b, atol=1e-5, what=f"attentions[{i}]")

    ours.save_pretrained(tmp_path / "ours")
    again = load_reference(tmp_path / "ours", "AutoModelForMaskedLM")
    assert type(again).__name__ == f"{prefix}ForMaskedLM"
    assert_same_state_dict(dict(ours.state_dict()), dict(again.state_dict()))
    with torch.no_grad():
        assert max_abs_diff(again(ids, attention_mask=mask).logits, got.logits) <= 1e-5
    # a masked-LM folder (no pooler) loads into the classifier heads here and there, same tensors
    ours_cls = load_ours(tmp_path / "ours", "AutoModelForTokenClassification")
    reference_cls = load_reference(tmp_path / "ours", "AutoModelForTokenClassification")
    reference_cls.classifier.load_state_dict(ours_cls.classifier.state_dict())
    with torch.no_grad():
        assert_close(ours_cls(ids, attention_mask=mask).logits, reference_cls(ids, attention_mask=mask).logits,
                     atol=1e-4, mask=mask)  # fmt: skip


# -- tokenizers and pipelines ------------------------------------------------------------------------
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France.",
    "Hugo Weaving lives in Sydney, naïve café, déjà vu",
    "numbers 12345 and symbols #@! ``quoted''",
]
TEXTS = ["Hello world!", " Hello  world", "The capital of France is <mask>.", "naïve café déjà vu ✓ ``x''", "a\tb\nc"]
SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>",
            "pad_token": "<pad>", "mask_token": "<mask>", "model_max_length": 38}  # fmt: skip


def _save_tokenizer(backend: Any, folder: Path, tokenizer_class: str, **settings: Any) -> None:
    import json

    folder.mkdir(parents=True, exist_ok=True)
    data = json.loads(backend.to_str())
    for token in data["added_tokens"]:
        token["lstrip"] = token["content"] == "<mask>"  # as in the released files
    (folder / "tokenizer.json").write_text(json.dumps(data))
    config = {"tokenizer_class": tokenizer_class, **SPECIALS, **settings}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def roberta_tokenizer(folder: Path, **settings: Any) -> Path:
    """A byte-level BPE tokenizer.json shaped like roberta-base's (RobertaProcessing, <s>=0, <pad>=1)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(CORPUS * 5, trainer)
    backend.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    _save_tokenizer(backend, folder, "RobertaTokenizer", **settings)
    return folder


def xlm_roberta_tokenizer(folder: Path, **settings: Any) -> Path:
    """A Unigram (SentencePiece) tokenizer.json shaped like xlm-roberta-base's, with an NFKC normalizer."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    backend = Tokenizer(models.Unigram())
    backend.normalizer = normalizers.Sequence([normalizers.Replace("``", '"'), normalizers.NFKC()])
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")]
    )
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=150, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], unk_token="<unk>"
    )
    backend.train_from_iterator(CORPUS * 5, trainer)
    backend.add_special_tokens(["<mask>"])
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    _save_tokenizer(backend, folder, "XLMRobertaTokenizer", **settings)
    return folder


TOKENIZERS = {"roberta": roberta_tokenizer, "xlm-roberta": xlm_roberta_tokenizer}


@pytest.mark.parametrize("add_prefix_space", [None, True, False])
@pytest.mark.parametrize("model_type", TOKENIZERS)
def test_tokenizer_ids_match_reference(model_type: str, add_prefix_space: bool | None, tmp_path: Path) -> None:
    import microformers

    settings = {} if add_prefix_space is None else {"add_prefix_space": add_prefix_space}
    folder = TOKENIZERS[model_type](tmp_path / "tok", **settings)
    ours = microformers.AutoTokenizer.from_pretrained(folder)
    reference = reference_module().AutoTokenizer.from_pretrained(str(folder))
    for text in TEXTS:
        got, want = ours(text), reference(text)
        assert got["input_ids"] == want["input_ids"], text
        assert ours.decode(got["input_ids"]) == reference.decode(want["input_ids"]), text
    assert ours("Hello world", "Paris is")["input_ids"] == reference("Hello world", "Paris is")["input_ids"]
    assert (
        ours(["Hello", "world"], is_split_into_words=True)["input_ids"]
        == (reference(["Hello", "world"], is_split_into_words=True)["input_ids"])
    )
    assert list(ours("Hi there")) == list(reference("Hi there"))  # no token_type_ids
    assert (
        (ours.pad_token_id, ours.mask_token_id)
        == (reference.pad_token_id, reference.mask_token_id)
        == (PAD, reference.convert_tokens_to_ids("<mask>"))
    )
    # saved by us, loaded by the reference: the same ids
    ours.save_pretrained(tmp_path / "saved")
    again = reference_module().AutoTokenizer.from_pretrained(str(tmp_path / "saved"))
    assert [again(t)["input_ids"] for t in TEXTS] == [reference(t)["input_ids"] for t in TEXTS]


def _pipeline_folder(model_type: str, head: str, tmp_path: Path, **config: Any) -> Path:
    prefix = ARCHITECTURES[model_type]
    folder = TOKENIZERS[model_type](tmp_path / "model")
    size = len(reference_module().AutoTokenizer.from_pretrained(str(folder)))
    _, reference = make_reference_checkpoint(
        f"{prefix}Config",
        f"{prefix}{head}",
        tmp_path,
        **{**TINY, "vocab_size": size, "max_position_embeddings": 80, **config},
    )
    reference.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_fill_mask_and_text_classification_pipelines_match_reference(model_type: str, tmp_path: Path) -> None:
    import microformers

    transformers = reference_module()
    fill = _pipeline_folder(model_type, "ForMaskedLM", tmp_path / "fill")
    texts = ["The capital of France is <mask>.", "Paris is the <mask> of France."]
    got = microformers.pipeline("fill-mask", model=str(fill), top_k=3)(texts)
    want = transformers.pipeline("fill-mask", model=str(fill), top_k=3)(texts)
    assert [[(c["token"], c["token_str"], c["sequence"]) for c in row] for row in got] == [
        [(c["token"], c["token_str"], c["sequence"]) for c in row] for row in want
    ]
    for row_got, row_want in zip(got, want):
        for a, b in zip(row_got, row_want):
            assert abs(a["score"] - b["score"]) <= 1e-5

    labels = {"id2label": {0: "negative", 1: "positive"}, "label2id": {"negative": 0, "positive": 1}}
    classify = _pipeline_folder(model_type, "ForSequenceClassification", tmp_path / "cls", **labels)
    sentences = ["what a wonderful day", "The quick brown fox jumps over the lazy dog."]
    got = microformers.pipeline("text-classification", model=str(classify), top_k=None)(sentences)
    want = transformers.pipeline("text-classification", model=str(classify), top_k=None)(sentences)
    assert [[c["label"] for c in row] for row in got] == [[c["label"] for c in row] for row in want]
    for row_got, row_want in zip(got, want):
        for a, b in zip(row_got, row_want):
            assert abs(a["score"] - b["score"]) <= 1e-5


@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_token_classification_pipeline_matches_reference(model_type: str, tmp_path: Path) -> None:
    import microformers

    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    folder = _pipeline_folder(
        model_type, "ForTokenClassification", tmp_path,
        id2label=dict(enumerate(labels)), label2id={label: i for i, label in enumerate(labels)},
    )  # fmt: skip
    texts = ["Hugo Weaving lives in Sydney", "Paris is the capital of France."]

    def plain(rows: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
        return [[{k: float(v) if k == "score" else v for k, v in e.items()} for e in row] for row in rows]

    for strategy in ("none", "simple", "first"):  # offsets of byte-level / Metaspace pieces, word grouping
        got = microformers.pipeline("token-classification", model=str(folder), aggregation_strategy=strategy)(texts)
        want = reference_module().pipeline("token-classification", model=str(folder), aggregation_strategy=strategy)(
            texts
        )
        # labels, words and offsets exactly; scores (two implementations' softmax) within 1e-5
        policy_close(plain(got), plain(want), atol=1e-5, msg=strategy)
