from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

ORT_CLASSES = (
    "ORTModelForCausalLM",
    "ORTModelForSeq2SeqLM",
    "ORTModelForSpeechSeq2Seq",
    "ORTModelForFeatureExtraction",
    "ORTModelForSequenceClassification",
    "ORTModelForTokenClassification",
    "ORTModelForQuestionAnswering",
    "ORTModelForMaskedLM",
    "ORTModelForImageClassification",
    "ORTModelForCTC",
)


@hookimpl
def register_cli_commands(register: Any) -> None:
    register("export", "microformers_onnx.commands:export_command", help="export a model to a deployable graph (onnx)")


@hookimpl
def register_exports(register: Any) -> None:
    for name in ORT_CLASSES:
        register(name, f"microformers_onnx.modeling_ort:{name}")
