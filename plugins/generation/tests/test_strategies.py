"""Strategy selection: the standard ones, a third-party plugin's, custom_generate; bad input."""

from __future__ import annotations

import gc
import textwrap
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from generation_marked_tiny import _MarkedTiny
from generation_marked_tiny import marked_tiny as _marked_tiny
from generation_stand_ins import TinyConfig

from microformers import GenerationConfig, GenerationError, PluginError, RemoteCodeError, registry
from microformers.generation import select_strategy
from microformers_generation import LogitsProcessorList
from microformers_generation.strategies import TokenByToken

NEG = float("-inf")


def test_standard_strategies_come_from_this_plugin():
    for name in ("greedy", "sample", "beam_search"):
        assert registry.get("generation_strategies", name).plugin == "generation"
    assert select_strategy(GenerationConfig(num_beams=2).with_defaults()).name == "beam_search"
    assert select_strategy(GenerationConfig(do_sample=True).with_defaults()).name == "sample"
    assert select_strategy(GenerationConfig().with_defaults()).name == "greedy"


def test_strategy_plugin_installed_through_entry_point_changes_output(model, prompts):
    registration = registry.get("generation_strategies", "least_likely")
    assert registration is not None and registration.plugin == "test-strategy"
    greedy = model.generate(**prompts["batch"], max_new_tokens=6)
    by_name = model.generate(**prompts["batch"], max_new_tokens=6, strategy="least_likely")
    by_config = model.generate(
        **prompts["batch"], generation_config=GenerationConfig(least_likely=True, max_new_tokens=6)
    )
    assert by_name.shape == greedy.shape
    assert not torch.equal(by_name[:, 8:], greedy[:, 8:])
    assert torch.equal(by_name, by_config)  # exact: the same strategy on the same eager path and shapes, run twice
    # it has no builders of its own: the kernel gave it this plugin's processors (bad words apply)
    banned = int(by_name[0, 8])
    with_bad_words = model.generate(
        **prompts["batch"], max_new_tokens=6, strategy="least_likely", bad_words_ids=[[banned]]
    )
    assert int(with_bad_words[0, 8]) != banned


def test_registered_name_through_custom_generate(model, prompts):
    by_custom = model.generate(**prompts["single"], max_new_tokens=4, custom_generate="least_likely")
    # exact: the same strategy on the same eager path and shapes, run twice
    assert torch.equal(by_custom, model.generate(**prompts["single"], max_new_tokens=4, strategy="least_likely"))


def test_unknown_strategy_name_says_what_is_installed(model, prompts):
    with pytest.raises(PluginError, match="least_likely"):
        model.generate(**prompts["single"], strategy="no-such-strategy")


def test_custom_generate_callable_runs_its_own_loop(model, prompts):
    def always_first_allowed(model, input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs):
        while not bool(stopping_criteria(input_ids, None).all()):
            input_ids = torch.cat((input_ids, torch.full((input_ids.shape[0], 1), 5)), dim=1)
        return input_ids

    out = model.generate(**prompts["batch"], max_new_tokens=3, custom_generate=always_first_allowed)
    assert out[:, 8:].tolist() == [[5, 5, 5]] * 3


def test_custom_generate_folder_changes_output_and_needs_consent(model, prompts, tmp_path):
    code = tmp_path / "custom_generate"
    code.mkdir()
    (code / "generate.py").write_text(
        textwrap.dedent(
            """
            from microformers import GenerationMixin

            def generate(model, **kwargs):
                # greedy decoding that never repeats the previous token
                kwargs["no_repeat_ngram_size"] = 1
                return GenerationMixin.generate(model, **kwargs)
            """
        )
    )
    (code / "requirements.txt").write_text("torch>=2\n")
    with pytest.raises(RemoteCodeError, match=r"custom_generate[/\\]generate\.py"):
        model.generate(**prompts["single"], max_new_tokens=8, custom_generate=str(tmp_path))
    plain = model.generate(**prompts["single"], max_new_tokens=8)
    custom = model.generate(
        **prompts["single"], max_new_tokens=8, custom_generate=str(tmp_path), trust_remote_code=True
    )
    assert not torch.equal(plain, custom)
    assert len(set(custom[0].tolist())) == custom.shape[1]  # no token twice


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"num_beams": 2, "num_return_sequences": 3}, "num_return_sequences=3"),
        ({"do_sample": True, "top_p": 0.0}, "top_p"),
        ({"do_sample": True, "top_p": 1.5}, "top_p"),
        ({"do_sample": True, "temperature": -1.0}, "temperature"),
    ],
)
def test_bad_settings(model, prompts, kwargs, named):
    with pytest.raises(GenerationError, match=named):
        model.generate(**prompts["single"], max_new_tokens=2, **kwargs)


def test_missing_pad_token_for_a_batch(model, prompts):
    original = model.generation_config
    model.generation_config = GenerationConfig(eos_token_id=None, pad_token_id=None)
    try:
        with pytest.raises(GenerationError, match="pad_token_id"):
            model.generate(**prompts["batch"], max_new_tokens=2)
    finally:
        model.generation_config = original


def test_streamer_with_beam_search_is_refused(model, prompts):
    class Streamer:
        def put(self, value):
            pass

        def end(self):
            pass

    with pytest.raises(GenerationError, match="streamer"):
        model.generate(**prompts["single"], num_beams=2, streamer=Streamer())


def test_generation_config_is_saved_with_the_model(model, tmp_path):
    import transformers

    model.save_pretrained(tmp_path)
    reloaded = transformers.GenerationConfig.from_pretrained(tmp_path)
    assert reloaded.eos_token_id == model.generation_config.eos_token_id
    assert reloaded.pad_token_id == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"colour": 1}, r"neither generation settings nor inputs of _MarkedTiny\.forward: \['colour'\]"),
        (
            {"num_beams": 2, "streamer": SimpleNamespace(put=print, end=print)},
            r"^streamer= works with one sequence per step",
        ),
        ({"synced_gpus": True}, r"^generate\(\): synced_gpus= is not supported here"),
        ({"assistant_tokenizer": object()}, r"^generate\(\): assistant_tokenizer= is not supported here"),
        ({"input_ids": torch.tensor([[5]])}, r"^generate\(\) got both inputs and input_ids"),
        ({"inputs": torch.zeros(1, 0, dtype=torch.long)}, r"^input_ids is empty; pass at least one token"),
    ],
)
def test_generate_refusals_say_what_to_change(kwargs: dict[str, Any], message: str) -> None:
    kwargs = {"inputs": torch.tensor([[5, 6]]), **kwargs}
    with pytest.raises(GenerationError, match=message):
        _marked_tiny().generate(max_new_tokens=2, **kwargs)


def test_a_batch_without_pad_or_end_token_is_refused_naming_both() -> None:
    torch.manual_seed(0)
    model = _MarkedTiny(TinyConfig()).eval()
    with pytest.raises(
        GenerationError,
        match=r"rows that finish early\), but neither pad_token_id nor eos_token_id is set; pass pad_token_id=\.\.\. or set model",
    ):
        model.generate(torch.tensor([[5, 6], [7, 8]]), max_new_tokens=2)


def test_input_ids_are_checked_against_the_embedding_table(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model.config, "vocab_size", 200)  # a config that disagrees with the 96 embeddings
    with pytest.raises(GenerationError, match="from 5 to 100, outside the model's vocabulary of 96 ids"):
        model.generate(torch.tensor([[5, 100]]), max_new_tokens=2)


def test_a_strategy_builds_its_own_processors() -> None:
    class ForceSeven(TokenByToken):
        def build_logits_processor(self, model: Any, config: GenerationConfig, **kwargs: Any) -> LogitsProcessorList:
            processors = super().build_logits_processor(model, config, **kwargs)
            processors.append(lambda ids, scores: torch.where(torch.arange(scores.shape[-1]) == 7, 0.0, NEG))
            return processors

    model = _marked_tiny()
    out = ForceSeven("force-seven", sample=False)(
        model, torch.tensor([[5, 6]]), generation_config=GenerationConfig(max_new_tokens=3), model_kwargs={}
    )
    assert out.tolist() == [[5, 6, 7, 7, 7]]


class _RecordsCollector:
    """A logits processor that notes whether Python's cycle collector is on at each step."""

    def __init__(self) -> None:
        self.enabled: list[bool] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.enabled.append(gc.isenabled())
        return scores


def test_the_cycle_collector_is_off_while_decoding_and_back_after(model, prompts):
    record = _RecordsCollector()
    model.generate(**prompts["single"], max_new_tokens=3, logits_processor=LogitsProcessorList([record]))
    assert record.enabled == [False, False, False]
    assert gc.isenabled()


def test_the_cycle_collector_comes_back_after_a_failed_call_and_stays_off_if_the_caller_had_it_off(model, prompts):
    def fails(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("a processor failed")

    with pytest.raises(RuntimeError, match="a processor failed"):
        model.generate(**prompts["single"], max_new_tokens=2, logits_processor=LogitsProcessorList([fails]))
    assert gc.isenabled()
    gc.disable()
    try:
        model.generate(**prompts["single"], max_new_tokens=2)
        assert not gc.isenabled()  # the caller's choice stands
    finally:
        gc.enable()
