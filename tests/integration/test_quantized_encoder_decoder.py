"""int8 / int4 quantization of encoder-decoder models, whose encoder and decoder share one embedding table."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

import microformers
from parity.harness import make_reference_checkpoint

SHAPES = {
    "marian": (
        "MarianConfig",
        "MarianMTModel",
        {
            "vocab_size": 96,
            "d_model": 64,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 64,
            "decoder_ffn_dim": 64,
            "max_position_embeddings": 64,
            "pad_token_id": 0,
            "decoder_start_token_id": 0,
        },
    ),
    "t5": (
        "T5Config",
        "T5ForConditionalGeneration",
        {
            "vocab_size": 96,
            "d_model": 64,
            "d_kv": 16,
            "d_ff": 64,
            "num_layers": 2,
            "num_heads": 4,
            "decoder_start_token_id": 0,
        },
    ),
}


@pytest.mark.parametrize("family", sorted(SHAPES))
@pytest.mark.parametrize("config", [microformers.Int8Config, microformers.Int4Config])
def test_quantized_encoder_decoder_keeps_one_shared_embedding_and_close_logits(
    family: str, config: type, tmp_path: Path
) -> None:
    config_name, model_name, kwargs = SHAPES[family]
    folder, _ = make_reference_checkpoint(config_name, model_name, tmp_path, **kwargs)
    plain = microformers.AutoModelForSeq2SeqLM.from_pretrained(folder)
    quantized = microformers.AutoModelForSeq2SeqLM.from_pretrained(folder, quantization_config=config())
    base = quantized.get_encoder().embed_tokens
    assert quantized.get_decoder().embed_tokens is base
    assert type(base).__name__ == "QuantEmbedding"
    ids = torch.randint(3, 96, (2, 7), generator=torch.Generator().manual_seed(0))
    start = torch.zeros((2, 1), dtype=torch.long)
    with torch.no_grad():
        want = plain(input_ids=ids, decoder_input_ids=start).logits
        got = quantized(input_ids=ids, decoder_input_ids=start).logits
        tokens = quantized.generate(ids, max_new_tokens=4, num_beams=2)
    # quantization error, not a wrong table (that would be as large as the logits themselves)
    relative = 0.1 if config is microformers.Int8Config else 0.3
    assert float((got - want).abs().max()) < relative * float(want.abs().max())
    assert tokens.shape[0] == 2
