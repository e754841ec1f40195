"""A tiny random Llama checkpoint saved by the reference implementation, loaded by both libraries."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

# the tests share generation_similarity.py (pytest runs with --import-mode=importlib)
sys.path.insert(0, str(Path(__file__).parent))

VOCAB = 96


@pytest.fixture(scope="session")
def llama_folder(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import transformers  # the test oracle only

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # sharper distributions than the random init, so beams and sampling differ
        model.lm_head.weight.mul_(8)
    folder = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def reference_model(llama_folder: Any) -> Any:
    import transformers

    return transformers.LlamaForCausalLM.from_pretrained(llama_folder).eval()


@pytest.fixture(scope="session")
def model(llama_folder: Any) -> Any:
    import microformers

    return microformers.AutoModelForCausalLM.from_pretrained(llama_folder)


@pytest.fixture
def prompts() -> dict[str, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (3, 8), generator=generator)
    mask = torch.ones_like(ids)
    ids[1, :3] = 0
    mask[1, :3] = 0
    ids[2, :5] = 0
    mask[2, :5] = 0
    return {
        "single": {"input_ids": ids[:1], "attention_mask": mask[:1]},
        "batch": {"input_ids": ids, "attention_mask": mask},
    }


class CharTokenizer:
    """Token id i decodes to one printable character (ids below 3 are special and decode to nothing)."""

    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789 .,!?ABCDEFGHIJKLMNOPQRSTUVWXYZ-+*/=()[]{}<>;:'\"#%&@$^_|~"

    def decode(self, ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return "".join(self.alphabet[i - 3] for i in ids if i >= 3)


@pytest.fixture
def char_tokenizer() -> CharTokenizer:
    return CharTokenizer()
