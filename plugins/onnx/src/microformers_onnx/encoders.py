"""Graphs of the vision and audio encoders: ``pixel_values`` (ViT, DeiT, DINOv2, CLIP/SigLIP vision) and
``input_values`` (Wav2Vec2 CTC).

- ``feature-extraction`` of an image model: ``pixel_values`` -> ``last_hidden_state`` (and ``pooler_output`` /
  ``image_embeds`` where the model returns them). A two-tower model (CLIP, SigLIP) exports its vision tower.
- ``image-classification``: ``pixel_values`` -> ``logits``.
- ``automatic-speech-recognition`` (a CTC head): ``input_values`` -> ``logits`` per frame.

The batch axis is dynamic, and so is the audio's length; images keep the size the model was configured for
(``config.image_size``), as the position embeddings are learned for it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .export import TASKS, Case, ExportGraph, OnnxExportError

FEATURE_OUTPUTS = ("last_hidden_state", "pooler_output", "image_embeds")
AUDIO_EXPORT_SAMPLES = 1600  # a tenth of a second at 16 kHz: enough frames for every tiny and real conv stack


class EncoderGraph(ExportGraph):
    """One input tensor (``pixel_values`` or ``input_values``) -> the task's outputs."""

    def __init__(self, model: nn.Module, input_name: str, outputs: Sequence[str]) -> None:
        super().__init__()
        self.model = model
        self.input_name = input_name
        self.input_names = (input_name,)
        self.output_names = tuple(outputs)
        if input_name == "input_values":
            self.export_case = Case(2, AUDIO_EXPORT_SAMPLES)
            self.validation_cases = (Case(3, AUDIO_EXPORT_SAMPLES + 800), Case(1, AUDIO_EXPORT_SAMPLES - 400))
        else:
            self.export_case = Case(2, 0)
            self.validation_cases = (Case(3, 0), Case(1, 0))

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs = self.model(**{self.input_name: inputs[0]}, return_dict=True)
        return tuple(getattr(outputs, name) for name in self.output_names)

    def sample(self, case: Case, seed: int = 0) -> tuple[torch.Tensor, ...]:
        generator = torch.Generator().manual_seed(seed)
        parameter = next(self.model.parameters())
        if self.input_name == "input_values":
            values = torch.randn(case.batch, case.length, generator=generator)
        elif self.input_name == "input_features":  # Whisper: a fixed number of frames (2 x the encoder's positions)
            config = self.model.config
            frames = 2 * config.max_source_positions
            values = torch.randn(case.batch, config.num_mel_bins, frames, generator=generator)
        else:
            config = self.model.config
            side = config.image_size if isinstance(config.image_size, int) else config.image_size[0]
            other = side if isinstance(config.image_size, int) else config.image_size[1]
            values = torch.randn(case.batch, getattr(config, "num_channels", 3), side, other, generator=generator)
        return (values.to(device=parameter.device, dtype=parameter.dtype),)

    def reference(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        outputs = self.model(**{self.input_name: inputs[0]}, return_dict=True)
        return [getattr(outputs, name) for name in self.output_names]

    def axes(self) -> dict[str, dict[int, str]]:
        if self.input_name == "input_values":
            return {self.input_name: {0: "batch_size", 1: "sequence_length"}}
        return {self.input_name: {0: "batch_size"}}


def encoder_graph(model: nn.Module, task: str) -> EncoderGraph:
    """The graph of a model reading ``pixel_values`` or ``input_values`` for ``task``."""
    main_input = getattr(model, "main_input_name", "input_ids")
    if main_input == "input_ids" and isinstance(getattr(model, "vision_model", None), nn.Module):
        model = model.vision_model  # a two-tower model: its image encoder
        main_input = getattr(model, "main_input_name", "pixel_values")
    if main_input == "input_features" and getattr(model.config, "is_encoder_decoder", False):
        model = model.get_encoder()  # Whisper: the encoder of log-mel features
    fits = {
        "pixel_values": ("feature-extraction", "image-classification"),
        "input_values": ("feature-extraction", "automatic-speech-recognition"),
        "input_features": ("feature-extraction",),
    }
    if main_input not in fits:
        raise OnnxExportError(
            f"{type(model).__name__} reads {main_input!r}; its encoder is not exported yet (graphs read input_ids, "
            "pixel_values or input_values)"
        )
    if task not in fits[main_input]:
        raise OnnxExportError(
            f"task {task!r} does not fit {type(model).__name__}, which reads {main_input}; choose --task "
            f"{' or --task '.join(fits[main_input])}"
        )
    graph = EncoderGraph(model, main_input, ())
    probe = graph.sample(Case(1, AUDIO_EXPORT_SAMPLES))
    outputs = model(**{main_input: probe[0]}, return_dict=True)
    wanted = TASKS[task].outputs if task != "feature-extraction" else FEATURE_OUTPUTS
    names = [name for name in wanted if getattr(outputs, name, None) is not None]
    if not names or (task != "feature-extraction" and len(names) != len(wanted)):
        raise OnnxExportError(
            f"{type(model).__name__} does not return {', '.join(wanted)}; task {task!r} needs a model loaded with "
            f"{TASKS[task].auto_class}"
        )
    return EncoderGraph(model, main_input, names)
