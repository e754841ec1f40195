"""The kernel's pipeline machinery: registration (entry point and in-process), dispatch, batching, errors.

No first-party plugin is needed: tasks here are registered in-process or by the test plugin
``microformers-test-mytask`` (tests/plugins/mytask) through a real entry point.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import microformers
from microformers import ChunkPipeline, ConfigError, MicroformersError, Pipeline, PluginError, UnknownModelTypeError
from microformers.errors import DeviceError
from microformers.pipelines import PIPELINE_REGISTRY
from microformers.plugins import IN_PROCESS, registry
from microformers_pipelines.base import resolve_device


class CharTokenizer:
    """Code points as token ids; 0 pads."""

    pad_token_id = 0
    padding_side = "right"

    def __call__(self, text: str) -> dict[str, torch.Tensor]:
        ids = torch.tensor([[ord(c) for c in text]])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


class SumModel(torch.nn.Module):
    """Records every batch it sees; returns per-row sums of the real tokens.

    exact: the sums are of small integers, exact in float in any order and batch, so tests compare them with ==.
    """

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))
        self.batches: list[torch.Tensor] = []

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        self.batches.append(input_ids.clone())
        return {"sums": (input_ids * attention_mask).sum(-1) * self.weight}


class SumPipeline(Pipeline):
    def _sanitize_parameters(self, scale: int | None = None, **rest: Any) -> tuple[dict, dict, dict]:
        if rest:
            raise ConfigError(f"unknown {sorted(rest)}")
        return {}, {}, ({} if scale is None else {"scale": scale})

    def preprocess(self, text: str) -> dict[str, Any]:
        return {**self.tokenizer(text), "text": text}

    def _forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        out = self.model(inputs["input_ids"], inputs["attention_mask"])
        return {"sums": out["sums"], "text": inputs["text"], "input_ids": inputs["input_ids"]}

    def postprocess(self, outputs: dict[str, Any], scale: int = 1) -> dict[str, Any]:
        return {"text": outputs["text"], "sum": int(outputs["sums"][0]) * scale, "width": outputs["input_ids"].shape[1]}


class WindowPipeline(ChunkPipeline):
    """Splits a text into 2-character windows; postprocess receives all windows of one input."""

    def preprocess(self, text: str) -> Iterator[dict[str, Any]]:
        for start in range(0, len(text), 2):
            yield self.tokenizer(text[start : start + 2])

    def _forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        return self.model(inputs["input_ids"], inputs["attention_mask"])

    def postprocess(self, windows: list[dict[str, Any]]) -> list[int]:
        return [int(w["sums"][0]) for w in windows]


def expected_sum(text: str) -> int:
    return sum(ord(c) for c in text)


@pytest.fixture
def sum_pipe() -> SumPipeline:
    return SumPipeline(SumModel(), CharTokenizer(), task="sum")


@pytest.fixture
def registered_task():
    PIPELINE_REGISTRY.register_pipeline("kernel-test-sum", SumPipeline, aliases=("kernel-test-alias",))
    yield "kernel-test-sum"
    registry._entries.pop(("pipelines", "kernel-test-sum"), None)


# -- running -------------------------------------------------------------------------------------
def test_single_list_and_generator_inputs(sum_pipe):
    assert sum_pipe("ab") == {"text": "ab", "sum": expected_sum("ab"), "width": 2}
    texts = ["a", "hello", "xyz"]
    assert [r["sum"] for r in sum_pipe(texts)] == [expected_sum(t) for t in texts]
    assert [r["sum"] for r in sum_pipe(tuple(texts))] == [expected_sum(t) for t in texts]
    stream = sum_pipe(t for t in texts)
    assert isinstance(stream, Iterator) and not isinstance(stream, list)
    assert [r["text"] for r in stream] == texts


def test_generator_is_consumed_lazily_in_batches(sum_pipe):
    pulled: list[str] = []

    def source() -> Iterator[str]:
        for text in ["a", "bb", "ccc", "dddd", "eeeee"]:
            pulled.append(text)
            yield text

    results = sum_pipe(source(), batch_size=2)
    assert pulled == []
    first = next(results)
    assert first["text"] == "a" and pulled == ["a", "bb"]
    assert [r["text"] for r in results] == ["bb", "ccc", "dddd", "eeeee"]


def test_batching_pads_and_keeps_order(sum_pipe):
    texts = ["a", "hello", "xyz", "q"]
    results = sum_pipe(texts, batch_size=3)
    assert [r["sum"] for r in results] == [expected_sum(t) for t in texts]
    first_batch = sum_pipe.model.batches[0]
    assert first_batch.shape == (3, 5)
    assert first_batch[0].tolist() == [ord("a"), 0, 0, 0, 0]  # right padding with the pad id
    assert [r["width"] for r in results] == [5, 5, 5, 1]  # each row keeps its (padded) batch width


def test_padding_side_comes_from_the_tokenizer(sum_pipe):
    sum_pipe.tokenizer.padding_side = "left"
    sum_pipe(["a", "bcd"], batch_size=2)
    assert sum_pipe.model.batches[0][0].tolist() == [0, 0, ord("a")]


def test_batch_size_from_construction_and_call(sum_pipe):
    pipe = SumPipeline(SumModel(), CharTokenizer(), batch_size=4)
    pipe(["a", "b", "c", "d", "e"])
    assert [b.shape[0] for b in pipe.model.batches] == [4, 1]
    pipe.model.batches.clear()
    pipe(["a", "b", "c"], batch_size=1)
    assert [b.shape[0] for b in pipe.model.batches] == [1, 1, 1]
    with pytest.raises(ConfigError, match="batch_size"):
        pipe(["a"], batch_size=0)


def test_parameters_at_construction_and_call(sum_pipe):
    pipe = SumPipeline(SumModel(), CharTokenizer(), scale=10)
    assert pipe("a")["sum"] == 10 * expected_sum("a")
    assert pipe("a", scale=2)["sum"] == 2 * expected_sum("a")
    with pytest.raises(ConfigError, match="unknown"):
        pipe("a", nonsense=1)


def test_chunk_pipeline_regroups_windows_per_input():
    pipe = WindowPipeline(SumModel(), CharTokenizer(), batch_size=3)
    texts = ["abcde", "xy", "hello world"]
    expected = [[expected_sum(t[i : i + 2]) for i in range(0, len(t), 2)] for t in texts]
    assert pipe(texts) == expected
    assert pipe("abcde") == expected[0]
    assert max(b.shape[0] for b in pipe.model.batches) == 3


def test_padding_without_pad_token_is_a_clear_error(sum_pipe):
    sum_pipe.tokenizer.pad_token_id = None
    with pytest.raises(ConfigError, match="pad token"):
        sum_pipe(["a", "bcd"], batch_size=2)
    assert [r["sum"] for r in sum_pipe(["a", "bcd"])] == [expected_sum("a"), expected_sum("bcd")]


def test_model_goes_to_eval_mode_and_device(sum_pipe, monkeypatch):
    model = SumModel().train()
    pipe = SumPipeline(model, CharTokenizer(), device="cpu", dtype="float64")
    assert not model.training and model.weight.dtype == torch.float64
    assert pipe.device == torch.device("cpu")
    assert resolve_device(-1) == torch.device("cpu")
    # a CUDA index names a CUDA device where there is one (simulated), and is refused where there is none
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device(0) == torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match=r"^device=0: this machine has no cuda device"):
        resolve_device(0)
    with pytest.raises(ConfigError, match="device"):
        resolve_device("not a device")


def test_missing_tokenizer_is_a_clear_error():
    with pytest.raises(ConfigError, match="tokenizer"):
        SumPipeline(SumModel(), None, task="sum")


# -- registration and dispatch -------------------------------------------------------------------
def test_in_process_registration_and_alias(registered_task):
    assert registered_task in PIPELINE_REGISTRY.get_supported_tasks()
    assert "kernel-test-alias" in PIPELINE_REGISTRY.get_supported_tasks()
    pipe = microformers.pipeline("kernel-test-alias", model=SumModel(), tokenizer=CharTokenizer())
    assert isinstance(pipe, SumPipeline) and pipe.task == registered_task
    assert pipe("hi")["sum"] == expected_sum("hi")
    reg = registry.get("pipelines", registered_task)
    assert reg.plugin == IN_PROCESS and reg.meta["model_class"] == ()


def test_register_pipeline_records_head_and_default():
    PIPELINE_REGISTRY.register_pipeline(
        "kernel-test-heads",
        SumPipeline,
        pt_model=microformers.AutoModelForMaskedLM,
        default={"pt": ("some/model", "main")},
    )
    try:
        meta = registry.get("pipelines", "kernel-test-heads").meta
        assert meta["model_class"] == ("AutoModelForMaskedLM",)
        assert meta["default_model"] == "some/model"
        assert PIPELINE_REGISTRY.to_dict()["kernel-test-heads"]["default_model"] == "some/model"
    finally:
        registry._entries.pop(("pipelines", "kernel-test-heads"), None)
    with pytest.raises(ConfigError, match="task"):
        PIPELINE_REGISTRY.register_pipeline("", SumPipeline)


def test_unknown_task_lists_installed_ones(registered_task):
    with pytest.raises((UnknownModelTypeError, PluginError)) as info:
        microformers.pipeline("no-such-task")
    message = str(info.value)
    assert "no-such-task" in message and registered_task in message and "my-task" in message


def test_no_task_is_a_clear_error():
    with pytest.raises(ConfigError, match="pass a task"):
        microformers.pipeline(model=SumModel())


def test_no_model_and_no_default_asks_for_model(registered_task):
    with pytest.raises(ConfigError, match="model="):
        microformers.pipeline(registered_task, tokenizer=CharTokenizer())


def test_head_that_does_not_fit_is_refused(toy_model, saved_toy):
    # the toy plugin registers only AutoModelForCausalLM for model_type "toy"
    PIPELINE_REGISTRY.register_pipeline("kernel-test-lm", SumPipeline, pt_model="AutoModelForCausalLM")
    PIPELINE_REGISTRY.register_pipeline("kernel-test-cls", SumPipeline, pt_model="AutoModelForSequenceClassification")
    try:
        pipe = microformers.pipeline("kernel-test-lm", model=toy_model, tokenizer=CharTokenizer())
        assert pipe.model is toy_model
        with pytest.raises(ConfigError, match="AutoModelForSequenceClassification"):
            microformers.pipeline("kernel-test-cls", model=str(saved_toy), tokenizer=CharTokenizer())
    finally:
        registry._entries.pop(("pipelines", "kernel-test-lm"), None)
        registry._entries.pop(("pipelines", "kernel-test-cls"), None)


def test_checkpoint_saved_with_another_head_is_refused(saved_toy):
    import json

    config_path = saved_toy / "config.json"
    config = json.loads(config_path.read_text())
    assert config["architectures"] == ["ToyForCausalLM"]
    from microformers.pipelines import check_checkpoint_head

    microformers.AutoConfig.from_pretrained(saved_toy)  # loads fine
    check_checkpoint_head(microformers.AutoConfig.from_pretrained(saved_toy), "t", ("AutoModelForCausalLM",), "x")
    registry.add("models", ("toy", "AutoModelForMaskedLM"), "microformers_test_toy.modeling_toy:ToyForCausalLM2")
    registry.add("architectures", "ToyForCausalLM2", "x", model_type="toy")
    try:
        with pytest.raises(ConfigError, match="ToyForCausalLM"):
            check_checkpoint_head(
                microformers.AutoConfig.from_pretrained(saved_toy), "fill", ("AutoModelForMaskedLM",), "toy"
            )
    finally:
        registry._entries.pop(("models", ("toy", "AutoModelForMaskedLM")), None)
        registry._entries.pop(("architectures", "ToyForCausalLM2"), None)


# -- a task from a real entry point --------------------------------------------------------------
def test_custom_task_from_a_plugin_entry_point():
    reg = registry.get("pipelines", "my-task")
    assert reg is not None and reg.plugin == "mytask"
    assert registry.plugins["mytask"].distribution == "microformers-test-mytask"
    pipe = microformers.pipeline("my-task")
    assert pipe("banana") == {"text": "banana", "length": 6, "vowels": 3}
    assert pipe(["sky", "queue"], batch_size=2, shout=True) == [
        {"text": "SKY", "length": 3, "vowels": 0},
        {"text": "QUEUE", "length": 5, "vowels": 4},
    ]
    assert type(microformers.pipeline("my-alias")) is type(pipe)
    with pytest.raises(MicroformersError, match="non-empty"):
        pipe("")


def test_in_process_registration_wins_over_the_plugin():
    PIPELINE_REGISTRY.register_pipeline("my-task", SumPipeline)
    try:
        assert registry.get("pipelines", "my-task").plugin == IN_PROCESS
        pipe = microformers.pipeline("my-task", model=SumModel(), tokenizer=CharTokenizer())
        assert isinstance(pipe, SumPipeline)
    finally:
        entries = registry._entries[("pipelines", "my-task")]
        entries[:] = [r for r in entries if r.plugin != IN_PROCESS]
    assert registry.get("pipelines", "my-task").plugin == "mytask"
