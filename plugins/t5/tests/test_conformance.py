"""microformers-t5 through the SDK's conformance kit.

The kit's inputs are encoder inputs; the encoder-decoder classes get decoder inputs too, and their padding and
cache checks are written here for the two-sided model (padding on the encoder side, the cache on the decoder side).
"""

from __future__ import annotations

from typing import Any

import torch

from microformers_sdk.testing import ModelConformanceTests, assert_close, pad_rows, random_token_ids
from microformers_t5.configuration_t5 import MT5Config, T5Config
from microformers_t5.modeling_t5 import (
    MT5ForConditionalGeneration,
    T5EncoderModel,
    T5ForConditionalGeneration,
    T5ForQuestionAnswering,
    T5ForTokenClassification,
    T5Model,
)

TINY: dict[str, Any] = {
    "vocab_size": 96,
    "d_model": 32,
    "d_kv": 8,
    "d_ff": 48,
    "num_layers": 2,
    "num_heads": 4,
    "relative_attention_num_buckets": 8,
    "relative_attention_max_distance": 16,
    "num_labels": 3,
}


class TestT5EncoderConformance(ModelConformanceTests):
    config_class = T5Config
    config_kwargs = TINY
    model_classes = (T5EncoderModel, T5ForTokenClassification)
    padding_side = "left"  # relative positions: either side works


class _Seq2SeqConformance(ModelConformanceTests):
    """The kit's checks with decoder inputs of the encoder's length (so labels shaped by the kit fit them)."""

    def make_inputs(self, config: Any) -> dict[str, torch.Tensor]:
        inputs = super().make_inputs(config)
        inputs["decoder_input_ids"] = random_token_ids(config, self.batch_size, self.seq_length, seed=5, avoid=0)
        return inputs

    def test_padding_invariance(self, model_class: type) -> None:
        """An encoder row padded on either side gives the decoder what the unpadded row gives."""
        _, model, _ = self._setup(model_class)
        config = model.config
        rows = [random_token_ids(config, 1, n, seed=1 + i, avoid=0)[0] for i, n in enumerate((7, 4, 2))]
        decoder = random_token_ids(config, 3, 5, seed=9, avoid=0)
        for side in ("left", "right"):
            ids, mask = pad_rows(rows, 0, side)
            with torch.no_grad():
                padded = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder)
                for index, row in enumerate(rows):
                    alone = model(input_ids=row[None], decoder_input_ids=decoder[index : index + 1])
                    for name in ("logits", "last_hidden_state", "start_logits"):
                        if padded.get(name) is not None:
                            assert_close(padded[name][index], alone[name][0], msg=f"{side}-padded row {index} {name}")

    def test_cache_equivalence(self, model_class: type) -> None:
        """Decoding one token at a time through the cache equals one full decoder pass (padded encoder batch)."""
        _, model, _ = self._setup(model_class)
        config = model.config
        rows = [random_token_ids(config, 1, n, seed=3 + i, avoid=0)[0] for i, n in enumerate((6, 3))]
        ids, mask = pad_rows(rows, 0, "left")
        decoder = random_token_ids(config, 2, 6, seed=4, avoid=0)
        with torch.no_grad():
            full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder, use_cache=False)
            encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask, return_dict=True)
            cache, steps = None, []
            for position in range(decoder.shape[1]):
                step = model(
                    attention_mask=mask, decoder_input_ids=decoder[:, position : position + 1],
                    encoder_outputs=encoder_outputs, past_key_values=cache, use_cache=True, return_dict=True,
                )  # fmt: skip
                cache = step.past_key_values
                steps.append(step[0] if step.get("loss") is None else step[1])
        assert cache.get_seq_length() == decoder.shape[1]
        assert_close(torch.cat(steps, dim=1), full[0], msg="cached decoding vs full forward")


class TestT5Seq2SeqConformance(_Seq2SeqConformance):
    config_class = T5Config
    config_kwargs = TINY
    model_classes = (T5Model, T5ForConditionalGeneration)


class TestFlanT5Conformance(_Seq2SeqConformance):
    config_class = T5Config
    config_kwargs = {**TINY, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False, "num_decoder_layers": 3}
    model_classes = (T5ForConditionalGeneration,)


class TestMT5Conformance(_Seq2SeqConformance):
    config_class = MT5Config
    config_kwargs = {**TINY, "num_decoder_layers": 1}
    model_classes = (MT5ForConditionalGeneration,)


class TestT5QuestionAnsweringConformance(_Seq2SeqConformance):
    config_class = T5Config
    config_kwargs = {**TINY, "num_labels": 2}
    model_classes = (T5ForQuestionAnswering,)
    # A bias added to every position's logit cancels out of a softmax over positions: its gradient is exactly 0.
    parameters_without_gradient = (r"qa_outputs\.bias$",)
