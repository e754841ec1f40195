"""What prepare() hands a strategy's loop, through an in-process strategy that records it."""

from __future__ import annotations

import textwrap

import pytest
import torch

from microformers import GenerationConfig, GenerationError, RemoteCodeError, registry
from microformers_generation import IncrementalDecoder, LogitsProcessor, StoppingCriteria, Strategy


class RecordingStrategy(Strategy):
    """Appends the token ``fill`` until max_length; remembers what prepare() handed its loop."""

    def __init__(self, fill: int = 5) -> None:
        self.fill = fill
        self.seen: dict = {}

    def applies(self, config: GenerationConfig) -> bool:
        return bool(getattr(config, "kernel_test_recording", False))

    def decode(
        self, model, input_ids, *, generation_config, logits_processor, stopping_criteria, streamer, model_kwargs
    ):
        self.seen = {
            "input_ids": input_ids,
            "config": generation_config,
            "processors": logits_processor,
            "criteria": stopping_criteria,
            "model_kwargs": model_kwargs,
        }
        extra = generation_config.max_length - input_ids.shape[1]
        return torch.cat((input_ids, torch.full((input_ids.shape[0], extra), self.fill)), dim=1)


@pytest.fixture(scope="module")
def recording() -> RecordingStrategy:
    strategy = RecordingStrategy()
    registry.add("generation_strategies", "kernel-test-recording", strategy, priority=10)
    return strategy


def run(model, recording, **kwargs):
    return model.generate(strategy="kernel-test-recording", **kwargs)


def test_strategy_by_name_gets_merged_config_and_absolute_max_length(tiny_model, recording):
    ids = torch.tensor([[3, 4, 5]])
    out = run(tiny_model, recording, input_ids=ids, max_new_tokens=4, top_k=7)
    assert out.tolist() == [[3, 4, 5, 5, 5, 5, 5]]
    config = recording.seen["config"]
    assert config.max_length == 7
    assert config.top_k == 7
    assert config.eos_token_id == 2  # from the model's config
    assert tiny_model.generation_config.top_k is None  # per-call settings do not leak into the model


def test_default_max_length_is_twenty_new_tokens(tiny_model, recording):
    run(tiny_model, recording, input_ids=torch.tensor([[3, 4]]))
    assert recording.seen["config"].max_length == 22


def test_strategy_picked_through_applies(tiny_model, recording):
    out = tiny_model.generate(torch.tensor([[3]]), generation_config=GenerationConfig(kernel_test_recording=True))
    assert recording.seen["input_ids"].tolist() == [[3]]
    assert out[0, 1:].unique().tolist() == [recording.fill]


def test_padding_mask_is_passed_only_when_there_is_padding(tiny_model, recording):
    ids = torch.tensor([[0, 3, 4], [5, 6, 7]])
    run(tiny_model, recording, input_ids=ids, attention_mask=torch.tensor([[0, 1, 1], [1, 1, 1]]), max_new_tokens=2)
    assert recording.seen["model_kwargs"]["attention_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    run(tiny_model, recording, input_ids=ids[1:], attention_mask=torch.ones(1, 3, dtype=torch.long), max_new_tokens=2)
    assert recording.seen["model_kwargs"]["attention_mask"] is None


def test_mask_is_inferred_from_pad_tokens(tiny_model, recording):
    run(tiny_model, recording, input_ids=torch.tensor([[0, 0, 4], [5, 6, 7]]), max_new_tokens=1)
    assert recording.seen["model_kwargs"]["attention_mask"].tolist() == [[0, 0, 1], [1, 1, 1]]


def test_pad_token_falls_back_to_first_eos(tiny_model, recording):
    tiny_model.generation_config = GenerationConfig(eos_token_id=[9, 2])
    run(tiny_model, recording, input_ids=torch.tensor([[3], [4]]), max_new_tokens=1)
    assert recording.seen["config"].pad_token_id == 9


def test_missing_pad_token_for_a_batch_is_an_error(tiny_model, recording):
    tiny_model.generation_config = GenerationConfig()
    with pytest.raises(GenerationError, match="pad_token_id"):
        run(tiny_model, recording, input_ids=torch.tensor([[3], [4]]), max_new_tokens=1)
    run(tiny_model, recording, input_ids=torch.tensor([[3]]), max_new_tokens=1)  # one row needs no padding


def test_right_padding_is_refused(tiny_model, recording):
    with pytest.raises(GenerationError, match="padding_side"):
        run(
            tiny_model,
            recording,
            input_ids=torch.tensor([[3, 4], [5, 0]]),
            attention_mask=torch.tensor([[1, 1], [1, 0]]),
            max_new_tokens=1,
        )


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"top_p": 1.2}, "top_p"),
        ({"num_beams": 2, "num_return_sequences": 4}, "num_return_sequences"),
        ({"max_length": 2}, "max_length"),
        ({"attention_mask": torch.ones(1, 5)}, "attention_mask"),
        ({"inputs_embeds": torch.ones(1, 2, 3)}, "inputs_embeds"),
        ({"num_return_sequences": 2}, "do_sample=True"),
        ({"max_new_tokenz": 3}, r"max_new_tokenz"),  # a typo is not silently passed to the model
        ({"streamer": object()}, "streamer=object"),
        ({"penalty_alpha": 0.6}, "penalty_alpha.*custom_generate"),
        ({"num_beam_groups": 2, "num_beams": 4}, "num_beam_groups.*custom_generate"),
        ({"dola_layers": "high"}, "dola_layers.*custom_generate"),
        ({"constraints": ["x"]}, "constraints.*custom_generate"),
    ],
)
def test_bad_settings_are_clear_errors(tiny_model, recording, kwargs, named):
    with pytest.raises(GenerationError, match=named):
        run(tiny_model, recording, input_ids=torch.tensor([[3, 4]]), **kwargs)


@pytest.mark.parametrize(
    ("ids", "named"),
    [
        (torch.tensor([[True, False]]), "torch.bool"),
        (torch.tensor([[3, 4]], dtype=torch.int8), "torch.int8"),
        (torch.zeros((0, 3), dtype=torch.long), "batch size of 0"),
        (torch.tensor([[3, 24]]), "vocabulary of 24"),
        (torch.tensor([[3, -1]]), "vocabulary"),
    ],
)
def test_bad_input_ids_are_clear_errors(tiny_model, recording, ids, named):
    with pytest.raises(GenerationError, match=named):
        run(tiny_model, recording, input_ids=ids)


def test_int32_ids_are_accepted_as_long(tiny_model, recording):
    run(tiny_model, recording, input_ids=torch.tensor([[3, 4]], dtype=torch.int32), max_new_tokens=1)
    assert recording.seen["input_ids"].dtype == torch.long


def test_absurd_length_is_clamped_to_the_context(tiny_model, recording, caplog):
    out = run(tiny_model, recording, input_ids=torch.tensor([[3, 4]]), max_new_tokens=10**12)
    assert out.shape == (1, tiny_model.config.max_position_embeddings)
    assert "max_position_embeddings=64" in caplog.text


def test_inputs_are_expanded_for_beams_and_return_sequences(tiny_model, recording):
    run(
        tiny_model, recording, input_ids=torch.tensor([[3], [4]]), num_beams=3, num_return_sequences=2, max_new_tokens=1
    )
    assert recording.seen["input_ids"].tolist() == [[3], [3], [3], [4], [4], [4]]


def test_callers_processors_and_criteria_reach_the_strategy(tiny_model, recording):
    class Marker(LogitsProcessor):
        def __call__(self, input_ids, scores):
            return scores

    class Never(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    marker, never = Marker(), Never()
    run(tiny_model, recording, input_ids=torch.tensor([[3]]), logits_processor=[marker], stopping_criteria=[never])
    assert any(p is marker for p in recording.seen["processors"])
    assert any(c is never for c in recording.seen["criteria"])


def test_custom_generate_callable_receives_prepared_inputs(tiny_model):
    seen = {}

    def loop(model, input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs):
        seen.update(model=model, config=generation_config, kwargs=model_kwargs, criteria=stopping_criteria)
        return "custom result"

    ids = torch.tensor([[0, 3], [4, 5]])
    result = tiny_model.generate(
        ids, attention_mask=torch.tensor([[0, 1], [1, 1]]), custom_generate=loop, max_new_tokens=3
    )
    assert result == "custom result"
    assert seen["model"] is tiny_model
    assert seen["config"].max_length == 5
    assert seen["kwargs"]["attention_mask"].tolist() == [[0, 1], [1, 1]]
    assert seen["kwargs"]["use_cache"] is True


def test_custom_generate_by_registered_name(tiny_model, recording):
    out = tiny_model.generate(torch.tensor([[3]]), custom_generate="kernel-test-recording", max_new_tokens=2)
    assert out.tolist() == [[3, 5, 5]]


def test_unknown_custom_generate_name_lists_installed_strategies(tiny_model, recording):
    with pytest.raises(GenerationError, match="kernel-test-recording"):
        tiny_model.generate(torch.tensor([[3]]), custom_generate="./no-such-folder")


def write_custom_folder(root, requirements: str | None = None):
    code = root / "custom_generate"
    code.mkdir(parents=True)
    (code / "helpers.py").write_text("MARK = 17\n")
    (code / "generate.py").write_text(
        textwrap.dedent(
            """
            import torch
            from .helpers import MARK

            def generate(model, inputs=None, input_ids=None, max_new_tokens=2, **kwargs):
                ids = inputs if inputs is not None else input_ids
                return torch.cat((ids, torch.full((ids.shape[0], max_new_tokens), MARK)), dim=1)
            """
        )
    )
    if requirements is not None:
        (code / "requirements.txt").write_text(requirements)
    return root


def test_custom_generate_folder_needs_trust_remote_code(tiny_model, tmp_path):
    folder = write_custom_folder(tmp_path / "model")
    with pytest.raises(RemoteCodeError, match=r"custom_generate[/\\]generate\.py") as caught:
        tiny_model.generate(torch.tensor([[3]]), custom_generate=str(folder))
    assert "trust_remote_code=True" in str(caught.value)
    out = tiny_model.generate(
        torch.tensor([[3]]), custom_generate=str(folder), trust_remote_code=True, max_new_tokens=3
    )
    assert out.tolist() == [[3, 17, 17, 17]]


def test_custom_generate_requirements_are_checked(tiny_model, tmp_path):
    folder = write_custom_folder(tmp_path / "model", "# comment\npackaging>=1\nno-such-package-xyz>=1.0\ntorch<0.1\n")
    with pytest.raises(RemoteCodeError, match="requirements.txt") as caught:
        tiny_model.generate(torch.tensor([[3]]), custom_generate=str(folder), trust_remote_code=True)
    message = str(caught.value)
    assert "no-such-package-xyz>=1.0 (not installed)" in message
    assert "torch<0.1 (installed:" in message
    assert "packaging" not in message.split("not met:")[1]


def test_custom_generate_folder_without_generate_py(tiny_model, tmp_path):
    (tmp_path / "custom_generate").mkdir()
    with pytest.raises(GenerationError, match="generate.py"):
        tiny_model.generate(torch.tensor([[3]]), custom_generate=str(tmp_path), trust_remote_code=True)


def test_incremental_decoder_matches_full_forward_with_left_padding(tiny_model):
    ids = torch.tensor([[0, 0, 3, 4], [5, 6, 7, 8]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    decoder = IncrementalDecoder(tiny_model, {"attention_mask": mask, "use_cache": True}, max_length=7)
    sequences = ids
    logits = decoder.prefill(ids)
    for _ in range(3):
        sequences = torch.cat((sequences, logits.argmax(-1, keepdim=True)), dim=1)
        logits = decoder.step(sequences)
    full_mask = torch.cat((mask, torch.ones(2, 3, dtype=torch.long)), dim=1)
    positions = (full_mask.cumsum(-1) - 1).masked_fill(full_mask == 0, 1)
    expected = tiny_model(sequences, attention_mask=full_mask, position_ids=positions).logits[:, -1]
    torch.testing.assert_close(logits, expected)
    assert [call["input_len"] for call in tiny_model.calls[-5:-1]] == [4, 1, 1, 1]  # only the new token
    assert decoder.attention_mask.shape == (2, 7)


def test_incremental_decoder_without_cache_reruns_everything(tiny_model):
    ids = torch.tensor([[3, 4]])
    decoder = IncrementalDecoder(tiny_model, {"attention_mask": None, "use_cache": False}, max_length=4)
    logits = decoder.prefill(ids)
    sequences = torch.cat((ids, logits.argmax(-1, keepdim=True)), dim=1)
    step_logits = decoder.step(sequences)
    torch.testing.assert_close(step_logits, tiny_model(sequences).logits[:, -1])
    assert tiny_model.calls[-2]["input_len"] == 3


def test_strategy_runs_without_autograd_and_returns_an_ordinary_tensor(tiny_model):
    """The loop runs in inference mode, but the sequences handed back are a normal tensor."""
    grad_states = []

    class Spying(RecordingStrategy):
        def decode(self, *args, **kwargs):
            grad_states.append((torch.is_grad_enabled(), torch.is_inference_mode_enabled()))
            return super().decode(*args, **kwargs)

    registry.add("generation_strategies", "kernel-test-spying", Spying())
    out = tiny_model.generate(torch.tensor([[3, 4]]), strategy="kernel-test-spying", max_new_tokens=2)
    assert grad_states == [(False, True)]
    assert not torch.is_inference(out)
    out.add_(0)  # in-place use outside inference mode works
    dict_out = tiny_model.generate(
        torch.tensor([[3, 4]]), strategy="kernel-test-spying", max_new_tokens=2, return_dict_in_generate=True
    )
    assert grad_states[-1] == (False, False)
    # return_dict_in_generate wraps what the strategy returned: the sequences, and nothing it did not record
    assert torch.equal(dict_out.sequences, torch.tensor([[3, 4, 5, 5]]))
    assert dict_out["sequences"] is dict_out.sequences and dict_out[0] is dict_out.sequences
    assert dict_out.scores is None and not torch.is_inference(dict_out.sequences)
