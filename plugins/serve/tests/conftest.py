"""Fixtures: the tiny checkpoint, the same checkpoint loaded in-process, and a running server."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# the tests share helpers from serve_helpers.py (pytest runs with --import-mode=importlib)
sys.path.insert(0, str(Path(__file__).parent))

from serve_helpers import ServerProcess, build_tiny_llama

import microformers


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("serve") / "tiny-llama")


@pytest.fixture(scope="session")
def reference(tiny_llama: Path) -> tuple[Any, Any]:
    """The same checkpoint loaded in this process: what ``generate`` answers for one request alone."""
    tokenizer = microformers.AutoTokenizer.from_pretrained(tiny_llama)
    model = microformers.AutoModelForCausalLM.from_pretrained(tiny_llama)
    return tokenizer, model


@pytest.fixture(scope="session")
def server(tiny_llama: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tiny_llama, "--max-batch-size", "8", "--max-queue", "64", "--max-body-bytes", "65536")
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def client(server: ServerProcess) -> Any:
    openai = pytest.importorskip("openai", reason="the openai client is a test extra (requirements-test.txt)")
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=60)
