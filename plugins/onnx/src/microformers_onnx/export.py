"""Export a microformers model to ONNX for one task, then check the graph with ONNX Runtime.

The graph is built by ``torch.onnx.export`` with the dynamo exporter (``torch.export`` underneath);
where that fails, the TorchScript exporter is tried and :attr:`ExportResult.exporter` says which one
ran. Each graph file is an :class:`ExportGraph` (sample inputs, the PyTorch answer, dynamic axes): text
models are wrapped in :class:`TaskGraph`, encoder-decoders in the three graphs of ``seq2seq.py``, vision and
audio encoders in ``encoders.py``. :class:`TaskGraph` gives the graph the input and output names
ONNX Runtime users know (``input_ids``, ``attention_mask``, ``position_ids``,
``past_key_values.N.key/value``; ``logits``, ``present.N.key/value`` ...) and turns the 2-D padding
mask into the ready-made boolean attention mask the models accept, so the graph holds no branch on
the data. After the export, ONNX Runtime runs the graph on inputs of other sizes than the export's
(dynamic batch and sequence axes) and its outputs are compared with the PyTorch model's.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from microformers import ConfigError, MicroformersError
from microformers.hub import staged_folder
from microformers_sdk.cache import Cache, DynamicCache

logger = logging.getLogger("microformers")

EXPORT_INFO_NAME = "onnx_export.json"
MODEL_FILE_NAME = "model.onnx"
# Files a tokenizer may consist of; those present in a local model folder are copied beside the graph.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "chat_template.jinja",
    "preprocessor_config.json",  # the feature extractor (audio and image models), which pipelines load from the folder
    "processor_config.json",
)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
QUANTIZATIONS = ("int8",)
DEFAULT_OPSET = 18  # the oldest opset the dynamo exporter writes natively
LARGE_MODEL_BYTES = 1 << 30  # above this, weights go to model.onnx.data (protobuf caps a file at 2 GiB)


class OnnxExportError(MicroformersError, ValueError):
    """An export that cannot be done as asked (the message says what to change)."""


@attrs.frozen
class TaskSpec:
    """What a task exports: the Auto class (head) to load, the model outputs kept, and the decoder inputs."""

    auto_class: str
    outputs: tuple[str, ...]
    generation: bool = False  # position_ids as an input, padding on the left
    with_past: bool = False  # past_key_values.N.key/value in, present.N.key/value out
    seq2seq: bool = False  # encoder and decoder graphs (encoder_model.onnx, decoder_*model.onnx)


TASKS: dict[str, TaskSpec] = {
    "feature-extraction": TaskSpec("AutoModel", ("last_hidden_state",)),
    "text-classification": TaskSpec("AutoModelForSequenceClassification", ("logits",)),
    "token-classification": TaskSpec("AutoModelForTokenClassification", ("logits",)),
    "question-answering": TaskSpec("AutoModelForQuestionAnswering", ("start_logits", "end_logits")),
    "fill-mask": TaskSpec("AutoModelForMaskedLM", ("logits",)),
    "text-generation": TaskSpec("AutoModelForCausalLM", ("logits",), generation=True),
    "text-generation-with-past": TaskSpec("AutoModelForCausalLM", ("logits",), generation=True, with_past=True),
    "text2text-generation": TaskSpec(
        "AutoModelForSeq2SeqLM", ("logits",), generation=True, with_past=True, seq2seq=True
    ),
    "image-classification": TaskSpec("AutoModelForImageClassification", ("logits",)),
    "automatic-speech-recognition": TaskSpec("AutoModelForCTC", ("logits",)),
}
# automatic-speech-recognition of an encoder-decoder (Whisper): encoder and decoder graphs, as text2text-generation's
SPEECH_SEQ2SEQ = TaskSpec("AutoModelForSpeechSeq2Seq", ("logits",), generation=True, with_past=True, seq2seq=True)
# Tasks whose graphs read something else than token ids (the model's main_input_name).
NON_TEXT_INPUTS = ("pixel_values", "input_values", "input_features")
NON_TEXT_TASKS = {"image-classification": "pixel_values", "automatic-speech-recognition": "input_values"}
# Head class name endings -> the task a checkpoint's config.architectures implies (first match wins).
ARCHITECTURE_TASKS = (
    ("ForCausalLM", "text-generation-with-past"),
    ("LMHeadModel", "text-generation-with-past"),
    ("ForSequenceClassification", "text-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForQuestionAnswering", "question-answering"),
    ("ForMaskedLM", "fill-mask"),
    ("ForConditionalGeneration", "text2text-generation"),
    ("MTModel", "text2text-generation"),
    ("ForImageClassification", "image-classification"),
    ("ForCTC", "automatic-speech-recognition"),
)
# The graph files an export may write (replaced, with their external data, when a folder is exported again).
GRAPH_FILE_NAMES = (MODEL_FILE_NAME, "encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")


@attrs.frozen
class ExportResult:
    """What :func:`export_onnx` wrote and how the graph compared with PyTorch."""

    output_dir: Path
    task: str
    exporter: str  # "dynamo", "dynamo-draft" (torch.export.draft_export) or "torchscript"
    opset: int
    dtype: str
    quantize: str | None
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    files: tuple[str, ...]
    max_difference: float | None  # the largest |ONNX Runtime - PyTorch| over all outputs (float graph)
    atol: float
    rtol: float = 1e-4
    quantized_max_difference: float | None = None  # the int8 graph's, reported only (quantization changes numbers)
    # graph file -> (input names, output names); one entry (model.onnx) except for encoder-decoders
    graphs: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = attrs.field(factory=dict)

    def summary(self) -> str:
        lines = [
            f"exported {self.task} ({self.exporter} exporter, opset {self.opset}, {self.dtype}"
            f"{', ' + self.quantize if self.quantize else ''}) to {self.output_dir}",
        ]
        if len(self.graphs) > 1:
            for file, (inputs, outputs) in self.graphs.items():
                lines.append(f"  {file}: {', '.join(_abridged(inputs))} -> {', '.join(_abridged(outputs))}")
        else:
            lines += [f"  inputs: {', '.join(self.input_names)}", f"  outputs: {', '.join(self.output_names)}"]
        if self.max_difference is not None:
            lines.append(
                f"  validated with ONNX Runtime: max |difference| {self.max_difference:.3g} (atol {self.atol:g}, "
                f"rtol {self.rtol:g})"
            )
        if self.quantized_max_difference is not None:
            lines.append(f"  int8 graph: max |difference| {self.quantized_max_difference:.3g} from the float model")
        lines.append(f"  files: {', '.join(self.files)}")
        return "\n".join(lines)


def _abridged(names: Sequence[str], keep: int = 4) -> list[str]:
    return list(names) if len(names) <= keep + 1 else [*names[:keep], f"... ({len(names) - keep} more)"]


# -- the graph ------------------------------------------------------------------------------------------
@attrs.frozen
class Case:
    """The sizes of one set of sample inputs: rows, new tokens (or frames), cached positions, encoder positions."""

    batch: int
    length: int
    past: int = 0
    source: int = 0  # the encoder's length, for the decoder graphs of encoder-decoders


class ExportGraph(nn.Module):
    """What one ONNX graph file computes: a module whose forward takes the named inputs in order and
    returns the named outputs as a flat tuple, with sample inputs and the PyTorch model's own answer.

    ``axes`` names the dynamic axes of each input; ``export_case`` sizes the inputs the graph is captured
    with; ``validation_cases`` are other sizes ONNX Runtime is checked on.
    """

    file_name: str = MODEL_FILE_NAME
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    export_case: Case
    validation_cases: tuple[Case, ...]
    model: nn.Module

    def sample(self, case: Case, seed: int = 0) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def reference(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        raise NotImplementedError

    def axes(self) -> dict[str, dict[int, str]]:
        raise NotImplementedError


class GraphCache(Cache):
    """The cache a with-past graph runs on: the given past states, new states concatenated after them.

    Concatenation (instead of the SDK caches' preallocated storage) keeps every length a function of
    the inputs' shapes, so the sequence axes stay dynamic in the exported graph. A layer not given
    (a graph without past) starts with the first states written to it.
    """

    def __init__(self, past: Sequence[tuple[torch.Tensor, torch.Tensor]] = ()) -> None:
        super().__init__()
        for keys, values in past:
            self._keys.append(keys)
            self._values.append(values)
            self._lengths.append(keys.shape[2])

    def update(
        self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, cache_kwargs: dict[str, Any] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if layer_idx == len(self._keys):
            self._keys.append(key)
            self._values.append(value)
            self._lengths.append(key.shape[2])
            return key, value
        keys = torch.cat((self._keys[layer_idx], key), dim=2)
        values = torch.cat((self._values[layer_idx], value), dim=2)
        self._keys[layer_idx], self._values[layer_idx] = keys, values
        self._lengths[layer_idx] = keys.shape[2]
        return keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._keys[layer_idx].shape[2] if layer_idx < len(self._keys) else 0

    def present(self) -> list[torch.Tensor]:
        """Every layer's keys and values, in ``present.N.key``, ``present.N.value`` order."""
        return [tensor for pair in zip(self._keys, self._values) for tensor in pair]


def attention_allowed(
    attention_mask: torch.Tensor, query_length: int, *, causal: bool, sliding_window: int | None
) -> torch.Tensor:
    """The ``(batch, 1, query, keys)`` boolean mask (True: may attend) for a ``(batch, keys)`` padding mask.

    Queries are the last ``query_length`` positions. As the SDK's mask builder does, a query row that
    would see nothing (a padding token) sees everything instead, so no softmax row is all ``-inf``.
    Built from shapes only: nothing here branches on the mask's values.
    """
    total = attention_mask.shape[1]
    keys = torch.arange(total, device=attention_mask.device)
    queries = torch.arange(total - query_length, total, device=attention_mask.device)[:, None]
    if causal:
        allowed = keys <= queries
        if sliding_window is not None:
            allowed = allowed & (keys > queries - sliding_window)
    else:
        allowed = (keys >= 0) & (queries >= 0)
    allowed = allowed[None, None] & attention_mask[:, None, None, :].bool()
    return allowed | ~allowed.any(dim=-1, keepdim=True)


class TaskGraph(ExportGraph):
    """A text model as its ONNX graph sees it: named tensors in, the task's outputs out, as a flat tuple."""

    def __init__(
        self,
        model: nn.Module,
        spec: TaskSpec,
        input_names: Sequence[str],
        num_layers: int,
        causal: bool,
        sliding_window: int | None,
    ) -> None:
        super().__init__()
        self.model = model
        self.spec = spec
        self.input_names = tuple(input_names)
        self.num_layers = num_layers
        self.causal = causal
        self.sliding_window = sliding_window
        self.takes_positions = "position_ids" in inspect.signature(model.forward).parameters
        self.output_names = spec.outputs + tuple(
            f"present.{i}.{kind}" for i in range(num_layers if spec.with_past else 0) for kind in ("key", "value")
        )
        self.export_case = Case(2, 3, 4 if spec.with_past else 0)
        self.validation_cases = (
            (Case(3, 5, 0), Case(3, 1, 6), Case(1, 4, 2)) if spec.with_past else (Case(3, 5, 0), Case(1, 2, 0))
        )

    def sample(self, case: Case, seed: int = 0) -> tuple[torch.Tensor, ...]:
        return sample_inputs(
            self.model, self.spec, self.input_names, batch=case.batch, length=case.length, past=case.past, seed=seed
        )

    def reference(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return reference_outputs(self.model, self.spec, self.input_names, inputs)

    def axes(self) -> dict[str, dict[int, str]]:
        axes: dict[str, dict[int, str]] = {}
        for name in self.input_names:
            if name.startswith("past_key_values."):
                axes[name] = {0: "batch_size", 2: "past_sequence_length"}
            elif name == "attention_mask":
                axes[name] = {0: "batch_size", 1: "total_sequence_length"}
            else:
                axes[name] = {0: "batch_size", 1: "sequence_length"}
        return axes

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        named = dict(zip(self.input_names, inputs))
        query_length = named["input_ids"].shape[1]
        padding = named.pop("attention_mask")
        mask = attention_allowed(padding, query_length, causal=self.causal, sliding_window=self.sliding_window)
        if self.causal and "position_ids" not in named and self.takes_positions:
            # what a decoder derives from a 2-D mask itself: real tokens counted, padding at 1
            positions = (padding.long().cumsum(-1) - 1).masked_fill(padding == 0, 1)
            named["position_ids"] = positions[:, -query_length:]
        cache = None
        if self.spec.with_past:
            past = [
                (named.pop(f"past_key_values.{i}.key"), named.pop(f"past_key_values.{i}.value"))
                for i in range(self.num_layers)
            ]
            cache = GraphCache(past)
            named.update(past_key_values=cache, use_cache=True)
        elif "use_cache" in inspect.signature(self.model.forward).parameters:
            named["use_cache"] = False
        outputs = self.model(attention_mask=mask, return_dict=True, **named)
        result = [getattr(outputs, name) for name in self.spec.outputs]
        if cache is not None:
            result.extend(cache.present())
        return tuple(result)


# -- the export ---------------------------------------------------------------------------------------
def infer_task(config: Any) -> str:
    """The task a checkpoint's ``config.architectures`` implies (``feature-extraction`` when none does)."""
    for architecture in getattr(config, "architectures", None) or ():
        for ending, task in ARCHITECTURE_TASKS:
            if architecture.endswith(ending):
                if task == "text2text-generation" and _speech_encoder_decoder(config):
                    return "automatic-speech-recognition"  # Whisper's ...ForConditionalGeneration
                return task
    return "feature-extraction"


def _speech_encoder_decoder(config: Any) -> bool:
    """An encoder-decoder whose encoder reads log-mel features (Whisper)."""
    return bool(getattr(config, "is_encoder_decoder", False)) and getattr(config, "num_mel_bins", None) is not None


def task_spec(task: str, config: Any) -> TaskSpec:
    """What ``task`` exports for a model of ``config``: speech recognition by an encoder-decoder (Whisper) is
    :data:`SPEECH_SEQ2SEQ` (encoder and decoder graphs), by a CTC model the single graph of ``TASKS``."""
    if task == "automatic-speech-recognition" and bool(getattr(config, "is_encoder_decoder", False)):
        return SPEECH_SEQ2SEQ
    return TASKS[task]


def export_onnx(
    model: str | os.PathLike[str] | nn.Module,
    output_dir: str | os.PathLike[str],
    *,
    task: str | None = None,
    opset: int = DEFAULT_OPSET,
    dtype: str = "fp32",
    quantize: str | None = None,
    validate: bool = True,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    exporter: str = "auto",
) -> ExportResult:
    """Export ``model`` (a folder, Hub id or alias, or a loaded microformers model) to ``output_dir``.

    Writes ``model.onnx``, ``config.json`` (and ``generation_config.json`` for text generation), the
    tokenizer files of a local model folder, and ``onnx_export.json`` (the task, names and validation
    result). Other files already in ``output_dir`` are kept, as ``save_pretrained`` keeps them; the
    folder is swapped in atomically, so a failed export leaves it as it was. ``task`` defaults to the
    one ``config.architectures`` implies. ``dtype="fp16"`` exports half-precision weights;
    ``quantize="int8"`` writes a graph with int8 weights (ONNX Runtime dynamic quantization) after
    validating the float one. ``exporter`` is ``"auto"`` (dynamo, else TorchScript), ``"dynamo"`` or
    ``"torchscript"``. Raises :class:`OnnxExportError` on an unsupported task, bad option, or a
    graph whose output differs from PyTorch's by more than ``atol + rtol * max |PyTorch's output|``.
    A model object given with ``dtype="fp16"`` is converted in place (``model.to(torch.float16)``).
    """
    _check_options(opset, dtype, quantize, atol, exporter)
    if not rtol >= 0:
        raise OnnxExportError(f"rtol={rtol!r} must be a number >= 0")
    if task is not None and task not in TASKS:
        raise OnnxExportError(f"unknown task {task!r}; choose one of: {', '.join(TASKS)}")
    source = None
    if isinstance(model, nn.Module):
        loaded = model
        task = task or infer_task(loaded.config)
        base = getattr(loaded, "base_model", loaded)
        if task == "feature-extraction" and isinstance(base, nn.Module) and base is not loaded:
            loaded = base  # the hidden states under a head
    else:
        source = model
        config = _load_config(model)
        task = task or infer_task(config)
        loaded = _load_model(model, task, task_spec(task, config))
    spec = task_spec(task, loaded.config)
    _check_exportable(loaded, task, quantize)
    loaded = loaded.eval().to(DTYPES[dtype])
    target = Path(output_dir)
    if target.exists() and not target.is_dir():
        raise OnnxExportError(f"cannot export into {target}: it is a file, not a folder; pass a folder path")

    with torch.no_grad():
        graphs = build_graphs(loaded, task)
        report: dict[str, dict[str, Any]] = {}
        used_exporters: list[str] = []
        with tempfile.TemporaryDirectory(prefix="microformers-onnx-") as scratch:
            written: list[Path] = []
            for graph in graphs:
                float_path = Path(scratch) / "float" / graph.file_name
                float_path.parent.mkdir(exist_ok=True)
                used_exporters.append(_torch_export(graph, float_path, opset, exporter, loaded))
                difference = _validate(graph, float_path, dtype, atol, rtol) if validate else None
                quantized_difference = None
                graph_path = float_path
                if quantize:
                    graph_path = Path(scratch) / "quantized" / graph.file_name
                    _quantize_int8(float_path, graph_path)
                    quantized_difference = (
                        _validate(graph, graph_path, dtype, atol=None, rtol=0.0) if validate else None
                    )
                written.append(graph_path)
                report[graph.file_name] = {
                    "input_names": list(graph.input_names),
                    "output_names": list(graph.output_names),
                    "max_difference": difference,
                    "quantized_max_difference": quantized_difference,
                }
            replace = [f"{name}*" for name in GRAPH_FILE_NAMES] + [EXPORT_INFO_NAME]
            with staged_folder(target, replace=replace) as staging:
                for graph_path in written:
                    for file in graph_path.parent.iterdir():
                        if file.is_file() and file.name.startswith(graph_path.name):
                            shutil.copy2(file, staging / file.name)
                _write_companions(loaded, source, staging, spec)
                first = graphs[0]
                used = "dynamo-draft" if "dynamo-draft" in used_exporters else used_exporters[0]
                if "torchscript" in used_exporters:
                    used = "torchscript"
                difference = _worst(entry["max_difference"] for entry in report.values())
                quantized_difference = _worst(entry["quantized_max_difference"] for entry in report.values())
                info = {
                    "task": task,
                    "exporter": used,
                    "opset": opset,
                    "dtype": dtype,
                    "quantize": quantize,
                    "input_names": list(first.input_names),
                    "output_names": list(first.output_names),
                    "num_layers": max(getattr(g, "num_layers", 0) for g in graphs) if spec.with_past else 0,
                    "max_difference": difference,
                    "atol": atol,
                    "rtol": rtol,
                    "quantized_max_difference": quantized_difference,
                    "graphs": report,
                }
                (staging / EXPORT_INFO_NAME).write_text(json.dumps(info, indent=2) + "\n")
                files = tuple(sorted(p.name for p in staging.iterdir()))
    return ExportResult(
        output_dir=target,
        task=task,
        exporter=used,
        opset=opset,
        dtype=dtype,
        quantize=quantize,
        input_names=tuple(first.input_names),
        output_names=tuple(first.output_names),
        files=files,
        max_difference=difference,
        atol=atol,
        rtol=rtol,
        quantized_max_difference=quantized_difference,
        graphs={name: (tuple(entry["input_names"]), tuple(entry["output_names"])) for name, entry in report.items()},
    )


def _worst(values: Any) -> float | None:
    known = [value for value in values if value is not None]
    return max(known) if known else None


def _check_options(opset: int, dtype: str, quantize: str | None, atol: float, exporter: str) -> None:
    import onnx

    newest = onnx.defs.onnx_opset_version()
    if isinstance(opset, bool) or not isinstance(opset, int) or not 7 <= opset <= newest:
        raise OnnxExportError(
            f"opset={opset!r} is not an ONNX opset this onnx package knows (7 to {newest}); the default is {DEFAULT_OPSET}"
        )
    if dtype not in DTYPES:
        raise OnnxExportError(f"dtype={dtype!r} is not supported; choose one of: {', '.join(DTYPES)}")
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise OnnxExportError(f"quantize={quantize!r} is not supported; choose one of: {', '.join(QUANTIZATIONS)}")
    if quantize and dtype != "fp32":
        raise OnnxExportError(f"quantize={quantize!r} quantizes a float32 graph; drop dtype={dtype!r} (or --dtype)")
    if not atol > 0:
        raise OnnxExportError(f"atol={atol!r} must be a positive number")
    if exporter not in ("auto", "dynamo", "torchscript"):
        raise OnnxExportError(f"exporter={exporter!r} is not one of: auto, dynamo, torchscript")


def _load_config(model: str | os.PathLike[str]) -> Any:
    import microformers

    return microformers.AutoConfig.from_pretrained(str(model))


def _load_model(model: str | os.PathLike[str], task: str, spec: TaskSpec) -> nn.Module:
    import microformers

    auto = getattr(microformers, spec.auto_class)
    try:
        return auto.from_pretrained(str(model), dtype=torch.float32)
    except ConfigError as exc:
        raise OnnxExportError(
            f"cannot export {model} for task {task!r}: {exc}. Choose another --task (feature-extraction works for "
            f"every encoder and decoder; tasks: {', '.join(TASKS)})"
        ) from exc


def _check_exportable(model: nn.Module, task: str, quantize: str | None) -> None:
    config = model.config
    quantization = getattr(config, "quantization_config", None)
    if quantization is not None:
        method = (
            quantization.get("quant_method")
            if isinstance(quantization, dict)
            else getattr(quantization, "quant_method", quantization)
        )
        fix = (
            "export the float checkpoint instead and let --quantize int8 quantize the ONNX graph"
            if quantize
            else 'export the float checkpoint, adding --quantize int8 (quantize="int8") for int8 weights in the graph'
        )
        raise OnnxExportError(
            f"the model is quantized (quantization_config.quant_method={method!r}); its quantized layers have no "
            f"ONNX form here: {fix}"
        )
    spec = task_spec(task, config)
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    main_input = getattr(model, "main_input_name", "input_ids")
    if encoder_decoder and main_input != "input_ids":
        if task == "feature-extraction" and main_input in NON_TEXT_INPUTS:
            return  # its encoder alone (Whisper's)
        if spec is not SPEECH_SEQ2SEQ or main_input != "input_features":
            raise OnnxExportError(
                f"{type(model).__name__} is an encoder-decoder reading {main_input!r} (Whisper-style); task {task!r} "
                "does not fit it. Use --task automatic-speech-recognition (encoder and decoder graphs) or --task "
                "feature-extraction (the encoder alone)"
            )
    if spec is SPEECH_SEQ2SEQ and main_input != "input_features":
        raise OnnxExportError(
            f"task {task!r} exports speech models (log-mel input_features for an encoder-decoder such as Whisper, "
            f"input_values for CTC); {type(model).__name__} reads {main_input}. Use --task text2text-generation"
        )
    if encoder_decoder and not spec.seq2seq:
        raise OnnxExportError(
            f"{type(model).__name__} is an encoder-decoder model; task {task!r} is exported for encoder-only and "
            "decoder-only models. Use --task text2text-generation (encoder and decoder graphs)"
        )
    if spec.seq2seq and not encoder_decoder:
        raise OnnxExportError(
            f"task {task!r} exports the encoder and decoder of an encoder-decoder model (T5, BART, Marian ...); "
            f"{type(model).__name__} is not one. Choose another --task (tasks: {', '.join(TASKS)})"
        )
    if main_input != "input_ids" and spec.generation and not spec.seq2seq:
        raise OnnxExportError(
            f"task {task!r} needs a causal LM on token ids; {type(model).__name__} reads {main_input}"
        )
    if spec.generation and not hasattr(model, "generate"):
        raise OnnxExportError(
            f"task {task!r} needs a model with a language-modelling head; {type(model).__name__} has none"
        )


def _sliding_window(model: nn.Module) -> int | None:
    windows = {getattr(m, "sliding_window", None) for m in model.modules() if hasattr(m, "sliding_window")}
    windows.discard(None)
    if len(windows) > 1 or (
        windows and any(hasattr(m, "sliding_window") and m.sliding_window is None for m in model.modules())
    ):
        raise OnnxExportError(
            f"{type(model).__name__} mixes attention windows across layers ({sorted(windows)} and full attention); "
            "one graph mask per layer kind is not exported yet. Choose a model whose layers share one window"
        )
    return next(iter(windows), None)


def build_graphs(model: nn.Module, task: str) -> list[ExportGraph]:
    """The graphs ``task`` exports for ``model``: one, or the encoder and decoders of an encoder-decoder."""
    if task_spec(task, model.config).seq2seq:
        from .seq2seq import seq2seq_graphs

        return seq2seq_graphs(model)
    main_input = getattr(model, "main_input_name", "input_ids")
    two_towers = isinstance(getattr(model, "vision_model", None), nn.Module) and hasattr(model, "text_model")
    if main_input in NON_TEXT_INPUTS or (two_towers and task == "feature-extraction"):
        from .encoders import encoder_graph

        return [encoder_graph(model, task)]
    if main_input != "input_ids":
        raise OnnxExportError(
            f"{type(model).__name__} reads {main_input!r}; graphs are exported for models reading input_ids, "
            f"{', '.join(NON_TEXT_INPUTS)}"
        )
    if task in NON_TEXT_TASKS:
        raise OnnxExportError(
            f"task {task!r} is for models reading {NON_TEXT_TASKS[task]}; {type(model).__name__} reads input_ids. "
            f"Choose another --task (tasks: {', '.join(TASKS)})"
        )
    return [build_graph(model, task)]


def build_graph(model: nn.Module, task: str) -> TaskGraph:
    """``model`` wrapped for ``task``: its inputs named, its attention kind (causal or not) found by trying."""
    spec = TASKS[task]
    accepted = inspect.signature(model.forward).parameters
    names = ["input_ids", "attention_mask"]
    if not spec.generation and "token_type_ids" in accepted and getattr(model.config, "type_vocab_size", 0):
        names.append("token_type_ids")
    if spec.generation:
        names.append("position_ids")
    num_layers = 0
    if spec.with_past:
        num_layers = _cache_layers(model)
        names += [f"past_key_values.{i}.{kind}" for i in range(num_layers) for kind in ("key", "value")]
    window = _sliding_window(model)
    probe = sample_inputs(model, spec, names, batch=1, length=5, past=0, padded=False)
    try:
        want = reference_outputs(model, spec, names, probe)
    except AttributeError as exc:
        raise OnnxExportError(
            f"{type(model).__name__} does not return {', '.join(spec.outputs)} ({exc}); task {task!r} needs a model "
            f"loaded with {spec.auto_class}"
        ) from exc
    for causal in (True, False):
        graph = TaskGraph(model, spec, names, num_layers, causal, window if causal else None)
        got = graph(*probe)
        if all(torch.allclose(g.float(), w.float(), atol=1e-4, rtol=1e-3) for g, w in zip(got, want)):
            return graph
    raise OnnxExportError(
        f"{type(model).__name__} ({task}) computes attention neither as a causal decoder nor as a bidirectional "
        "encoder over its padding mask, so its ONNX graph would differ from PyTorch; it cannot be exported here"
    )


def _cache_layers(model: nn.Module) -> int:
    ids = torch.zeros(1, 2, dtype=torch.long, device=_device(model))
    outputs = model(input_ids=ids, use_cache=True, return_dict=True)
    cache = getattr(outputs, "past_key_values", None)
    if cache is None or len(cache) == 0:
        raise OnnxExportError(f"{type(model).__name__} returns no key/value cache; export text-generation instead")
    return len(cache)


def _device(model: nn.Module) -> torch.device:
    for parameter in model.parameters():
        return parameter.device
    return torch.device("cpu")


def _past_shape(model: nn.Module) -> list[tuple[int, int]]:
    """Each layer's ``(kv_heads, head_dim)``, read from one cached step."""
    ids = torch.zeros(1, 1, dtype=torch.long, device=_device(model))
    cache = model(input_ids=ids, use_cache=True, return_dict=True).past_key_values
    return [(keys.shape[1], keys.shape[3]) for keys, _ in cache]


def sample_inputs(
    model: nn.Module,
    spec: TaskSpec,
    names: Sequence[str],
    *,
    batch: int,
    length: int,
    past: int,
    padded: bool = True,
    seed: int = 0,
) -> tuple[torch.Tensor, ...]:
    """Random inputs in ``names`` order; with ``padded``, row 0 is padded (left for generation, else right)."""
    generator = torch.Generator().manual_seed(seed)
    config = model.config
    device = _device(model)
    dtype = next(model.parameters()).dtype
    total = past + length
    mask = torch.ones(batch, total, dtype=torch.long)
    if padded and total > 2:
        if spec.generation:
            mask[0, :2] = 0
        else:
            mask[0, -2:] = 0
    ids = torch.randint(0, config.vocab_size, (batch, length), generator=generator)
    pad = getattr(config, "pad_token_id", None)
    if isinstance(pad, int) and 0 <= pad < config.vocab_size:
        ids = ids.masked_fill(mask[:, past:] == 0, pad)
    values: dict[str, torch.Tensor] = {"input_ids": ids, "attention_mask": mask}
    values["token_type_ids"] = torch.zeros(batch, length, dtype=torch.long)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    values["position_ids"] = positions[:, past:]
    if spec.with_past:
        for i, (heads, head_dim) in enumerate(_past_shape(model)):
            for kind in ("key", "value"):
                values[f"past_key_values.{i}.{kind}"] = torch.randn(batch, heads, past, head_dim, generator=generator)
    return tuple(
        values[name].to(device=device, dtype=dtype if values[name].is_floating_point() else None) for name in names
    )


def reference_outputs(
    model: nn.Module, spec: TaskSpec, names: Sequence[str], inputs: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """What the PyTorch model itself returns for these inputs (its own 2-D mask handling and cache)."""
    named = dict(zip(names, inputs))
    cache = None
    if spec.with_past:
        layers = sum(1 for name in names if name.endswith(".key"))
        past = [(named.pop(f"past_key_values.{i}.key"), named.pop(f"past_key_values.{i}.value")) for i in range(layers)]
        cache = DynamicCache.from_legacy_cache(past) if past[0][0].shape[2] else DynamicCache()
        named.update(past_key_values=cache, use_cache=True)
    outputs = model(return_dict=True, **named)
    result = [getattr(outputs, name) for name in spec.outputs]
    if cache is not None:
        result.extend(t for pair in outputs.past_key_values for t in pair)
    return result


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporters print progress and warn about graph details; keep the user's terminal for our summary."""
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        previous = logging.getLogger("torch").level
        logging.getLogger("torch").setLevel(logging.ERROR)
        try:
            yield
        finally:
            logging.getLogger("torch").setLevel(previous)


def _torch_export(graph: ExportGraph, path: Path, opset: int, exporter: str, model: nn.Module) -> str:
    """Write the graph to ``path``; return the exporter that did it."""
    input_names, output_names = graph.input_names, graph.output_names
    args = graph.sample(graph.export_case)
    axes = graph.axes()
    large = sum(p.numel() * p.element_size() for p in model.parameters()) > LARGE_MODEL_BYTES
    failures: list[str] = []
    if exporter in ("auto", "dynamo"):
        auto = torch.export.Dim.AUTO
        # One entry per forward parameter: the graphs' only one is ``*inputs``.
        dynamic_shapes = (tuple(dict.fromkeys(axes.get(name, {}), auto) or None for name in input_names),)
        try:
            with _quiet():
                program, used = _dynamo_export(graph, args, input_names, output_names, dynamic_shapes, opset)
                program.save(str(path), external_data=large)
        except Exception as exc:
            failures.append(f"dynamo exporter: {type(exc).__name__}: {_first_line(exc)}")
        else:
            written = _graph_opset(path)
            if written != opset:  # torch.onnx keeps its own opset when ONNX's version converter fails
                raise OnnxExportError(
                    f"opset {opset} is too old for an operator of this model's graph (ONNX's version converter could "
                    f"not take it from opset {written} to {opset}); use --opset {DEFAULT_OPSET} or newer"
                )
            return used
    if exporter in ("auto", "torchscript"):
        dynamic_axes = {name: axes[name] for name in input_names if axes.get(name)}
        for name in output_names:
            dynamic_axes[name] = (
                {0: "batch_size", 2: "total_sequence_length"} if name.startswith("present.") else {0: "batch_size"}
            )
        try:
            with _quiet():
                torch.onnx.export(
                    graph,
                    args,
                    str(path),
                    input_names=list(input_names),
                    output_names=list(output_names),
                    dynamic_axes=dynamic_axes,
                    opset_version=opset,
                    dynamo=False,
                )
            return "torchscript"
        except Exception as exc:
            failures.append(f"TorchScript exporter: {type(exc).__name__}: {_first_line(exc)}")
    hint = (
        f" opset {opset} may be too old for an operator of this model: try --opset {DEFAULT_OPSET} or newer."
        if opset < DEFAULT_OPSET
        else ""
    )
    raise OnnxExportError(
        f"torch.onnx.export could not export {graph.file_name} of {type(model).__name__}:{hint} " + "; ".join(failures)
    )


def _dynamo_export(
    graph: ExportGraph,
    args: tuple[torch.Tensor, ...],
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_shapes: Any,
    opset: int,
) -> tuple[Any, str]:
    """The dynamo exporter's ONNX program and its name for the report.

    The graph is captured with ``torch.export.export(strict=False)`` as ``torch.onnx.export`` itself does
    (size-oblivious reasoning about sizes). Where our models check input values (``bool(tensor.any())``:
    data-dependent for ``torch.export``), ``torch.export.draft_export`` captures it instead, taking those
    checks as they went on the sample inputs, as tracing would ("dynamo-draft").
    """
    capture = {"dynamic_shapes": dynamic_shapes, "strict": False}
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):
        try:
            exported = torch.export.export(graph, args, **capture)
            used = "dynamo"
        except Exception as exc:
            if "data-dependent" not in str(exc):
                raise
            exported = torch.export.draft_export(graph, args, **capture)
            used = "dynamo-draft"
    program = torch.onnx.export(
        exported, args, input_names=list(input_names), output_names=list(output_names), opset_version=opset,
        dynamo=True, verbose=False,
    )  # fmt: skip
    return program, used


def _graph_opset(path: Path) -> int:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), 0)


def _first_line(exc: BaseException) -> str:
    """The line of an exporter's (long) message that says what failed."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if "## Exception summary" in lines:  # torch.onnx's report: the cause follows this heading
        after = lines[lines.index("## Exception summary") + 1 :]
        lines = after + lines
    summary = lines[0] if lines else type(exc).__name__
    return summary[:500]


def _session(path: Path) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _validate(graph: ExportGraph, path: Path, dtype: str, atol: float | None, rtol: float) -> float:
    """Run the graph with ONNX Runtime on shapes other than the export's; return the max |difference|.

    With ``atol`` given, raises where an output's ``max |ORT - PyTorch| > atol + rtol * max |PyTorch|``:
    rounding scales with the output's magnitude (a deep model's logits reach tens, where float32 rounding
    through dozens of layers exceeds 1e-4 absolute). fp16 graphs use ``max(atol, 1e-2)``.
    """
    try:
        session = _session(path)
    except Exception as exc:
        raise OnnxExportError(
            f"ONNX Runtime cannot load the exported graph {graph.file_name} ({dtype}): {_first_line(exc)}"
        ) from exc
    worst = 0.0
    tolerance = None if atol is None else (atol if dtype == "fp32" else max(atol, 1e-2))
    failed: list[str] = []
    for case in graph.validation_cases:
        inputs = graph.sample(case, seed=case.batch + case.past)
        want = graph.reference(inputs)
        feeds = {name: tensor.cpu().numpy() for name, tensor in zip(graph.input_names, inputs)}
        where = (
            f"batch {case.batch}, length {case.length}"
            + (f", past {case.past}" if case.past else "")
            + (f", encoder length {case.source}" if case.source else "")
        )
        try:
            got = session.run(None, feeds)
        except Exception as exc:
            raise OnnxExportError(
                f"ONNX Runtime failed to run the exported graph {graph.file_name} ({dtype}) on {where}: "
                f"{_first_line(exc)}"
            ) from exc
        for name, g, w in zip(graph.output_names, got, want):
            g_tensor = torch.from_numpy(g).float()
            w_tensor = w.detach().float().cpu()
            if tuple(g_tensor.shape) != tuple(w_tensor.shape):
                raise OnnxExportError(
                    f"the exported graph's {name} has shape {tuple(g_tensor.shape)} but PyTorch's has "
                    f"{tuple(w_tensor.shape)} ({where}): an axis was fixed at export"
                )
            if not g_tensor.numel():
                continue
            difference = (g_tensor - w_tensor).abs()
            worst = max(worst, float(difference.max()))
            if tolerance is not None and float(difference.max()) > tolerance + rtol * float(w_tensor.abs().max()):
                failed.append(f"{name} ({where}): {float(difference.max()):.3g}")
    if failed:
        raise OnnxExportError(
            f"validation of {graph.file_name} failed: ONNX Runtime's outputs differ from PyTorch's beyond atol "
            f"{tolerance:g} + rtol {rtol:g} x the output's largest |value|: {'; '.join(failed[:4])}; the graph was "
            "not written. Report it with the model's config, or pass a larger atol/rtol"
        )
    return worst


def _quantize_int8(source: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target.parent.mkdir(parents=True, exist_ok=True)
    with _quiet():
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)


def _write_companions(model: nn.Module, source: Any, folder: Path, spec: TaskSpec) -> None:
    """config.json, generation_config.json (text generation) and the source folder's tokenizer files."""
    model.config.save_pretrained(folder)
    if spec.generation and hasattr(model, "generation_config"):
        model.generation_config.save_pretrained(folder)
    if source is None:
        return
    if Path(source).is_dir():
        for name in TOKENIZER_FILES:
            file = Path(source) / name
            if file.is_file():
                shutil.copy2(file, folder / name)
        return
    # a Hub id or an alias (a GGUF file's embedded tokenizer): the tokenizer as the tokenizer plugins load it
    import microformers

    try:
        tokenizer = microformers.AutoTokenizer.from_pretrained(str(source))
    except MicroformersError as exc:
        logger.warning("microformers export onnx: no tokenizer written for %s (%s)", source, exc)
        return
    tokenizer.save_pretrained(folder)
