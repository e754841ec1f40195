from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1


@hookimpl
def register_gguf_architectures(register: Any) -> None:
    register("toy", "microformers_test_toygguf.mapping:TOY")
    register("toy-not-a-mapping", "microformers_test_toygguf.mapping:adjust")
