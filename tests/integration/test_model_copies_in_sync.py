"""Code that model plugins keep as a copy of another plugin's, instead of deriving from it, stays in sync.

Where one family derives from another (Phi-3 from Llama, Qwen2-MoE from Mixtral, Mistral / Qwen2 / Qwen3
from Llama, RoBERTa from BERT) the subclass is the declaration and nothing is repeated. Where deriving
would make a model file harder to read, the file keeps its own copy, says so in a comment
("kept in sync with ... by tests/integration/test_model_copies_in_sync.py"), and is listed here: each
pair names both sides (distribution package, qualified name) and what legitimately differs between them
(a table of ``old -> new`` replacements applied to the first side's source). A change to one side
fails this test until the other side is updated too (or the difference is declared in the table).
"""

from __future__ import annotations

import importlib
import inspect
import textwrap
from typing import Any

import pytest

pytest.importorskip("torch")

# (package, "module:qualified.name")
Side = tuple[str, str]

# first side ~ second side, replacements turning the first side's source into the second's.
COPIES: list[tuple[Side, Side, dict[str, str]]] = [
    (
        # Phi-3's layer is Llama's plus residual dropout (its MLP is the fused one, so the layer is its own class).
        ("microformers_llama", "modeling_llama:LlamaDecoderLayer.forward"),
        ("microformers_phi3", "modeling_phi3:Phi3DecoderLayer.forward"),
        {
            "hidden_states + attended": "hidden_states + self._dropout(attended)",
            "hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))": (
                "hidden_states + self._dropout(self.mlp(self.post_attention_layernorm(hidden_states)))"
            ),
        },
    ),
    (
        # Gemma 2's base-model forward is Llama's; Llama's also counts a static step's positions as cached.
        ("microformers_llama", "modeling_llama:LlamaModel.forward"),
        ("microformers_gemma", "modeling_gemma2:Gemma2Model.forward"),
        {"    layer_inputs.advance(inputs.cache, inputs.inputs_embeds.shape[1])\n": ""},
    ),
    # ViT's self-attention is BERT's without head masks and without the decoder's cache and causality.
    (
        ("microformers_bert", "modeling_bert:BertSelfAttention.forward"),
        ("microformers_vit", "modeling_vit:ViTSelfAttention.forward"),
        {
            "    head_mask: torch.Tensor | None = None,\n": "",
            "    past_key_values: Cache | None = None,\n    is_causal: bool = False,\n": "",
            "    if past_key_values is not None:\n"
            "        key, value = past_key_values.update(key, value, self.layer_idx)\n": "",
            "return_weights=True,\n            is_causal=is_causal,\n        )  # fmt: skip": (
                "return_weights=True\n        )"
            ),
            "context = attention_fn(\n"
            "            query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, is_causal=is_causal\n"
            "        )": "context = attention_fn(query, key, value, attention_mask, scaling=self.scaling, dropout=dropout)",
            "dropout = self.attention_dropout if self.training else 0.0\n\n": (
                "dropout = self.attention_dropout if self.training else 0.0\n"
            ),
            "    if head_mask is not None:\n"
            "        # Scaling a head's probabilities scales its context by the same factor.\n"
            "        scale = head_mask[self.kept_heads].to(context.dtype).view(1, -1, 1, 1)\n"
            "        context = context * scale\n"
            "        weights = weights * scale if weights is not None else None\n": "",
        },
    ),
    # Whisper's attention is BART's but for k_proj's bias (set in __init__, not in the copied methods).
    (
        ("microformers_bart", "modeling_bart:BartAttention.forward"),
        ("microformers_whisper", "modeling_whisper:WhisperAttention.forward"),
        {},
    ),
    (
        ("microformers_bart", "modeling_bart:BartAttention._heads"),
        ("microformers_whisper", "modeling_whisper:WhisperAttention._heads"),
        {},
    ),
]

# Forwards that follow the Transformers calling convention with bodies of their own: the same parameters
# (names, order, defaults, annotations) but for the extra ones the second side declares.
SIGNATURES: list[tuple[Side, Side, tuple[str, ...]]] = [
    (
        ("microformers_llama", "modeling_llama:LlamaForCausalLM.forward"),
        ("microformers_gemma", "modeling_gemma2:Gemma2ForCausalLM.forward"),
        (),
    ),
    (
        ("microformers_llama", "modeling_llama:LlamaModel.forward"),
        ("microformers_gpt2", "modeling_gpt2:GPT2Model.forward"),
        ("token_type_ids",),
    ),
    (
        ("microformers_llama", "modeling_llama:LlamaForCausalLM.forward"),
        ("microformers_gpt2", "modeling_gpt2:GPT2LMHeadModel.forward"),
        ("token_type_ids",),
    ),
    # the encoder-decoders: T5's forwards take BART's parameters, plus the cache position T5 accepts
    (
        ("microformers_bart", "modeling_bart:BartModel.forward"),
        ("microformers_t5", "modeling_t5:T5Model.forward"),
        ("cache_position",),
    ),
    (
        ("microformers_bart", "modeling_bart:BartForConditionalGeneration.forward"),
        ("microformers_t5", "modeling_t5:T5ForConditionalGeneration.forward"),
        ("cache_position",),
    ),
]


def _resolve(side: Side) -> Any:
    package, target = side
    module_name, qualified = target.split(":")
    obj: Any = importlib.import_module(f"{package}.{module_name}")
    for part in qualified.split("."):
        obj = getattr(obj, part)
    return obj


def _source(side: Side) -> str:
    return textwrap.dedent(inspect.getsource(_resolve(side)))


def _name(side: Side) -> str:
    return f"{side[0]}.{side[1].replace(':', '.')}"


@pytest.mark.parametrize(
    ("first", "second", "renames"), COPIES, ids=lambda value: _name(value) if isinstance(value, tuple) else ""
)
def test_copied_code_stays_in_sync(first: Side, second: Side, renames: dict[str, str]) -> None:
    expected = _source(first)
    for old, new in renames.items():
        assert old in expected, f"{_name(first)} no longer contains {old!r}: update the rename table of this pair"
        expected = expected.replace(old, new)
    actual = _source(second)
    assert actual == expected, (
        f"{_name(second)} is kept as a copy of {_name(first)} (names differing as declared here) but the two "
        f"have drifted apart; update both (or declare the new difference in COPIES).\n"
        f"--- {_name(first)} after renames\n{expected}\n--- {_name(second)}\n{actual}"
    )


@pytest.mark.parametrize(
    ("first", "second", "extras"),
    SIGNATURES,
    ids=lambda value: _name(value) if isinstance(value, tuple) and len(value) == 2 and ":" in value[1] else "",
)
def test_calling_conventions_stay_in_sync(first: Side, second: Side, extras: tuple[str, ...]) -> None:
    def described(side: Side, skip: tuple[str, ...] = ()) -> list[tuple[str, Any, Any, Any]]:
        parameters = inspect.signature(_resolve(side)).parameters.values()
        return [(p.name, p.kind, p.default, p.annotation) for p in parameters if p.name not in skip]

    assert all(name in inspect.signature(_resolve(second)).parameters for name in extras)
    assert described(second, extras) == described(first), (
        f"{_name(second)} follows the parameters of {_name(first)} (plus {list(extras)}) but they have drifted "
        "apart; update both (or declare the new parameter in SIGNATURES)"
    )


def test_every_listed_copy_says_so_in_its_file() -> None:
    """A reader of the copy learns that it is one: the second side's module mentions this test."""
    missing = []
    for _first, second, _renames in [*COPIES, *SIGNATURES]:
        package, target = second
        module = importlib.import_module(f"{package}.{target.split(':')[0]}")
        if "test_model_copies_in_sync" not in inspect.getsource(module):
            missing.append(_name(second))
    assert not missing, f"say 'kept in sync with ... by tests/integration/test_model_copies_in_sync.py' at: {missing}"
