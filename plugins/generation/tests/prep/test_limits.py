"""Generation limits: memory follows the tokens produced, max_time stops every strategy."""

from __future__ import annotations

import pytest
import torch

from microformers import GenerationConfig


@pytest.fixture
def unbounded_model(tiny_model_class, tiny_config_class):
    """The tiny model with no declared context: positions wrap around, so nothing clamps max_length."""

    class Unbounded(tiny_model_class):
        def forward(self, input_ids, position_ids=None, **kwargs):
            if position_ids is not None:
                position_ids = position_ids % self.config.vocab_size
            return super().forward(input_ids, position_ids=position_ids, **kwargs)

    torch.manual_seed(0)
    model = Unbounded(tiny_config_class(bos_token_id=1, eos_token_id=None, pad_token_id=0)).eval()
    model.config.max_position_embeddings = None
    model.generation_config = GenerationConfig(pad_token_id=0)
    return model


@pytest.mark.parametrize(
    "settings",
    [{}, {"do_sample": True}, {"num_beams": 3}, {"num_beams": 2, "do_sample": True, "num_return_sequences": 2}],
)
def test_max_time_stops_every_strategy_and_nothing_is_sized_for_max_new_tokens(unbounded_model, settings):
    """Buffers sized for 10**9 new tokens (x beams) could not be allocated; they grow with the tokens instead."""
    ids = torch.tensor([[3, 4, 5], [6, 7, 8]])
    out = unbounded_model.generate(ids, max_new_tokens=10**9, max_time=0.3, **settings)
    rows = 2 * settings.get("num_return_sequences", 1)
    assert out.shape[0] == rows and 3 < out.shape[1] < 10**6


@pytest.mark.parametrize("settings", [{"num_beams": 10**9}, {"do_sample": True, "num_return_sequences": 10**9}])
def test_rows_that_cannot_fit_in_memory_are_refused_before_expanding(unbounded_model, settings):
    from microformers import GenerationError

    ids = torch.tensor([[3, 4, 5]])
    with pytest.raises(GenerationError, match=r"makes 1000000000 rows, whose first step alone .* GiB, more than"):
        unbounded_model.generate(ids, max_new_tokens=2, **settings)


@pytest.mark.parametrize("num_beams", [25, 10**7])
def test_more_beams_than_the_vocabulary_are_refused_before_expanding(unbounded_model, num_beams):
    """The tiny model's memory would allow 10**7 rows, which then ran for minutes: refused at once."""
    from microformers import GenerationError

    ids = torch.tensor([[3, 4, 5]])
    with pytest.raises(
        GenerationError, match=rf"num_beams={num_beams} is more than the model's vocabulary \(24 tokens\)"
    ):
        unbounded_model.generate(ids, max_new_tokens=2, num_beams=num_beams)
    assert unbounded_model.generate(ids, max_new_tokens=2, num_beams=24).shape == (1, 5)  # the bound itself runs


@pytest.mark.parametrize(
    ("batch", "settings"),
    [(1, {"do_sample": True, "num_return_sequences": 10**7}), (2**12, {"num_beams": 24, "num_return_sequences": 2})],
)
def test_more_expanded_rows_than_one_call_decodes_are_refused_before_expanding(unbounded_model, batch, settings):
    from microformers import GenerationError

    ids = torch.tensor([[3, 4, 5]]).expand(batch, 3)
    with pytest.raises(GenerationError, match=r"rows, more than the 65,536 one generate\(\) call decodes together"):
        unbounded_model.generate(ids, max_new_tokens=2, **settings)
