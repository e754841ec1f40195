"""text2text-generation: encoder and decoder graphs of tiny random T5 and BART models, run by ONNX Runtime.

Each family is exported once per module (an export takes seconds); the export itself compares every graph with
the PyTorch model on other shapes than the export's (its reported difference is asserted here). The tests then
check the graph names ONNX Runtime users expect, ``ORTModelForSeq2SeqLM.generate`` (greedy and beam search, through
microformers-generation) against the PyTorch model's, and the text2text pipelines on the exported model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import microformers
from microformers import cli
from microformers_sdk.testing import assert_close, assert_similar_generation, one_thread  # noqa: F401

pytest.importorskip("onnxruntime")

from microformers_onnx import export_onnx
from microformers_onnx.export import OnnxExportError

WORDS = "the a cat dog sat on mat hello world good morning house is big small red blue green one two three .".split()
SPECIALS = ["<pad>", "</s>", "<unk>"]
FAMILIES: dict[str, dict[str, Any]] = {
    "t5": {"d_model": 16, "d_kv": 8, "d_ff": 24, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 2,
           "relative_attention_num_buckets": 8, "decoder_start_token_id": 0},
    "bart": {"d_model": 16, "encoder_layers": 1, "decoder_layers": 2, "encoder_attention_heads": 2,
             "decoder_attention_heads": 2, "encoder_ffn_dim": 24, "decoder_ffn_dim": 24, "max_position_embeddings": 40,
             "bos_token_id": 2, "decoder_start_token_id": 1, "forced_eos_token_id": None},
}  # fmt: skip
CLI_FAMILY = "t5"  # exported through `microformers export onnx` with the task taken from config.architectures
TEXTS = ["the cat sat on the mat .", "hello world", "one two three red blue green house"]


def write_tokenizer(folder: Path) -> int:
    """A word-level tokenizer.json with T5-style specials (pad 0, eos 1) and an eos after each text."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {token: i for i, token in enumerate([*SPECIALS, *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(SPECIALS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "eos_token": "</s>",
              "unk_token": "<unk>", "model_max_length": 32}  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return len(vocab)


@pytest.fixture(scope="module", params=list(FAMILIES))
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Any, Any]:
    """(family, ONNX folder, the PyTorch model, the tokenizer)."""
    family = request.param
    pytest.importorskip(f"microformers_{family}")
    root = tmp_path_factory.mktemp(family)
    source = root / "model"
    vocab_size = write_tokenizer(source)
    config = microformers.AutoConfig.for_model(
        family, vocab_size=vocab_size, pad_token_id=0, eos_token_id=1, **FAMILIES[family]
    )
    torch.manual_seed(0)
    model = microformers.AutoModelForSeq2SeqLM.from_config(config).eval()
    with torch.no_grad():  # wider than the initialiser, so that the tokens generated vary
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.4)
    model.save_pretrained(source)
    target = root / "onnx"
    if family == CLI_FAMILY:
        assert cli.main(["export", "onnx", str(source), str(target)]) == 0
    else:
        export_onnx(source, target, task="text2text-generation")
    return family, target, model, microformers.AutoTokenizer.from_pretrained(source)


def test_export_writes_encoder_and_decoder_graphs_with_the_ort_names(exported) -> None:
    family, folder, model, _ = exported
    info = json.loads((folder / "onnx_export.json").read_text())
    assert info["task"] == "text2text-generation" and info["exporter"] == "dynamo"
    layers = len(model.get_decoder().block if family == "t5" else model.get_decoder().layers)
    past = [f"past_key_values.{i}.{side}.{kind}" for i in range(layers) for side in ("decoder", "encoder")
            for kind in ("key", "value")]  # fmt: skip
    present = [name.replace("past_key_values", "present") for name in past]
    graphs = info["graphs"]
    assert graphs["encoder_model.onnx"]["input_names"] == ["input_ids", "attention_mask"]
    assert graphs["encoder_model.onnx"]["output_names"] == ["last_hidden_state"]
    assert graphs["decoder_model.onnx"]["input_names"] == [
        "input_ids",
        "encoder_attention_mask",
        "encoder_hidden_states",
    ]
    assert graphs["decoder_model.onnx"]["output_names"] == ["logits", *present]
    assert graphs["decoder_with_past_model.onnx"]["input_names"] == ["input_ids", "encoder_attention_mask", *past]
    assert graphs["decoder_with_past_model.onnx"]["output_names"] == [
        "logits",
        *(n for n in present if ".decoder." in n),
    ]
    for name, graph in graphs.items():
        assert graph["max_difference"] <= 1e-4, name  # the export's own check: ONNX Runtime against PyTorch
        assert (folder / name).is_file()
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (folder / name).is_file(), name


def test_graph_axes_are_dynamic(exported) -> None:
    import onnxruntime

    folder = exported[1]
    session = onnxruntime.InferenceSession(str(folder / "decoder_with_past_model.onnx"))
    shapes = {i.name: i.shape for i in session.get_inputs()}
    # symbolic axes are strings in ONNX Runtime's view; fixed ones are ints (heads and head size)
    assert all(isinstance(axis, str) for axis in shapes["input_ids"])
    assert all(isinstance(axis, str) for axis in shapes["encoder_attention_mask"])
    key = shapes["past_key_values.0.decoder.key"]
    assert isinstance(key[0], str) and isinstance(key[2], str) and isinstance(key[1], int)


@pytest.mark.parametrize("num_beams", [1, 3])
def test_ort_generate_gives_the_pytorch_models_tokens(exported, num_beams: int) -> None:
    _, folder, model, tokenizer = exported
    ort = microformers.ORTModelForSeq2SeqLM.from_pretrained(folder)
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    settings = {"max_new_tokens": 8, "num_beams": num_beams, "output_scores": True, "return_dict_in_generate": True}
    got = ort.generate(**batch, **settings)
    want = model.generate(**batch, **settings)
    assert_similar_generation(got.sequences, want.sequences, want.scores, prompt_length=1, pad_token_id=0)
    if num_beams == 1:
        for step, (a, b) in enumerate(zip(got.scores, want.scores)):
            assert_close(a, b, atol=1e-4, msg=f"scores of step {step}")


def test_ort_generate_without_cache_reruns_the_decoder_and_agrees(exported) -> None:
    _, folder, model, tokenizer = exported
    ort = microformers.ORTModelForSeq2SeqLM.from_pretrained(folder, use_cache=False)
    assert not (ort.decoder_with_past_session)
    batch = tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    got = ort.generate(**batch, max_new_tokens=6, use_cache=False, output_scores=True, return_dict_in_generate=True)
    want = model.generate(**batch, max_new_tokens=6, output_scores=True, return_dict_in_generate=True)
    assert_similar_generation(got.sequences, want.sequences, want.scores, prompt_length=1, pad_token_id=0)


@pytest.mark.parametrize("task", ["text2text-generation", "translation", "summarization"])
def test_pipelines_run_the_exported_model(exported, task: str) -> None:
    _, folder, model, tokenizer = exported
    ort = microformers.ORTModelForSeq2SeqLM.from_pretrained(folder)
    ours = microformers.pipeline(task, model=ort, tokenizer=tokenizer)
    eager = microformers.pipeline(task, model=model, tokenizer=tokenizer)
    got = ours(TEXTS[:2], max_new_tokens=5)
    want = eager(TEXTS[:2], max_new_tokens=5)
    # decoded text of near-identical logits (1e-6 apart on these tiny models): the same words
    assert got == want


def test_forward_refuses_a_padded_decoder_mask_and_other_tasks_folders(exported, tmp_path: Path) -> None:
    _, folder, _, tokenizer = exported
    ort = microformers.ORTModelForSeq2SeqLM.from_pretrained(folder)
    batch = tokenizer(TEXTS[:1], return_tensors="pt")
    start = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(microformers.InputError, match="decoder_attention_mask"):
        ort(**batch, decoder_input_ids=start, decoder_attention_mask=torch.tensor([[0, 1]]))
    with pytest.raises(microformers.InputError, match="does not read"):
        microformers.ORTModelForSeq2SeqLM.from_pretrained(folder, file_name="model.onnx")
    other = tmp_path / "other"
    other.mkdir()
    (other / "onnx_export.json").write_text(json.dumps({"task": "text-generation-with-past"}))
    with pytest.raises(OnnxExportError, match="--task text2text-generation"):
        microformers.ORTModelForSeq2SeqLM.from_pretrained(other)


@pytest.mark.parametrize("task", ["text-generation-with-past", "automatic-speech-recognition"])
def test_encoder_decoder_model_is_refused_for_a_decoder_or_speech_task(exported, task: str, tmp_path: Path) -> None:
    model = exported[2]
    with pytest.raises(OnnxExportError, match="--task text2text-generation"):
        export_onnx(model, tmp_path / "out", task=task)
    assert not (tmp_path / "out").exists()  # refused before anything is written
