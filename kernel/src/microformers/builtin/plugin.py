"""The kernel distribution's own plugin: safetensors and legacy .bin formats, core CLI commands."""

from __future__ import annotations

from typing import Any

from microformers.plugins import hookimpl

MICROFORMERS_API_VERSION = 1

# Which distribution provides what, so that a missing name's error can say what to install. Any
# plugin may declare this for names it knows others provide; these are the first-party ones.
MICROFORMERS_PROVIDES: dict[str, dict[str, list[str]]] = {
    "microformers-llama": {"configs": ["llama", "mistral", "qwen2"]},
    "microformers-bert": {"configs": ["bert"]},
    "microformers-gpt2": {"configs": ["gpt2"]},
    "microformers-tokenizers": {"tokenizers": ["fast"]},
    "microformers-gguf": {"checkpoint_formats": ["gguf"], "model_sources": ["smollm2-135m-instruct"]},
    "microformers-generation": {
        "generation_strategies": ["greedy", "sample", "beam_search", "custom_generate"],
        "exports": [
            *("LogitsProcessor", "LogitsProcessorList", "StoppingCriteria", "StoppingCriteriaList"),
            *("BaseStreamer", "TextStreamer", "TextIteratorStreamer"),
        ],
    },
    "microformers-pipelines": {
        "pipelines": [
            "text-generation",
            "fill-mask",
            "text-classification",
            "token-classification",
            "question-answering",
            "feature-extraction",
            "zero-shot-classification",
        ],
        "exports": ["Pipeline", "ChunkPipeline"],
    },
    "microformers-trainer": {
        "exports": ["Trainer", "TrainingArguments", "TrainerCallback", "TrainerState", "TrainerControl"]
    },
    "microformers-peft": {"exports": ["LoraConfig", "PeftConfig"], "adapters": ["LORA"]},
    "microformers-quant": {
        "exports": ["Int8Config", "Int4Config", "GgufQuantConfig"],
        "quantizers": ["int8", "int4", "gguf"],
    },
}


@hookimpl
def register_checkpoint_formats(register: Any) -> None:
    register("safetensors", "microformers.builtin.safetensors_format:SAFETENSORS", priority=100)
    register("pytorch_bin", "microformers.builtin.bin_format:PYTORCH_BIN", priority=-100)


@hookimpl
def register_cli_commands(register: Any) -> None:
    register("plugins", "microformers.builtin.commands:plugins_command", help="list installed plugins")
    register("env", "microformers.builtin.commands:env_command", help="show the environment")
