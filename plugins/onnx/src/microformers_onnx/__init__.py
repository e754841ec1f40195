"""ONNX export of microformers models (``microformers export onnx``) and ONNX Runtime model classes.

Importing the package is cheap; torch, onnx and onnxruntime load on first access of a name.
"""

from __future__ import annotations

from microformers.lazy import lazy_exports

_LAZY: dict[str, str] = {
    "TASKS": "export",
    "ExportResult": "export",
    "export_onnx": "export",
    "ORTModel": "modeling_ort",
    "ORTModelForCausalLM": "modeling_ort",
    "ORTModelForSeq2SeqLM": "modeling_ort",
    "ORTModelForSpeechSeq2Seq": "modeling_ort",
    "ORTModelForFeatureExtraction": "modeling_ort",
    "ORTModelForSequenceClassification": "modeling_ort",
    "ORTModelForTokenClassification": "modeling_ort",
    "ORTModelForQuestionAnswering": "modeling_ort",
    "ORTModelForMaskedLM": "modeling_ort",
    "ORTModelForImageClassification": "modeling_ort",
    "ORTModelForCTC": "modeling_ort",
    "export_command": "commands",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
