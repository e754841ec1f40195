"""Entry point of microformers-gguf: the ``gguf`` checkpoint format and GGUF-backed model aliases."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_checkpoint_formats(register: Any) -> None:
    register("gguf", "microformers_gguf.format:GGUF_FORMAT", priority=50)


@hookimpl
def register_model_sources(register: Any) -> None:
    register("smollm2-135m-instruct", "microformers_gguf.sources:smollm2_135m_instruct")
