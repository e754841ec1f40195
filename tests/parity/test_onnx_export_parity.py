"""ONNX export (microformers-onnx) on tiny random checkpoints: the graphs ONNX Runtime runs against the reference.

Each task is exported once per module (exports take seconds) from a checkpoint the reference implementation
made; the export itself checks ONNX Runtime against our PyTorch model (the reported difference is asserted
here), and the tests compare the ONNX Runtime model classes with the reference on new inputs: encoder heads
on a padded batch, causal LMs through ``generate``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import microformers
from microformers import cli
from microformers_sdk.testing import assert_similar_generation
from parity.harness import (
    assert_close,
    assert_generation_matches,
    make_reference_checkpoint,
    padded_batch,
    random_ids,
)

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from microformers_onnx import export_onnx
from microformers_onnx.export import OnnxExportError

BERT: dict[str, Any] = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}
DISTILBERT: dict[str, Any] = {
    "vocab_size": 99,
    "dim": 32,
    "n_layers": 1,
    "n_heads": 4,
    "hidden_dim": 37,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}
LLAMA: dict[str, Any] = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 64,  # int8 quantization needs multiples of 32
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
GPT2: dict[str, Any] = {
    "vocab_size": 99,
    "n_embd": 32,
    "n_layer": 1,
    "n_head": 4,
    "n_positions": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
# task -> (config, reference class, ORT class, outputs compared). DistilBERT exports with torch.export; BERT (whose
# forward checks token_type_ids' values) with draft_export, through the CLI, with segment ids as an input.
ENCODER_TASKS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "feature-extraction": ("DistilBertConfig", "DistilBertModel", "ORTModelForFeatureExtraction", ("last_hidden_state",)),
    "text-classification": ("DistilBertConfig", "DistilBertForSequenceClassification", "ORTModelForSequenceClassification", ("logits",)),
    "token-classification": ("DistilBertConfig", "DistilBertForTokenClassification", "ORTModelForTokenClassification", ("logits",)),
    "fill-mask": ("DistilBertConfig", "DistilBertForMaskedLM", "ORTModelForMaskedLM", ("logits",)),
    "question-answering": ("BertConfig", "BertForQuestionAnswering", "ORTModelForQuestionAnswering", ("start_logits", "end_logits")),
}  # fmt: skip
VOCAB_FILE = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"
CLI_TASK = "question-answering"


@pytest.fixture(scope="module")
def encoder_exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    """task -> (ONNX folder, reference model); question-answering goes through the CLI."""
    built: dict[str, tuple[Path, Any]] = {}
    for task, (config_name, class_name, _, _) in ENCODER_TASKS.items():
        root = tmp_path_factory.mktemp(task)
        sizes = BERT if config_name == "BertConfig" else DISTILBERT
        folder, reference = make_reference_checkpoint(config_name, class_name, root, **sizes)
        (folder / "vocab.txt").write_text(VOCAB_FILE)  # a tokenizer file, to be copied beside the graph
        output = root / "onnx"
        if task == CLI_TASK:
            output.mkdir()
            (output / "notes.txt").write_text("mine")
            assert cli.main(["export", "onnx", str(folder), str(output), "--task", task]) == 0
        else:
            export_onnx(folder, output, task=task)
        built[task] = (output, reference)
    return built


@pytest.mark.parametrize("task", list(ENCODER_TASKS))
def test_encoder_graph_matches_reference_on_a_padded_batch(encoder_exports, task: str) -> None:
    folder, reference = encoder_exports[task]
    config_name, _, ort_class, outputs = ENCODER_TASKS[task]
    info = json.loads((folder / "onnx_export.json").read_text())
    assert info["max_difference"] <= 1e-4  # the export's own check: ONNX Runtime against our PyTorch model
    assert tuple(info["output_names"]) == outputs
    model = getattr(microformers, ort_class).from_pretrained(folder)
    ids, mask = padded_batch(BERT["vocab_size"], [11, 6, 1], side="right", seed=3)
    inputs = {"input_ids": ids, "attention_mask": mask}
    if config_name == "BertConfig":
        assert tuple(info["input_names"]) == ("input_ids", "attention_mask", "token_type_ids")
        inputs["token_type_ids"] = (torch.arange(ids.shape[1]) >= 4).long().expand_as(ids) * mask  # a 2nd segment
    else:
        assert tuple(info["input_names"]) == ("input_ids", "attention_mask")
    got = model(**inputs)
    with torch.no_grad():
        want = reference(**inputs)
    for name in outputs:
        # per-token outputs are compared on real tokens (padding positions carry no meaning)
        keep = None if task == "text-classification" else mask
        assert_close(getattr(got, name), getattr(want, name), atol=1e-4, what=f"{task} {name}", mask=keep)


def test_cli_export_keeps_other_files_and_writes_config_tokenizer_and_report(encoder_exports) -> None:
    folder = encoder_exports[CLI_TASK][0]
    names = {path.name for path in folder.iterdir()}
    assert {"model.onnx", "config.json", "vocab.txt", "onnx_export.json", "notes.txt"} <= names
    assert (folder / "notes.txt").read_text() == "mine"
    info = json.loads((folder / "onnx_export.json").read_text())
    # BERT skips its id range checks while exporting: torch.export captures it whole, no draft capture needed
    assert info["task"] == CLI_TASK and info["exporter"] == "dynamo"
    assert info["max_difference"] <= 1e-4


@pytest.fixture(scope="module")
def llama_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any]:
    root = tmp_path_factory.mktemp("llama")
    folder, reference = make_reference_checkpoint("LlamaConfig", "LlamaForCausalLM", root, **LLAMA)
    result = export_onnx(folder, root / "onnx")  # the task comes from config.architectures
    return root / "onnx", reference, result


def test_with_past_graph_has_the_ort_names_and_dynamic_axes(llama_export) -> None:
    _, _, result = llama_export
    layers = LLAMA["num_hidden_layers"]
    assert result.task == "text-generation-with-past"
    past = [f"past_key_values.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    present = [f"present.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    assert result.input_names == ("input_ids", "attention_mask", "position_ids", *past)
    assert result.output_names == ("logits", *present)
    assert result.max_difference is not None and result.max_difference <= 1e-4


@pytest.mark.parametrize(
    "settings", [{"do_sample": False}, {"num_beams": 3, "do_sample": False}], ids=["greedy", "beam"]
)
def test_ort_causal_lm_generates_as_the_reference(llama_export, settings: dict[str, Any]) -> None:
    folder, reference, _ = llama_export
    model = microformers.ORTModelForCausalLM.from_pretrained(folder)
    ids, mask = padded_batch(LLAMA["vocab_size"], [6, 3], seed=2)
    kwargs = {"attention_mask": mask, "max_new_tokens": 8, "output_scores": True, "return_dict_in_generate": True}
    got = model.generate(ids, **settings, **kwargs)
    with torch.no_grad():
        want = reference.generate(ids, **settings, **kwargs)
    assert_generation_matches(got, want, prompt_length=ids.shape[1], what=f"ORT {settings}")


def test_text_generation_graph_without_past_generates_as_the_reference(tmp_path: Path) -> None:
    folder, reference = make_reference_checkpoint("GPT2Config", "GPT2LMHeadModel", tmp_path, **GPT2)
    result = export_onnx(folder, tmp_path / "onnx", task="text-generation")
    assert result.input_names == ("input_ids", "attention_mask", "position_ids")
    assert result.output_names == ("logits",)
    assert result.max_difference is not None and result.max_difference <= 1e-4
    model = microformers.ORTModelForCausalLM.from_pretrained(tmp_path / "onnx")
    ids = random_ids(GPT2["vocab_size"], batch=2, length=5, seed=1, low=3)
    got = model.generate(ids, max_new_tokens=6, do_sample=False, output_scores=True, return_dict_in_generate=True)
    with torch.no_grad():
        want = reference.generate(
            ids, max_new_tokens=6, do_sample=False, output_scores=True, return_dict_in_generate=True
        )
    assert_generation_matches(got, want, prompt_length=ids.shape[1], what="ORT gpt2 without past")
    with pytest.raises(microformers.GenerationError, match="text-generation-with-past"):
        model(ids, use_cache=True)


# -- bad input -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder, _ = make_reference_checkpoint("LlamaConfig", "LlamaForCausalLM", tmp_path_factory.mktemp("src"), **LLAMA)
    return folder


def test_task_the_model_has_no_head_for_is_refused_naming_the_task(llama_checkpoint: Path, tmp_path: Path) -> None:
    with pytest.raises(OnnxExportError, match="question-answering.*Choose another --task"):
        export_onnx(llama_checkpoint, tmp_path / "out", task="question-answering")
    assert not (tmp_path / "out").exists()
    with pytest.raises(OnnxExportError, match="unknown task 'summarize'"):
        export_onnx(llama_checkpoint, tmp_path / "out", task="summarize")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"opset": 99}, "opset=99"),
        ({"dtype": "int4"}, "dtype='int4'"),
        ({"quantize": "int4"}, "quantize='int4'"),
        ({"quantize": "int8", "dtype": "fp16"}, "quantizes a float32 graph"),
        ({"exporter": "jit"}, "exporter='jit'"),
    ],
)
def test_bad_options_are_refused_before_loading(llama_checkpoint: Path, tmp_path: Path, options, message) -> None:
    with pytest.raises(OnnxExportError, match=message):
        export_onnx(llama_checkpoint, tmp_path / "out", **options)


def test_output_path_that_is_a_file_is_refused(llama_checkpoint: Path, tmp_path: Path) -> None:
    target = tmp_path / "model.onnx"
    target.write_text("not a folder")
    with pytest.raises(OnnxExportError, match="it is a file, not a folder"):
        export_onnx(llama_checkpoint, target)
    assert target.read_text() == "not a folder"


def test_quantized_model_is_refused_with_the_fix(llama_checkpoint: Path, tmp_path: Path) -> None:
    # What the refusal reads is the config's quantization_config, as a quantized load leaves it (loading one for
    # real builds microformers-quant's native kernels first: seconds this test does not need).
    model = microformers.AutoModelForCausalLM.from_pretrained(llama_checkpoint)
    model.config.quantization_config = {"quant_method": "int8"}
    with pytest.raises(OnnxExportError, match="quantized.*--quantize int8"):
        export_onnx(model, tmp_path / "out")
    with pytest.raises(OnnxExportError, match="export the float checkpoint instead"):
        export_onnx(model, tmp_path / "out", quantize="int8")


def test_cli_reports_an_error_in_one_line(llama_checkpoint: Path, tmp_path: Path, capsys) -> None:
    code = cli.main(["export", "onnx", str(llama_checkpoint), str(tmp_path / "out"), "--task", "fill-mask"])
    assert code == 2
    err = capsys.readouterr().err
    assert "microformers export: error:" in err and "fill-mask" in err


def test_ort_model_refuses_a_graph_of_another_task(encoder_exports) -> None:
    folder = encoder_exports["fill-mask"][0]
    with pytest.raises(OnnxExportError, match="exported for task 'fill-mask'"):
        microformers.ORTModelForCausalLM.from_pretrained(folder)


def test_opset_too_old_for_the_graph_is_refused_not_ignored(tmp_path: Path) -> None:
    folder, _ = make_reference_checkpoint("DistilBertConfig", "DistilBertModel", tmp_path, **DISTILBERT)
    with pytest.raises(OnnxExportError, match="opset 14 is too old.*--opset 18"):
        export_onnx(folder, tmp_path / "out", task="feature-extraction", opset=14)
    assert not (tmp_path / "out").exists()
    # a folder that exists: the failed export leaves its files as they were (an earlier graph included)
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "model.onnx").write_bytes(b"an earlier graph")
    (kept / "notes.txt").write_text("mine")
    with pytest.raises(OnnxExportError, match="opset 14 is too old"):
        export_onnx(folder, kept, task="feature-extraction", opset=14)
    assert sorted(p.name for p in kept.iterdir()) == ["model.onnx", "notes.txt"]
    assert (kept / "model.onnx").read_bytes() == b"an earlier graph"


def test_int8_export_writes_int8_weights_and_still_generates(llama_checkpoint: Path, tmp_path: Path) -> None:
    import onnx

    result = export_onnx(llama_checkpoint, tmp_path / "onnx", quantize="int8")
    assert result.quantize == "int8" and result.dtype == "fp32"
    assert result.max_difference is not None and result.max_difference <= 1e-4  # the float graph, before quantizing
    assert result.quantized_max_difference is not None and result.quantized_max_difference > 0  # reported, not bound
    graph = onnx.load(str(tmp_path / "onnx" / "model.onnx"))
    int8 = [t for t in graph.graph.initializer if t.data_type == onnx.TensorProto.INT8]
    assert len(int8) >= 2 * LLAMA["num_hidden_layers"]  # the projections' weights at least
    model = microformers.ORTModelForCausalLM.from_pretrained(tmp_path / "onnx")
    ids = random_ids(LLAMA["vocab_size"], batch=2, length=4, seed=4, low=3)
    out = model.generate(ids, max_new_tokens=5, do_sample=False)
    assert out.shape == (2, 9) and torch.equal(out[:, :4], ids)


def test_fp16_export_on_cpu_has_half_inputs_and_follows_the_reference(llama_checkpoint: Path, tmp_path: Path) -> None:
    result = export_onnx(llama_checkpoint, tmp_path / "onnx", dtype="fp16")  # CPU only: exported and run on CPU
    assert result.dtype == "fp16"
    assert result.max_difference is not None and result.max_difference <= 1e-2  # fp16 graphs: atol max(atol, 1e-2)
    model = microformers.ORTModelForCausalLM.from_pretrained(tmp_path / "onnx")
    assert model.dtype == torch.float16
    types = {i.name: i.type for i in model.session.get_inputs()}
    assert types["past_key_values.0.key"] == "tensor(float16)"
    reference = microformers.AutoModelForCausalLM.from_pretrained(llama_checkpoint).eval()
    ids, mask = padded_batch(LLAMA["vocab_size"], [6, 3], seed=5)
    got = model(ids, attention_mask=mask, use_cache=False).logits.float()
    with torch.no_grad():
        want = reference(ids, attention_mask=mask).logits
    assert_close(got, want, atol=2e-2, what="fp16 ONNX logits against float32", mask=mask)


# -- Whisper: automatic-speech-recognition -------------------------------------------------------------------
WHISPER: dict[str, Any] = {
    "vocab_size": 60,
    "d_model": 16,
    "encoder_layers": 1,
    "decoder_layers": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 20,
    "decoder_ffn_dim": 20,
    "num_mel_bins": 8,
    "max_source_positions": 10,
    "max_target_positions": 24,
    "pad_token_id": 1,
    "bos_token_id": 2,
    "eos_token_id": 3,
    "decoder_start_token_id": 2,
    "begin_suppress_tokens": [3],
    "suppress_tokens": [],
}


@pytest.fixture(scope="module")
def whisper_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    root = tmp_path_factory.mktemp("whisper")
    _, reference = make_reference_checkpoint("WhisperConfig", "WhisperForConditionalGeneration", root, **WHISPER)
    with torch.no_grad():  # wider than the initialiser (norms and the sinusoids kept), so that the tokens vary
        for name, parameter in reference.named_parameters():
            if "layer_norm" not in name and "encoder.embed_positions" not in name:
                parameter.normal_(0.0, 0.4, generator=torch.Generator().manual_seed(len(name)))
    folder = root / "widened"
    reference.save_pretrained(folder, safe_serialization=True)
    export_onnx(folder, root / "onnx")  # the task comes from config.architectures
    return root / "onnx", reference


def test_whisper_export_has_the_ort_seq2seq_graphs(whisper_export) -> None:
    folder, _ = whisper_export
    info = json.loads((folder / "onnx_export.json").read_text())
    assert info["task"] == "automatic-speech-recognition"
    assert info["graphs"]["encoder_model.onnx"]["input_names"] == ["input_features"]
    assert info["graphs"]["decoder_model.onnx"]["input_names"] == ["input_ids", "encoder_hidden_states"]
    assert info["graphs"]["decoder_with_past_model.onnx"]["input_names"][:2] == [
        "input_ids",
        "past_key_values.0.decoder.key",
    ]
    assert info["max_difference"] <= 1e-4


@pytest.mark.parametrize("num_beams", [1, 3])
def test_ort_whisper_generates_as_the_reference(whisper_export, num_beams: int) -> None:
    folder, reference = whisper_export
    model = microformers.ORTModelForSpeechSeq2Seq.from_pretrained(folder)
    frames = 2 * WHISPER["max_source_positions"]
    features = torch.randn(3, WHISPER["num_mel_bins"], frames, generator=torch.Generator().manual_seed(7))
    kwargs = {"max_new_tokens": 8, "num_beams": num_beams, "output_scores": True, "return_dict_in_generate": True}
    got = model.generate(features, **kwargs)
    with torch.no_grad():
        want = reference.generate(features, **kwargs)
    assert_generation_matches(got, want, prompt_length=1, what=f"ORT whisper, {num_beams} beams")
    if num_beams == 1:  # without the prompt and final eos, as the reference returns them by default
        tokens = model.generate(features, max_new_tokens=8)
        with torch.no_grad():
            expected = reference.generate(features, max_new_tokens=8)
        assert_similar_generation(tokens, expected, want.scores, pad_token_id=WHISPER["pad_token_id"])
