"""microformers-marian through the SDK's conformance kit, with shared and with separate vocabularies."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from microformers_marian.configuration_marian import MarianConfig
from microformers_marian.modeling_marian import MarianModel, MarianMTModel, sinusoidal_table
from microformers_sdk.testing import ModelConformanceTests, assert_close, pad_rows, random_token_ids

PAD = 98
TINY: dict[str, Any] = {
    "vocab_size": 99,
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 3,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 40,
    "decoder_ffn_dim": 48,
    "max_position_embeddings": 48,
    "pad_token_id": PAD,
    "decoder_start_token_id": PAD,
    "scale_embedding": True,
}


class MarianConformance(ModelConformanceTests):
    padding_side = "right"  # positions count from the first token
    model_classes = (MarianModel, MarianMTModel)
    config_class = MarianConfig

    def test_cache_equivalence(self, model_class: type) -> None:
        """Encoder once, then decoder tokens through the returned cache, equal one full forward (padded source)."""
        _, model, _ = self._setup(model_class)
        config = model.config
        rows = [random_token_ids(config, 1, n, seed=3 + i, avoid=PAD)[0] for i, n in enumerate((8, 5))]
        ids, mask = pad_rows(rows, PAD, "right")
        decoder_ids = torch.randint(0, PAD, (2, 6), generator=torch.Generator().manual_seed(9))
        with torch.no_grad():
            full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, use_cache=False)
            encoded = model.get_encoder()(input_ids=ids, attention_mask=mask, return_dict=True)
            cache, steps = None, []
            for start, end in ((0, 2), (2, 3), (3, 4), (4, 5), (5, 6)):
                step = model(
                    attention_mask=mask, decoder_input_ids=decoder_ids[:, start:end], encoder_outputs=encoded,
                    past_key_values=cache, use_cache=True, return_dict=True,
                )  # fmt: skip
                cache = step.past_key_values
                steps.append(step[0])
        assert cache.get_seq_length() == 6
        assert_close(torch.cat(steps, dim=1), full[0], atol=self.atol, msg="cached decoding vs full forward")


class TestMarianSharedVocabularyConformance(MarianConformance):
    config_kwargs: ClassVar[dict[str, Any]] = TINY


class TestMarianSeparateVocabulariesConformance(MarianConformance):
    config_kwargs: ClassVar[dict[str, Any]] = {
        **TINY, "share_encoder_decoder_embeddings": False, "decoder_vocab_size": 120,
        "encoder_layers": 3, "decoder_layers": 1,
    }  # fmt: skip


def test_separate_vocabularies_give_each_stack_its_own_embeddings() -> None:
    config = MarianConfig(**TINY, share_encoder_decoder_embeddings=False, decoder_vocab_size=120)
    model = MarianMTModel(config)
    assert not hasattr(model.model, "shared")
    assert model.model.encoder.embed_tokens.num_embeddings == 99
    assert model.model.decoder.embed_tokens.num_embeddings == 120
    assert model.lm_head.weight is model.model.decoder.embed_tokens.weight
    assert model.final_logits_bias.shape == (1, 120)


def test_position_tables_are_computed_not_saved() -> None:
    model = MarianMTModel(MarianConfig(**TINY))
    assert not any("embed_positions" in name for name in model.state_dict())
    table = model.model.encoder.embed_positions.weight
    assert torch.equal(table, sinusoidal_table(48, 32))
    assert torch.equal(table[0, :16], torch.zeros(16)) and torch.equal(table[0, 16:], torch.ones(16))  # sin, then cos


def test_decoder_starts_from_the_pad_token() -> None:
    model = MarianMTModel(MarianConfig(**TINY)).eval()
    labels = torch.tensor([[5, 6, -100]])
    assert model.prepare_decoder_input_ids_from_labels(labels).tolist() == [[PAD, 5, 6]]
