"""microformers-bart through the SDK's conformance kit (BART and mBART, tiny configs, differing depths)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from microformers_bart.configuration_bart import BartConfig, MBartConfig
from microformers_bart.modeling_bart import (
    BartForConditionalGeneration,
    BartForQuestionAnswering,
    BartForSequenceClassification,
    BartModel,
)
from microformers_bart.modeling_mbart import (
    MBartForConditionalGeneration,
    MBartForQuestionAnswering,
    MBartForSequenceClassification,
    MBartModel,
)
from microformers_sdk.testing import ModelConformanceTests, assert_close, pad_rows, random_token_ids

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
}
EOS = 2


class Seq2SeqConformance(ModelConformanceTests):
    """The kit's suite with its decoder-only cache check replaced by the encoder-decoder one."""

    padding_side = "right"  # learned absolute positions count from the first token

    def test_cache_equivalence(self, model_class: type) -> None:
        """Encoder once, then decoder tokens through the returned cache, equal one full forward (padded source)."""
        _, model, _ = self._setup(model_class)
        config = model.config
        pad = self.pad_token_id(config)
        rows = [random_token_ids(config, 1, n, seed=3 + i, avoid=pad)[0] for i, n in enumerate((8, 5))]
        ids, mask = pad_rows(rows, pad, "right")
        decoder_ids = random_token_ids(config, 2, 6, seed=9, avoid=pad)
        with torch.no_grad():
            full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, use_cache=False)
            encoded = model.get_encoder()(input_ids=ids, attention_mask=mask, return_dict=True)
            cache, steps = None, []
            for start, end in ((0, 3), (3, 4), (4, 5), (5, 6)):
                step = model(
                    attention_mask=mask, decoder_input_ids=decoder_ids[:, start:end], encoder_outputs=encoded,
                    past_key_values=cache, use_cache=True, return_dict=True,
                )  # fmt: skip
                cache = step.past_key_values
                steps.append(step.logits if "logits" in step else step.last_hidden_state)
        assert cache.get_seq_length() == 6
        want = full.logits if "logits" in full else full.last_hidden_state
        assert_close(torch.cat(steps, dim=1), want, atol=self.atol, msg="cached decoding vs full forward")


class TestBartConformance(Seq2SeqConformance):
    config_class = BartConfig
    config_kwargs: ClassVar[dict[str, Any]] = TINY
    model_classes = (BartModel, BartForConditionalGeneration, BartForQuestionAnswering)


class TestMBartConformance(Seq2SeqConformance):
    config_class = MBartConfig
    config_kwargs: ClassVar[dict[str, Any]] = {**TINY, "encoder_layers": 3, "decoder_layers": 2}
    model_classes = (MBartModel, MBartForConditionalGeneration, MBartForQuestionAnswering)


class ClassificationConformance(ModelConformanceTests):
    """The classifier pools the state at the last eos token: every input row ends with one."""

    padding_side = "right"

    def make_inputs(self, config: Any) -> dict[str, torch.Tensor]:
        inputs = super().make_inputs(config)
        ids = inputs["input_ids"].masked_fill(inputs["input_ids"] == EOS, EOS + 1)
        ids[:, -1] = EOS
        return {"input_ids": ids, "attention_mask": inputs["attention_mask"]}

    def test_padding_invariance(self, model_class: type) -> None:
        """A right-padded row classifies as it does alone (the kit's own check draws rows without eos)."""
        _, model, _ = self._setup(model_class)
        pad = self.pad_token_id(model.config)
        rows = []
        for seed, length in enumerate((7, 4, 2)):
            row = random_token_ids(model.config, 1, length, seed=seed, avoid=pad)[0]
            row = row.masked_fill(row == EOS, EOS + 1)
            row[-1] = EOS
            rows.append(row)
        ids, mask = pad_rows(rows, pad, "right")
        with torch.no_grad():
            padded = model(input_ids=ids, attention_mask=mask).logits
            for index, row in enumerate(rows):
                alone = model(input_ids=row[None], attention_mask=torch.ones(1, len(row), dtype=torch.long)).logits
                assert_close(padded[index], alone[0], atol=self.atol, msg=f"padded row {index} vs alone")


class TestBartClassificationConformance(ClassificationConformance):
    config_class = BartConfig
    config_kwargs: ClassVar[dict[str, Any]] = {**TINY, "num_labels": 3}
    model_classes = (BartForSequenceClassification,)


class TestMBartClassificationConformance(ClassificationConformance):
    config_class = MBartConfig
    config_kwargs: ClassVar[dict[str, Any]] = {**TINY, "num_labels": 3}
    model_classes = (MBartForSequenceClassification,)
