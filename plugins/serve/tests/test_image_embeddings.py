"""``/v1/embeddings`` with images: tiny random CLIP and DINOv2 folders, vectors against the models' own features,
and every kind of bad image a 400 naming the input (never a 500)."""

from __future__ import annotations

import argparse
import base64
import io
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch

import microformers
from microformers_sdk.testing import assert_close

PIL_Image = pytest.importorskip("PIL.Image", reason="image inputs need Pillow (microformers-serve[vision])")
testclient = pytest.importorskip("starlette.testclient", reason="needs httpx (requirements-test.txt)")


def png(width: int = 20, height: int = 14, seed: int = 0, fmt: str = "PNG") -> bytes:
    """A random RGB image file."""
    pixels = torch.randint(0, 256, (height, width, 3), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)
    buffer = io.BytesIO()
    PIL_Image.fromarray(pixels.numpy()).save(buffer, fmt)
    return buffer.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def png_declaring(width: int, height: int) -> bytes:
    """A 1x1 PNG whose header claims ``width x height`` (CRC fixed): what a decompression bomb looks like."""
    data = bytearray(png(1, 1))
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def clip_folder(folder: Path) -> Path:
    """A tiny random CLIP with a byte-level BPE CLIP tokenizer and an 8x8 image processor."""
    from tokenizers import Tokenizer, models
    from tokenizers.pre_tokenizers import ByteLevel

    from microformers_clip import CLIPConfig, CLIPImageProcessor, CLIPModel

    symbols = sorted(ByteLevel.alphabet())
    vocab = {symbol: index for index, symbol in enumerate(symbols)}
    vocab.update({symbol + "</w>": len(symbols) + index for index, symbol in enumerate(symbols)})
    merges = [("c", "a"), ("ca", "t</w>"), ("d", "o"), ("do", "g</w>")]
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    bos, eos = len(vocab), len(vocab) + 1
    vocab.update({"<|startoftext|>": bos, "<|endoftext|>": eos})
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, end_of_word_suffix="</w>", unk_token="<|endoftext|>"))
    folder.mkdir(parents=True)
    backend.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "CLIPTokenizer"}), encoding="utf-8")
    tower = {"hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 2}
    config = CLIPConfig(
        text_config={**tower, "vocab_size": len(vocab), "max_position_embeddings": 16, "bos_token_id": bos,
                     "eos_token_id": eos},
        vision_config={**tower, "image_size": 8, "patch_size": 4},
        projection_dim=8,
    )  # fmt: skip
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 8}, crop_size={"height": 8, "width": 8}).save_pretrained(folder)
    return folder


def dinov2_folder(folder: Path) -> Path:
    from microformers_dinov2 import Dinov2Config, Dinov2Model
    from microformers_vision import BitImageProcessor

    torch.manual_seed(0)
    config = Dinov2Config(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2, image_size=8,
                          patch_size=4)  # fmt: skip
    Dinov2Model(config).save_pretrained(folder)
    BitImageProcessor(size={"shortest_edge": 8}, crop_size={"height": 8, "width": 8}).save_pretrained(folder)
    return folder


def siglip_folder(folder: Path) -> Path:
    """A tiny random SigLIP with a small SentencePiece model (``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2)."""
    import sentencepiece

    from microformers_clip import SiglipConfig, SiglipImageProcessor, SiglipModel

    folder.mkdir(parents=True)
    texts = ["a photo of a cat", "two dogs playing in the snow", "the quick brown fox jumps over the lazy dog"]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts * 20), model_prefix=str(folder / "spiece"), model_type="unigram", vocab_size=60,
        hard_vocab_limit=False, minloglevel=2, num_threads=1, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
    )  # fmt: skip
    (folder / "spiece.vocab").unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "SiglipTokenizer"}), encoding="utf-8")
    tower = {"hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 2}
    config = SiglipConfig(
        text_config={**tower, "vocab_size": 100, "max_position_embeddings": 12},
        vision_config={**tower, "image_size": 8, "patch_size": 4},
    )
    torch.manual_seed(0)
    SiglipModel(config).save_pretrained(folder)
    SiglipImageProcessor(size={"height": 8, "width": 8}).save_pretrained(folder)
    return folder


def vit_folder(folder: Path) -> Path:
    from microformers_vision import ViTImageProcessor
    from microformers_vit import ViTConfig, ViTModel

    torch.manual_seed(0)
    config = ViTConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24, image_size=8,
                       patch_size=4)  # fmt: skip
    ViTModel(config).save_pretrained(folder)
    ViTImageProcessor(size={"height": 8, "width": 8}).save_pretrained(folder)
    return folder


def serve(folder: Path, name: str, **limits: int) -> Any:
    from microformers_serve.app import create_app
    from microformers_serve.commands import load_server

    args = argparse.Namespace(
        model=str(folder), gguf_file=None, quantize=None, dtype=None, model_name=name, max_batch_size=4, max_queue=8,
        max_body_bytes=1 << 20, pack_weights=False, **limits,
    )  # fmt: skip
    return testclient.TestClient(create_app(load_server(args)))


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    folder = clip_folder(tmp_path_factory.mktemp("serve-clip") / "tiny-clip")
    return folder, serve(folder, "clip-tiny")


@pytest.fixture(scope="module")
def dino(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    folder = dinov2_folder(tmp_path_factory.mktemp("serve-dinov2") / "tiny-dinov2")
    return folder, serve(
        folder, "dino-tiny", max_image_pixels=64 * 64, max_image_bytes=16 * 1024, max_embedding_tokens=1000
    )


def embed(client: Any, model: str, value: Any, **fields: Any) -> Any:
    return client.post("/v1/embeddings", json={"model": model, "input": value, **fields})


def vectors(response: Any) -> list[torch.Tensor]:
    assert response.status_code == 200, response.text
    return [torch.tensor(item["embedding"]) for item in response.json()["data"]]


def error(response: Any, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return response.json()["error"]


def test_clip_images_and_texts_are_its_image_and_text_features(clip: tuple[Path, Any]) -> None:
    folder, client = clip
    model = microformers.AutoModel.from_pretrained(folder).eval()
    processor = microformers.AutoImageProcessor.from_pretrained(folder)
    tokenizer = microformers.AutoTokenizer.from_pretrained(folder)
    files = [png(20, 14, seed=0), png(9, 31, seed=1, fmt="JPEG")]
    texts = ["a cat", "the dog is here"]
    inputs = [
        data_url(files[0]),
        texts[0],
        {"type": "image_url", "image_url": {"url": data_url(files[1], "image/jpeg")}},
        {"type": "text", "text": texts[1]},
    ]
    got = vectors(embed(client, "clip-tiny", inputs))
    with torch.no_grad():
        for index, data in zip((0, 2), files, strict=True):
            pixels = processor(PIL_Image.open(io.BytesIO(data)).convert("RGB"), return_tensors="pt")["pixel_values"]
            # batched with the other image in one forward: other shapes than alone, so close rather than equal
            assert_close(got[index], model.get_image_features(pixel_values=pixels).pooler_output[0])
        for index, text in zip((1, 3), texts, strict=True):
            ids = torch.tensor([tokenizer(text)["input_ids"]])
            assert_close(got[index], model.get_text_features(input_ids=ids).pooler_output[0])
    response = embed(client, "clip-tiny", inputs[:1], encoding_format="base64")
    packed = base64.b64decode(response.json()["data"][0]["embedding"])
    assert_close(torch.tensor(struct.unpack(f"<{len(packed) // 4}f", packed)), got[0])
    # an image costs the positions its encoder runs: [CLS] and (8 / 4)^2 patches
    assert response.json()["usage"]["prompt_tokens"] == 1 + 4
    body = error(embed(client, "clip-tiny", [inputs[0], "cat " * 20]))  # the text tower has 16 positions
    assert body["code"] == "context_length_exceeded" and body["param"] == "input[1]"


def test_dinov2_images_are_the_final_cls_state(dino: tuple[Path, Any]) -> None:
    folder, client = dino
    model = microformers.AutoModel.from_pretrained(folder).eval()
    processor = microformers.AutoImageProcessor.from_pretrained(folder)
    files = [png(12, 12, seed=2), png(30, 10, seed=3, fmt="WEBP"), png(8, 8, seed=4, fmt="BMP")]
    got = vectors(embed(client, "dino-tiny", [data_url(data) for data in files]))
    images = [PIL_Image.open(io.BytesIO(data)).convert("RGB") for data in files]
    with torch.no_grad():
        want = model(pixel_values=processor(images, return_tensors="pt")["pixel_values"]).pooler_output
    for row, vector in enumerate(got):
        assert_close(vector, want[row])
    assert not torch.allclose(got[0], got[1])  # different images, different vectors


def test_siglip_texts_are_padded_to_its_length_as_it_was_trained(tmp_path: Path) -> None:
    folder = siglip_folder(tmp_path / "tiny-siglip")
    client = serve(folder, "siglip-tiny")
    model = microformers.AutoModel.from_pretrained(folder).eval()
    tokenizer = microformers.AutoTokenizer.from_pretrained(folder)
    processor = microformers.AutoImageProcessor.from_pretrained(folder)
    response = client.post("/v1/embeddings", json={"model": "siglip-tiny", "input": ["a cat", data_url(png())]})
    got = vectors(response)
    ids = torch.tensor([tokenizer("a cat", padding="max_length", max_length=12)["input_ids"]])
    pixels = processor(PIL_Image.open(io.BytesIO(png())).convert("RGB"), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        assert_close(got[0], model.get_text_features(input_ids=ids).pooler_output[0])
        assert_close(got[1], model.get_image_features(pixel_values=pixels).pooler_output[0])
    assert response.json()["usage"]["prompt_tokens"] == 12 + 4  # a padded text, and 4 patches (no [CLS])


def test_vit_images_are_the_final_cls_state(tmp_path: Path) -> None:
    folder = vit_folder(tmp_path / "tiny-vit")
    client = serve(folder, "vit-tiny")
    model = microformers.AutoModel.from_pretrained(folder).eval()
    processor = microformers.AutoImageProcessor.from_pretrained(folder)
    got = vectors(client.post("/v1/embeddings", json={"model": "vit-tiny", "input": data_url(png(16, 16, seed=5))}))
    pixels = processor(PIL_Image.open(io.BytesIO(png(16, 16, seed=5))).convert("RGB"), return_tensors="pt")
    with torch.no_grad():
        assert_close(got[0], model(**pixels).last_hidden_state[0, 0])


@pytest.mark.parametrize(
    ("value", "code", "says"),
    [
        ("data:image/png;base64,!!not base64!!", "invalid_image", "valid base64"),
        (data_url(b"this is not an image at all"), "invalid_image", "not a PNG, JPEG"),
        (data_url(png(40, 40)[:60]), "invalid_image", "truncated"),
        (data_url(png_declaring(0, 5)), "invalid_image", "image"),  # 0 pixels: Pillow will not even identify it
        (data_url(png_declaring(100_000, 100_000)), "image_too_large", "pixels"),  # 10^10 pixels in 70 bytes
        (data_url(png_declaring(65, 64)), "image_too_large", "--max-image-pixels"),  # one row over this server's
        (data_url(png(200, 200) + bytes(20 * 1024)), "image_too_large", "--max-image-bytes"),
        ("data:image/png,rawbytes", "invalid_image", "base64-encoded"),
        ("data:image/png;base64,", "invalid_image", "no image data"),
        (
            {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}},
            "remote_url_refused",
            "inline",
        ),
        ({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}, "remote_url_refused", "inline"),
        ({"type": "image_url", "image_url": {"url": data_url(png()), "detail": "high"}}, "unsupported", "detail"),
        ({"type": "image_url", "image_url": [1]}, "invalid_type", "url"),
        ("https://example.invalid/cat.png", "unsupported_input", "remote URLs are refused"),
        ("a text for a model that only sees images", "unsupported_input", "images only"),
        ([1, 2, 3], "unsupported_input", "images only"),
    ],
)
def test_bad_images_are_a_400_naming_the_input(dino: tuple[Path, Any], value: Any, code: str, says: str) -> None:
    _, client = dino
    body = error(embed(client, "dino-tiny", [data_url(png()), value]))
    assert body["code"] == code and says in body["message"], body
    assert body["param"].startswith("input[1]"), body


def test_an_animated_image_is_refused_not_cut_to_a_frame(dino: tuple[Path, Any]) -> None:
    _, client = dino
    frames = [PIL_Image.new("RGB", (8, 8), colour) for colour in ("red", "blue")]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:])
    body = error(embed(client, "dino-tiny", data_url(buffer.getvalue(), "image/gif")))
    assert body["code"] == "invalid_image" and "animated" in body["message"]


def test_image_counts_are_bounded_before_any_is_decoded(dino: tuple[Path, Any]) -> None:
    _, client = dino
    server = client.app.state.server
    decoded = []
    embedder = server.embedder
    original = embedder.image_input

    def counting(image: Any) -> Any:
        decoded.append(image.size)
        return original(image)

    embedder.image_input = counting
    try:
        # 5 positions per image: 201 images are over this server's 1,000 (the last one is not even an image)
        many = [data_url(png(8, 8))] * 200 + ["data:image/png;base64,AAAA"]
        body = error(embed(client, "dino-tiny", many))
        assert body["code"] == "too_many_tokens" and "201 images of 5 positions" in body["message"]
        assert decoded == []
        # all images of a request together: at most 4 x --max-image-pixels (64x64 here)
        body = error(embed(client, "dino-tiny", [data_url(png(64, 64))] * 5))
        assert body["code"] == "image_too_large" and "together" in body["message"]
        assert len(decoded) == 4
    finally:
        embedder.image_input = original


def test_many_images_run_in_bounded_batches_with_the_same_vectors(dino: tuple[Path, Any]) -> None:
    from microformers_serve.app import EMBEDDING_BATCH_TOKENS

    _, client = dino
    urls = [data_url(png(10, 10, seed=seed)) for seed in range(40)]
    calls = []
    model = client.app.state.server.embedder.model
    handle = model.register_forward_pre_hook(lambda _, args, kwargs: calls.append(kwargs["pixel_values"].shape[0]),
                                             with_kwargs=True)  # fmt: skip
    try:
        together = vectors(embed(client, "dino-tiny", urls))
    finally:
        handle.remove()
    assert sum(calls) == 40 and max(calls) <= EMBEDDING_BATCH_TOKENS // 5
    for index in (0, 39):
        assert_close(together[index], vectors(embed(client, "dino-tiny", urls[index]))[0])


def test_serving_an_unsupported_vision_model_is_a_clear_error(clip: tuple[Path, Any], tmp_path: Path) -> None:
    from microformers.errors import InputError
    from microformers_clip import CLIPVisionConfig, CLIPVisionModel

    tower = CLIPVisionConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
                             image_size=8, patch_size=4)  # fmt: skip
    CLIPVisionModel(tower).save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"):
        (tmp_path / name).write_bytes((clip[0] / name).read_bytes())
    with pytest.raises(InputError, match="clip_vision_model vision model; microformers serve embeds images with CLIP"):
        serve(tmp_path, "tower")


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF", "BMP"])
def test_corrupted_files_decode_or_are_a_400_never_another_error(fmt: str) -> None:
    """Every file with a few random bytes changed, or cut short anywhere: an RGB image within the limits, or a 400."""
    import random

    from microformers_serve.app import APIError
    from microformers_serve.images import decode_image

    rng = random.Random(fmt)
    original = png(24, 16, seed=7, fmt=fmt)
    variants = [original[:cut] for cut in range(0, len(original), max(1, len(original) // 40))]
    for _ in range(150):
        data = bytearray(original)
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        variants.append(bytes(data))
    outcomes = {"decoded": 0, "refused": 0}
    for data in variants:
        try:
            image = decode_image(data_url(data), "input[0]", 1 << 20, 64 * 64, 4 * 64 * 64)
        except APIError as exc:
            assert exc.status == 400 and exc.param == "input[0]", exc.message
            outcomes["refused"] += 1
        else:
            assert image.mode == "RGB" and 0 < image.width * image.height <= 64 * 64
            outcomes["decoded"] += 1
    assert outcomes["refused"] > 0  # the cut files at least
