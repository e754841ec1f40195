"""Images for ``/v1/embeddings``: what a vision model (CLIP, SigLIP, ViT, DeiT, DINOv2) is served with.

An image reaches the endpoint inline, as a base64 ``data:image/...`` URL, either as an ``input`` item of its own or in
the content-part shape of OpenAI's chat API, ``{"type": "image_url", "image_url": {"url": "data:..."}}``; texts may be
sent as strings or ``{"type": "text", "text": ...}`` next to them. The server never fetches anything: remote URLs
(``http(s)://``, ``file://``) are refused. Every size is checked before the work it costs: the base64 length
(decoded bytes, ``--max-image-bytes``) before decoding it, the width and height in the header (``--max-image-pixels``,
a guard in the spirit of Pillow's ``Image.MAX_IMAGE_PIXELS``, and all images of a request together at most
``REQUEST_PIXELS_FACTOR`` times that) before the pixels are decompressed. Only PNG, JPEG, WebP, GIF and BMP are opened
(no format that runs an outside program); an animated image is refused rather than cut to a frame.

Two-tower models (CLIP, SigLIP: ``get_image_features`` and ``get_text_features``) embed images and texts in the same
space; vision encoders (ViT, DeiT, DINOv2) embed images as the final [CLS] state (after the final LayerNorm: DINOv2's
``pooler_output``; for ViT, unlike its pooler, trained in every checkpoint).
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from collections.abc import Callable
from typing import Any

import attrs

from .app import EMBEDDING_BATCH_TOKENS, MAX_EMBEDDING_INPUTS, APIError, Embedder, Server, bad

REQUEST_PIXELS_FACTOR = 4  # all images of one request together: at most this many times --max-image-pixels
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
VISION_ENCODERS = ("vit", "deit", "dinov2")  # embedded by their final [CLS] state
_DATA_URL = re.compile(r"data:(?P<mime>image/[A-Za-z0-9.+-]+)(?P<params>(;[^;,]*)*),", re.ASCII | re.IGNORECASE)
_WHITESPACE = re.compile(rb"\s+")


@attrs.define
class ImageInput:
    """One decoded, processed image: ``pixel_values`` ``(1, channels, height, width)`` and the positions the vision
    encoder runs for it (counted against ``--max-embedding-tokens``)."""

    pixel_values: Any
    tokens: int


def is_image_item(item: Any) -> bool:
    """An ``input`` item that asks for an image (a ``data:image/`` string or an ``image_url`` part)."""
    if isinstance(item, str):
        return item[:11].lower() == "data:image/"
    return isinstance(item, dict) and item.get("type") == "image_url"


def embedding_kind(model: Any) -> str:
    """``"two_tower"`` (CLIP/SigLIP), ``"vision"`` (ViT/DeiT/DINOv2) or ``"text"`` (mean-pooled encoders)."""
    if callable(getattr(model, "get_image_features", None)) and callable(getattr(model, "get_text_features", None)):
        return "two_tower"
    if getattr(model, "main_input_name", None) == "pixel_values":
        return "vision"
    return "text"


def image_url(item: Any, param: str) -> str:
    """The data URL of an image item, or a 400 naming ``param``."""
    if isinstance(item, str):
        return item
    allowed = {"type", "image_url"}
    extra = sorted(set(item) - allowed)
    if extra:
        raise bad(param, f"an image_url part has only 'type' and 'image_url', got {extra[0]!r}", "invalid_type")
    inner = item.get("image_url")
    if isinstance(inner, str):
        inner = {"url": inner}
    if not isinstance(inner, dict) or not isinstance(inner.get("url"), str):
        raise bad(f"{param}.image_url", 'must be {"url": "data:image/...;base64,..."}', "invalid_type")
    for key, value in inner.items():
        if key == "detail" and value in (None, "auto"):
            continue  # the model's image processor sets the resolution; only the no-op value is accepted
        if key != "url":
            raise bad(f"{param}.image_url.{key}", "is not supported (the image processor sets the resolution)",
                      "unsupported")  # fmt: skip
    return inner["url"]


def decode_image(url: str, param: str, max_bytes: int, max_pixels: int, pixels_left: int) -> Any:
    """A data URL -> an RGB PIL image, with every size checked before the work it costs. Bad input is a 400 (``bad``)
    naming ``param``; ``pixels_left`` is what the request's other images left of its pixel budget."""
    import PIL.Image

    match = _DATA_URL.match(url)
    if match is None:
        lowered = url[:8].lower()
        if lowered.startswith(("http://", "https://", "file:/", "ftp://")):
            raise bad(param, "remote image URLs are refused (microformers serve downloads nothing): send the image "
                      "inline as a data:image/png;base64,... URL", "remote_url_refused")  # fmt: skip
        raise bad(param, "an image must be a data:image/<type>;base64,<data> URL", "invalid_image")
    if "base64" not in [p.strip().lower() for p in match["params"].split(";")]:
        raise bad(param, "the data URL must be base64-encoded (data:image/<type>;base64,...)", "invalid_image")
    payload = url[match.end() :].encode("ascii", "replace")
    if len(payload) // 4 * 3 > max_bytes + 2:  # before decoding: base64 holds 3 bytes per 4 characters
        raise bad(param, f"the image has about {len(payload) // 4 * 3} bytes; at most {max_bytes} are accepted "
                  "(--max-image-bytes): send a smaller file", "image_too_large")  # fmt: skip
    try:
        data = base64.b64decode(_WHITESPACE.sub(b"", payload), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise bad(param, f"the data URL does not hold valid base64 ({exc})", "invalid_image") from None
    if not data:
        raise bad(param, "the data URL holds no image data", "invalid_image")
    try:
        image = PIL.Image.open(io.BytesIO(data), formats=IMAGE_FORMATS)
    except PIL.Image.DecompressionBombError as exc:
        raise bad(param, f"the image is too large to decode safely ({exc})", "image_too_large") from None
    except PIL.UnidentifiedImageError:
        raise bad(param, f"the data is not a {', '.join(IMAGE_FORMATS)} image", "invalid_image") from None
    except Exception as exc:  # Pillow raises many types for a header it cannot read
        raise bad(param, f"the data is not a readable image ({type(exc).__name__}: {exc}); send a "
                  f"{', '.join(IMAGE_FORMATS)} file", "invalid_image") from None  # fmt: skip
    with image:
        width, height = image.size
        if width * height == 0:
            raise bad(param, f"the image has 0 pixels ({width}x{height})", "invalid_image")
        if width * height > max_pixels:
            raise bad(param, f"the image is {width}x{height} = {width * height} pixels; at most {max_pixels} are "
                      "accepted (--max-image-pixels): downscale it", "image_too_large")  # fmt: skip
        if width * height > pixels_left:
            raise bad("input", f"the images of this request have more than {REQUEST_PIXELS_FACTOR} x "
                      f"--max-image-pixels = {REQUEST_PIXELS_FACTOR * max_pixels} pixels together; send them over "
                      "several requests", "image_too_large")  # fmt: skip
        try:
            if getattr(image, "is_animated", False):
                raise bad(param, f"the image is animated ({image.format}); send one frame as a still image",
                          "invalid_image")  # fmt: skip
            image.load()
            return image.convert("RGB")
        except APIError:
            raise
        except Exception as exc:  # truncated or corrupt data: Pillow raises OSError, SyntaxError, ValueError ...
            raise bad(param, f"the image cannot be decoded ({type(exc).__name__}: {exc}); is the file truncated?",
                      "invalid_image") from None  # fmt: skip


def image_positions(config: Any, prefix: int, height: int, width: int) -> int:
    """The positions the vision encoder runs for a ``height x width`` image: ``prefix`` tokens and the patches."""
    vision = getattr(config, "vision_config", None) or config
    patch = getattr(vision, "patch_size", 1)
    patch_h, patch_w = (patch, patch) if isinstance(patch, int) else tuple(patch)
    return prefix + (height // patch_h) * (width // patch_w)


class MultimodalEmbedder(Embedder):
    """Image (and, for two-tower models, text) embeddings, one batch at a time on a worker thread.

    ``kind`` is :func:`embedding_kind`'s. Texts of a two-tower model run in groups of equal length, unpadded (CLIP pools
    at the end-of-text token): each vector is what ``get_text_features`` gives that text alone. Images run in groups
    of equal size, at most ``EMBEDDING_BATCH_TOKENS`` positions (at least one image) per forward.
    """

    def __init__(
        self, model: Any, tokenizer: Any, image_processor: Any, kind: str, folder: Any = None, max_pending: int = 64
    ) -> None:
        super().__init__(model, tokenizer, folder, max_pending)
        self.image_processor = image_processor
        self.kind = kind
        self.text_options: dict[str, Any] = {}
        text_config = getattr(model.config, "text_config", None)
        self.text_limit: int | None = getattr(text_config, "max_position_embeddings", None)
        if kind == "two_tower" and "siglip" in str(getattr(model.config, "model_type", "")):
            # SigLIP was trained on texts padded to the full length (as its processor and the reference pipeline pad)
            self.text_options = {"padding": "max_length", "max_length": self.text_limit or 64}
        # One forward on a processed blank image: how many positions an image costs (and a check the model runs).
        import PIL.Image

        blank = self.process(PIL.Image.new("RGB", (64, 64)))
        height, width = blank.shape[-2:]
        with self._lock:
            hidden = self._vision_outputs(blank).last_hidden_state
        self.prefix_tokens = hidden.shape[1] - image_positions(model.config, 0, height, width)
        self.image_tokens = hidden.shape[1]

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer(text, **self.text_options)["input_ids"])

    def process(self, image: Any) -> Any:
        """An RGB PIL image -> ``pixel_values`` ``(1, channels, height, width)`` on the model's device and dtype."""
        pixels = self.image_processor(image, return_tensors="pt")["pixel_values"]
        return pixels.to(device=self.model.device, dtype=self.model.dtype)

    def image_input(self, image: Any) -> ImageInput:
        pixels = self.process(image)
        height, width = pixels.shape[-2:]
        return ImageInput(pixels, image_positions(self.model.config, self.prefix_tokens, height, width))

    def _vision_outputs(self, pixels: Any) -> Any:
        import torch

        with torch.inference_mode():
            if self.kind == "two_tower":
                return self.model.get_image_features(pixel_values=pixels, return_dict=True)
            return self.model(pixel_values=pixels, return_dict=True)

    def embed(self, batch: list[Any]) -> list[list[float]]:  # type: ignore[override]
        """One vector per input (token ids or :class:`ImageInput`), in order."""
        vectors: list[list[float]] = [[] for _ in batch]
        groups: dict[tuple[Any, ...], list[int]] = {}
        for index, item in enumerate(batch):
            key = ("image", *item.pixel_values.shape[1:]) if isinstance(item, ImageInput) else ("text", len(item))
            groups.setdefault(key, []).append(index)
        for key, indices in groups.items():
            cost = batch[indices[0]].tokens if key[0] == "image" else key[1]
            step = max(1, EMBEDDING_BATCH_TOKENS // max(cost, 1))
            run: Callable[[list[Any]], Any] = self._images if key[0] == "image" else self._texts
            for start in range(0, len(indices), step):
                chunk = indices[start : start + step]
                for index, vector in zip(chunk, run([batch[i] for i in chunk]), strict=True):
                    vectors[index] = vector
        return vectors

    def _images(self, items: list[ImageInput]) -> list[list[float]]:
        import torch

        with self._lock:
            outputs = self._vision_outputs(torch.cat([item.pixel_values for item in items]))
            if self.kind == "two_tower":
                pooled = outputs if isinstance(outputs, torch.Tensor) else outputs.pooler_output
            else:
                pooled = outputs.last_hidden_state[:, 0]  # the final [CLS] state
            return self._finish(pooled)

    def _texts(self, rows: list[list[int]]) -> list[list[float]]:
        import torch

        with self._lock, torch.inference_mode():
            ids = torch.tensor(rows, dtype=torch.long, device=self.model.device)
            outputs = self.model.get_text_features(input_ids=ids, return_dict=True)
            return self._finish(outputs if isinstance(outputs, torch.Tensor) else outputs.pooler_output)

    def _finish(self, pooled: Any) -> list[list[float]]:
        import torch

        pooled = pooled.float()
        if self.normalize:
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.tolist()


def _is_ids(item: Any) -> bool:
    return isinstance(item, list) and bool(item) and all(isinstance(t, int) and not isinstance(t, bool) for t in item)


def _text_part(item: dict[str, Any], param: str) -> str:
    extra = sorted(set(item) - {"type", "text"})
    if extra:
        raise bad(param, f"a text part has only 'type' and 'text', got {extra[0]!r}", "invalid_type")
    if not isinstance(item.get("text"), str):
        raise bad(f"{param}.text", "must be a string", "invalid_type")
    return item["text"]


def embedding_inputs(server: Server, value: Any) -> list[Any]:
    """``input`` of a request to a vision model -> token id lists and :class:`ImageInput` s, in order.

    Sizes first: the count, every text's characters and the images at the model's usual size against
    ``--max-embedding-tokens``, before anything is decoded or tokenized; then each image's bytes and pixels before
    its pixels are decompressed (:func:`decode_image`), and the exact total before the forward.
    """
    embedder = server.embedder
    assert isinstance(embedder, MultimodalEmbedder)
    if isinstance(value, (str, dict)) or _is_ids(value):
        value = [value]
    if not isinstance(value, list) or not value:
        raise bad("input", "must be a string, an image, or a non-empty list of them (texts, data:image/...;base64 "
                  "URLs, image_url or text parts, token id lists)", "invalid_type")  # fmt: skip
    if len(value) > MAX_EMBEDDING_INPUTS:
        raise bad("input", f"at most {MAX_EMBEDDING_INPUTS} inputs per request, got {len(value)}")
    budget = server.max_embedding_tokens
    items: list[tuple[str, Any]] = []
    chars = images = 0
    for index, item in enumerate(value):  # sizes before any decoding or tokenizing
        param = f"input[{index}]"
        if is_image_item(item):
            items.append(("image", item))
            images += 1
            continue
        if isinstance(item, dict) and item.get("type") == "text":
            item = _text_part(item, param)
        if embedder.kind == "vision" and (isinstance(item, str) or _is_ids(item)):
            hint = (
                " (remote URLs are refused: send the image inline)" if isinstance(item, str) and "://" in item else ""
            )
            raise bad(param, f"{server.model_id} embeds images only: send data:image/<type>;base64,... URLs or "
                      f'{{"type": "image_url", "image_url": {{"url": ...}}}} parts{hint}', "unsupported_input")  # fmt: skip
        if isinstance(item, str):
            if not item:
                raise bad(param, "must not be empty")
            server.check_text_size(len(item), param)
            chars += len(item)
            items.append(("text", item))
        elif _is_ids(item):
            server.check_ids(item, param)
            items.append(("ids", item))
        else:
            raise bad(param, "must be a string, a data:image/...;base64 URL, an image_url or text part, or a list of "
                      "token ids", "invalid_type")  # fmt: skip
    server.check_text_size(chars, "input", budget)
    if images * embedder.image_tokens > budget:
        raise _too_many(budget, f"{images} images of {embedder.image_tokens} positions each")
    batch: list[Any] = []
    total = 0
    pixels_left = REQUEST_PIXELS_FACTOR * server.max_image_pixels
    for index, (kind, item) in enumerate(items):
        param = f"input[{index}]"
        if kind == "image":
            image = decode_image(image_url(item, param), param, server.max_image_bytes, server.max_image_pixels,
                                 pixels_left)  # fmt: skip
            pixels_left -= image.width * image.height
            entry: Any = embedder.image_input(image)
            cost = entry.tokens
        else:
            entry = embedder.tokenize(item) if kind == "text" else list(item)
            cost = len(entry)
            if cost > server.context_length:
                raise APIError(
                    400, f"{param} has {cost} tokens; this model takes at most {server.context_length}",
                    param=param, code="context_length_exceeded",
                )  # fmt: skip
        total += cost
        if total > budget:
            raise _too_many(budget, "the inputs")
        batch.append(entry)
    return batch


def _too_many(budget: int, what: str) -> APIError:
    return APIError(
        400, f"input: {what} take more than {budget} positions together, the most this server embeds in one request "
        "(--max-embedding-tokens; an image counts as the positions its encoder runs); send them over several requests",
        param="input", code="too_many_tokens",
    )  # fmt: skip
