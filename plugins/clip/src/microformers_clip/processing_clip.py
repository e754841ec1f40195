"""``CLIPProcessor`` and ``SiglipProcessor``: an image processor and a tokenizer used as one.

``processor(images=..., text=..., return_tensors="pt", padding=True)`` -> ``input_ids``, ``attention_mask`` (when the
tokenizer returns one) and ``pixel_values``; keyword arguments go to whichever of the two takes them, and one that
neither takes is an error. Files: ``processor_config.json`` with the image settings nested under
``image_processor`` (as the reference writes it) plus the tokenizer's files; folders that instead hold
``preprocessor_config.json`` load too. The tokenizer is whatever ``AutoTokenizer`` loads for the folder
(``CLIPTokenizerFast``, ``SiglipTokenizer``).
"""

from __future__ import annotations

import inspect
import os
from typing import Any, ClassVar

from microformers.errors import ConfigError, InputError
from microformers_sdk.processing import BatchFeature, ProcessorBase
from microformers_vision import check_backend

from .image_processing_clip import CLIPImageProcessor
from .image_processing_siglip import SiglipImageProcessor

__all__ = ["CLIPProcessor", "SiglipProcessor"]


def _parameters(function: Any) -> set[str]:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}


class CLIPProcessor(ProcessorBase):
    """CLIP's image processor and tokenizer as one object (``CLIPImageProcessor`` + ``CLIPTokenizerFast``)."""

    image_processor_class: ClassVar[type] = CLIPImageProcessor
    attributes: ClassVar[list[str]] = ["image_processor", "tokenizer"]

    def __init__(self, image_processor: Any = None, tokenizer: Any = None, **kwargs: Any) -> None:
        legacy = kwargs.pop("feature_extractor", None)  # the name older code used for the image processor
        if kwargs:
            raise ConfigError(f"{type(self).__name__}() got unexpected arguments {sorted(kwargs)}")
        image_processor = image_processor if image_processor is not None else legacy
        if image_processor is None or tokenizer is None:
            raise ConfigError(
                f"{type(self).__name__} needs both image_processor=... and tokenizer=..., got "
                f"image_processor={type(image_processor).__name__}, tokenizer={type(tokenizer).__name__}"
            )
        self.image_processor = image_processor
        self.tokenizer = tokenizer

    def __repr__(self) -> str:
        return f"{type(self).__name__}(image_processor={self.image_processor!r}, tokenizer={self.tokenizer!r})"

    @property
    def feature_extractor(self) -> Any:
        return self.image_processor

    @property
    def model_input_names(self) -> list[str]:
        names = list(getattr(self.tokenizer, "model_input_names", ["input_ids", "attention_mask"]))
        return names + [n for n in self.image_processor.model_input_names if n not in names]

    # -- calling ------------------------------------------------------------------------------------
    def _split_kwargs(self, kwargs: dict[str, Any], images: bool, text: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        image_names = _parameters(self.image_processor.preprocess) if images else set()
        text_names = (_parameters(self.tokenizer.__call__) | {"return_tensors"}) if text else set()
        unknown = sorted(k for k in kwargs if k not in image_names | text_names)
        if unknown:
            raise InputError(
                f"{type(self).__name__}() got arguments {unknown} that neither the image processor nor the tokenizer "
                "takes"
            )
        return (
            {k: v for k, v in kwargs.items() if k in image_names},
            {k: v for k, v in kwargs.items() if k in text_names},
        )

    def __call__(self, images: Any = None, text: Any = None, **kwargs: Any) -> Any:
        """``images`` through the image processor, ``text`` through the tokenizer; both: one batch with all keys."""
        if images is None and text is None:
            raise InputError(f"{type(self).__name__}() needs images=... and/or text=...")
        image_kwargs, text_kwargs = self._split_kwargs(kwargs, images is not None, text is not None)
        encoding = self.tokenizer(text, **text_kwargs) if text is not None else None
        pixels = self.image_processor(images, **image_kwargs) if images is not None else None
        if pixels is None:
            return encoding
        if encoding is None:
            return pixels
        return BatchFeature(data={**dict(encoding), **dict(pixels)})

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike[str], **kwargs: Any) -> Any:
        """Load the image processor and the tokenizer of a folder (or Hub id)."""
        from microformers.auto import AutoTokenizer, resolve_source
        from microformers.hub import split_hub_kwargs

        pretrained, kwargs = resolve_source(pretrained_model_name_or_path, kwargs)
        hub_kwargs, rest = split_hub_kwargs(kwargs)
        rest.pop("trust_remote_code", None)
        check_backend(cls.__name__, rest.pop("use_fast", None), rest.pop("backend", None))
        image_class = cls.image_processor_class
        settings = image_class.get_feature_extractor_dict(pretrained, **hub_kwargs)
        image_names = set(settings) | set(image_class._settings)
        image_kwargs = {k: rest.pop(k) for k in list(rest) if k in image_names}
        image_processor = image_class.from_dict(settings, **image_kwargs)
        tokenizer = AutoTokenizer.from_pretrained(pretrained, **hub_kwargs, **rest)
        return cls(image_processor=image_processor, tokenizer=tokenizer)


class SiglipProcessor(CLIPProcessor):
    """SigLIP's image processor and tokenizer (``SiglipImageProcessor`` + ``SiglipTokenizer``) as one object.

    SigLIP was trained on texts padded to 64 tokens: pass ``padding="max_length"`` as the reference's model card does.
    """

    image_processor_class: ClassVar[type] = SiglipImageProcessor
