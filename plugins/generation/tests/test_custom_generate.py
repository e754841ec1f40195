"""custom_generate from the Hub: errors name the repository; the Hub gets its keywords, the function the rest."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from generation_marked_tiny import marked_tiny as _marked_tiny

from microformers import GenerationError
from microformers_generation.custom import resolve_custom_generate


def test_hub_custom_generate_errors_name_the_repository(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import microformers.hub

    monkeypatch.setattr(microformers.hub, "resolve_folder", lambda name, patterns, **kwargs: str(tmp_path))
    with pytest.raises(GenerationError, match="custom_generate='someone/decoder': .* does not exist"):
        resolve_custom_generate("someone/decoder", True, {})


def test_hub_custom_generate_gets_the_hub_keywords_and_the_function_the_rest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    import microformers.hub

    (tmp_path / "custom_generate").mkdir()
    (tmp_path / "custom_generate" / "generate.py").write_text(
        "def generate(model, **kwargs):\n    return sorted(kwargs)\n"
    )
    fetched: list[dict[str, Any]] = []

    def resolve_folder(name: str, patterns: list[str], **kwargs: Any) -> str:
        fetched.append(kwargs)
        return str(tmp_path)

    monkeypatch.setattr(microformers.hub, "resolve_folder", resolve_folder)
    names = _marked_tiny().generate(
        torch.tensor([[5, 6]]), custom_generate="someone/decoder", trust_remote_code=True, revision="v2"
    )
    assert fetched == [{"revision": "v2"}]
    assert "revision" not in names and "inputs" in names
