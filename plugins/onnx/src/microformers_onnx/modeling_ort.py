"""Models that run an exported ``model.onnx`` with ONNX Runtime behind the usual microformers API.

``ORTModelForCausalLM.from_pretrained(folder)`` loads what ``microformers export onnx`` wrote (the
graph, ``config.json``, ``generation_config.json``, ``onnx_export.json``); its ``forward`` takes
torch tensors and returns the usual output classes, and ``generate`` is the kernel's, run by the
installed generation strategies (``microformers-generation``): a with-past graph hands them an
:class:`OrtCache`, a past-less one (task ``text-generation``) reruns the whole sequence each step.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from pathlib import Path
from typing import Any, ClassVar

import torch

from microformers import AutoConfig, FileMissingError, GenerationConfig, GenerationError, InputError, PluginError
from microformers.generation import GenerationMixin
from microformers_sdk.cache import Cache
from microformers_sdk.outputs import (
    BaseModelOutput,
    BaseModelOutputWithPooling,
    CausalLMOutput,
    CausalLMOutputWithPast,
    MaskedLMOutput,
    QuestionAnsweringModelOutput,
    Seq2SeqLMOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from microformers_sdk.seq2seq import EncoderDecoderCache

from .export import EXPORT_INFO_NAME, MODEL_FILE_NAME, OnnxExportError
from .seq2seq import DECODER_FILE, DECODER_WITH_PAST_FILE, ENCODER_FILE

logger = logging.getLogger("microformers")

_NUMPY_TYPES = {"tensor(int64)": torch.long, "tensor(int32)": torch.int32, "tensor(float)": torch.float32,
                "tensor(float16)": torch.float16}  # fmt: skip


class _OnCpu:
    """What torch-module callers ask of a model that ONNX Runtime runs: CPU tensors in and out, the export's dtype."""

    export_info: dict[str, Any]

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float16 if self.export_info.get("dtype") == "fp16" else torch.float32

    def eval(self) -> Any:
        return self

    def to(self, *args: Any, **kwargs: Any) -> Any:
        """Only CPU tensors go in and out; the sessions' providers decide where the graphs run."""
        return self


class ORTModel(_OnCpu):
    """An ONNX Runtime session over an exported folder; subclasses turn its outputs into output classes."""

    task: ClassVar[tuple[str, ...]] = ()  # the export tasks whose graphs this class runs
    main_input_name = "input_ids"

    def __init__(self, session: Any, config: Any, folder: Path, export_info: dict[str, Any]) -> None:
        self.session = session
        self.config = config
        self.folder = folder
        self.export_info = export_info
        self.input_names = tuple(i.name for i in session.get_inputs())
        self.output_names = tuple(o.name for o in session.get_outputs())
        self.input_types = {i.name: i.type for i in session.get_inputs()}
        self.name_or_path = str(folder)

    @classmethod
    def from_pretrained(
        cls,
        folder: str | os.PathLike[str],
        *,
        file_name: str = MODEL_FILE_NAME,
        providers: list[str] | None = None,
        session_options: Any = None,
        **kwargs: Any,
    ) -> ORTModel:
        """Load ``folder/model.onnx`` (a folder ``microformers export onnx`` wrote) into an ONNX Runtime session.

        ``providers`` defaults to the CPU execution provider; ``session_options`` is an
        ``onnxruntime.SessionOptions``. Other keyword arguments are refused (none is read).
        """
        import onnxruntime

        if kwargs:
            raise InputError(
                f"{cls.__name__}.from_pretrained() got arguments it does not read: {sorted(kwargs)}; it takes "
                "file_name=, providers= and session_options="
            )
        root = Path(folder)
        path = root / file_name
        if not path.is_file():
            raise FileMissingError(
                f"{path} does not exist: export the model first (microformers export onnx MODEL {root})"
            )
        info_path = root / EXPORT_INFO_NAME
        info = json.loads(info_path.read_text()) if info_path.is_file() else {}
        if cls.task and info.get("task") and info["task"] not in cls.task:
            raise OnnxExportError(
                f"{path} was exported for task {info['task']!r}; {cls.__name__} runs {' or '.join(cls.task)} graphs. "
                f"Export again with --task {cls.task[-1]}, or load it with the class for its task"
            )
        options = session_options
        if options is None:
            options = onnxruntime.SessionOptions()
            options.log_severity_level = 3
        session = onnxruntime.InferenceSession(str(path), options, providers=providers or ["CPUExecutionProvider"])
        config = AutoConfig.from_pretrained(str(root))
        return cls(session, config, root, info)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Run the graph on named tensors; every graph input must be given (no more)."""
        missing = [name for name in self.input_names if name not in feeds]
        if missing:
            raise InputError(f"the ONNX graph in {self.folder} needs the inputs {missing}")
        arrays = {}
        for name in self.input_names:
            tensor = feeds[name]
            want = _NUMPY_TYPES.get(self.input_types[name])
            if want is not None:
                tensor = tensor.to(want)
            arrays[name] = tensor.detach().cpu().contiguous().numpy()
        outputs = self.session.run(list(self.output_names), arrays)
        return {name: torch.from_numpy(value) for name, value in zip(self.output_names, outputs)}

    def _single_input_feeds(
        self, name: str, value: torch.Tensor | None, input_ids: Any, attention_mask: Any, kwargs: dict[str, Any]
    ) -> dict[str, torch.Tensor]:
        unused = {k: v for k, v in kwargs.items() if v is not None and k != "return_dict"}
        if input_ids is not None or attention_mask is not None:
            unused["input_ids" if input_ids is not None else "attention_mask"] = True
        if unused:
            raise InputError(
                f"{type(self).__name__}.forward does not take {sorted(unused)} (the graph's input: {name})"
            )
        if value is None:
            raise InputError(f"{type(self).__name__}.forward needs {name}")
        return {name: value}

    def _encoder_feeds(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        kwargs: dict[str, Any],
    ) -> dict[str, torch.Tensor]:
        unused = {k: v for k, v in kwargs.items() if v is not None and k not in ("return_dict",)}
        if unused:
            raise InputError(f"{type(self).__name__}.forward does not take {sorted(unused)} (the graph's inputs: "
                             f"{', '.join(self.input_names)})")  # fmt: skip
        if input_ids is None:
            raise InputError(f"{type(self).__name__}.forward needs input_ids")
        if input_ids.dim() == 1:
            input_ids = input_ids.unsqueeze(0)
        feeds = {"input_ids": input_ids}
        feeds["attention_mask"] = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        if "token_type_ids" in self.input_names:
            feeds["token_type_ids"] = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        elif token_type_ids is not None and bool(token_type_ids.any()):
            raise InputError(f"the graph in {self.folder} has no token_type_ids input; do not pass segment ids")
        return feeds


class ORTModelForFeatureExtraction(ORTModel):
    """``last_hidden_state`` of a text encoder (ids and mask), of an image encoder (``pixel_values``; with
    ``pooler_output`` / ``image_embeds`` where the graph has them) or of Whisper's encoder (``input_features``)."""

    task = ("feature-extraction",)

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        pixel_values=None,
        input_features=None,
        **kwargs: Any,
    ) -> BaseModelOutput:
        if "input_features" in self.input_names:  # Whisper's encoder
            out = self.run(
                self._single_input_feeds("input_features", input_features, input_ids, attention_mask, kwargs)
            )
            return BaseModelOutput(last_hidden_state=out["last_hidden_state"])
        if input_features is not None:
            raise InputError(f"the graph in {self.folder} reads {self.input_names[0]}, not input_features")
        if "pixel_values" in self.input_names:
            out = self.run(self._single_input_feeds("pixel_values", pixel_values, input_ids, attention_mask, kwargs))
            extra = {name: out[name] for name in ("pooler_output", "image_embeds") if name in out}
            return (BaseModelOutputWithPooling if extra else BaseModelOutput)(
                last_hidden_state=out["last_hidden_state"], **extra
            )
        if pixel_values is not None:
            raise InputError(f"the graph in {self.folder} reads token ids, not pixel_values")
        out = self.run(self._encoder_feeds(input_ids, attention_mask, token_type_ids, kwargs))
        return BaseModelOutput(last_hidden_state=out["last_hidden_state"])


class ORTModelForImageClassification(ORTModel):
    """``pixel_values`` (the model's image size) -> ``logits``; ``config.id2label`` names the classes."""

    task = ("image-classification",)
    main_input_name = "pixel_values"

    def forward(self, pixel_values=None, **kwargs: Any) -> SequenceClassifierOutput:
        out = self.run(self._single_input_feeds("pixel_values", pixel_values, None, None, kwargs))
        return SequenceClassifierOutput(logits=out["logits"])


class ORTModelForCTC(ORTModel):
    """A CTC speech model's graph (Wav2Vec2): ``input_values`` (16 kHz samples) -> ``logits`` per frame.

    The graph takes no attention mask: pass unpadded audio (one clip per call, or clips of one length), as for
    the checkpoints whose feature encoder uses group norm (``feat_extract_norm="group"``).
    """

    task = ("automatic-speech-recognition",)
    main_input_name = "input_values"

    def forward(self, input_values=None, attention_mask=None, **kwargs: Any) -> CausalLMOutput:
        if attention_mask is not None and not bool(attention_mask.all()):
            raise InputError(
                f"the graph in {self.folder} takes no attention_mask; pass audio without padding (one clip at a time)"
            )
        out = self.run(self._single_input_feeds("input_values", input_values, None, None, kwargs))
        return CausalLMOutput(logits=out["logits"])


class ORTModelForSequenceClassification(ORTModel):
    task = ("text-classification",)

    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs: Any
    ) -> SequenceClassifierOutput:
        out = self.run(self._encoder_feeds(input_ids, attention_mask, token_type_ids, kwargs))
        return SequenceClassifierOutput(logits=out["logits"])


class ORTModelForTokenClassification(ORTModel):
    task = ("token-classification",)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs: Any) -> TokenClassifierOutput:
        out = self.run(self._encoder_feeds(input_ids, attention_mask, token_type_ids, kwargs))
        return TokenClassifierOutput(logits=out["logits"])


class ORTModelForQuestionAnswering(ORTModel):
    task = ("question-answering",)

    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs: Any
    ) -> QuestionAnsweringModelOutput:
        out = self.run(self._encoder_feeds(input_ids, attention_mask, token_type_ids, kwargs))
        return QuestionAnsweringModelOutput(start_logits=out["start_logits"], end_logits=out["end_logits"])


class ORTModelForMaskedLM(ORTModel):
    task = ("fill-mask",)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs: Any) -> MaskedLMOutput:
        out = self.run(self._encoder_feeds(input_ids, attention_mask, token_type_ids, kwargs))
        return MaskedLMOutput(logits=out["logits"])


class OrtCache(Cache):
    """The key/value states a with-past graph returned (``present.N.key/value``), fed back as its past."""

    def __init__(self, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        super().__init__()
        for keys, values in layers:
            self._keys.append(keys)
            self._values.append(values)
            self._lengths.append(keys.shape[2])

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, cache_kwargs: Any = None) -> Any:
        raise GenerationError("an ONNX Runtime cache is written by the graph, not updated from Python")


class ORTModelForCausalLM(ORTModel, GenerationMixin):
    """A causal LM graph (``text-generation-with-past`` or ``text-generation``) with ``generate``."""

    task = ("text-generation-with-past", "text-generation")
    _can_generate = True

    def __init__(self, session: Any, config: Any, folder: Path, export_info: dict[str, Any]) -> None:
        super().__init__(session, config, folder, export_info)
        self.past_names = [name for name in self.input_names if name.startswith("past_key_values.")]
        self.use_past = bool(self.past_names)
        self.num_layers = len(self.past_names) // 2
        shapes = {i.name: i.shape for i in session.get_inputs()}
        # (kv_heads, head_dim) of each layer: fixed axes of the graph's past inputs
        self._past_dims = [tuple(shapes[f"past_key_values.{i}.key"][j] for j in (1, 3)) for i in range(self.num_layers)]
        path = folder / "generation_config.json"
        self.generation_config = (
            GenerationConfig.from_pretrained(str(folder))
            if path.is_file()
            else GenerationConfig.from_model_config(config)
        )
        if not self.use_past:
            self.generation_config.use_cache = False

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        unused = {k: v for k, v in kwargs.items() if v is not None and v is not False and k != "logits_to_keep"}
        if unused:
            raise InputError(f"ORTModelForCausalLM.forward does not take {sorted(unused)}")
        if input_ids is None:
            raise InputError("ORTModelForCausalLM.forward needs input_ids (the graph has no inputs_embeds)")
        if input_ids.dim() == 1:
            input_ids = input_ids.unsqueeze(0)
        batch, length = input_ids.shape
        if not self.use_past and (past_key_values is not None or use_cache):
            raise GenerationError(
                f"the graph in {self.folder} was exported for text-generation, without a key/value cache; pass "
                "use_cache=False, or export with --task text-generation-with-past"
            )
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if attention_mask is None:
            attention_mask = torch.ones(batch, past + length, dtype=torch.long)
        if attention_mask.shape != (batch, past + length):
            raise InputError(
                f"attention_mask has shape {tuple(attention_mask.shape)}; it must cover the {past} cached and "
                f"{length} new tokens: ({batch}, {past + length})"
            )
        if position_ids is None:
            positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)
            position_ids = positions[:, past:]
        feeds = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids.expand(batch, -1),
        }
        if self.use_past:
            for i, (heads, head_dim) in enumerate(self._past_dims):
                if past_key_values is not None and past:
                    keys, values = past_key_values[i]
                else:
                    keys = values = torch.zeros(batch, heads, 0, head_dim, dtype=self.dtype)
                feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = keys, values
        out = self.run(feeds)
        cache = None
        if self.use_past:
            cache = OrtCache([(out[f"present.{i}.key"], out[f"present.{i}.value"]) for i in range(self.num_layers)])
        return CausalLMOutputWithPast(logits=out["logits"], past_key_values=cache if use_cache is not False else None)


class _Session:
    """One graph file's ONNX Runtime session with named torch tensors in and out."""

    def __init__(self, session: Any, path: Path) -> None:
        self.session = session
        self.path = path
        self.input_names = tuple(i.name for i in session.get_inputs())
        self.output_names = tuple(o.name for o in session.get_outputs())
        self.input_types = {i.name: i.type for i in session.get_inputs()}
        self.input_shapes = {i.name: i.shape for i in session.get_inputs()}

    def run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        missing = [name for name in self.input_names if name not in feeds]
        if missing:
            raise InputError(f"the ONNX graph {self.path} needs the inputs {missing}")
        arrays = {}
        for name in self.input_names:
            tensor = feeds[name]
            want = _NUMPY_TYPES.get(self.input_types[name])
            if want is not None:
                tensor = tensor.to(want)
            arrays[name] = tensor.detach().cpu().contiguous().numpy()
        outputs = self.session.run(list(self.output_names), arrays)
        return {name: torch.from_numpy(value) for name, value in zip(self.output_names, outputs)}


class ORTEncoder:
    """The ``encoder_model.onnx`` session as ``get_encoder()`` hands it to ``generate``: the encoder's input (token ids
    and their mask, or Whisper's ``input_features``) in, ``BaseModelOutput`` out."""

    def __init__(self, parent: ORTModelForConditionalGeneration) -> None:
        self.parent = parent
        self.main_input_name = parent.main_input_name

    def __call__(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        input_features: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutput:
        asked = sorted(k for k, v in kwargs.items() if v is not None and v is not False)
        if asked:
            raise InputError(
                f"the ONNX encoder in {self.parent.folder} returns only last_hidden_state and takes "
                f"{self.main_input_name}{' and attention_mask' if self.main_input_name == 'input_ids' else ''}; it "
                f"cannot give {asked}"
            )
        session = self.parent.encoder_session
        if self.main_input_name == "input_features":
            if input_ids is not None:
                raise InputError(f"the ONNX encoder in {self.parent.folder} reads input_features, not input_ids")
            if input_features is None:
                raise InputError("the ONNX encoder needs input_features (the log-mel features of the audio)")
            # attention_mask (the feature extractor's) is not read: Whisper's encoder attends to every frame
            frames = session.input_shapes["input_features"][-1]
            if isinstance(frames, int) and input_features.shape[-1] != frames:
                raise InputError(
                    f"input_features has {input_features.shape[-1]} frames but the exported encoder takes exactly "
                    f"{frames}; pad or truncate the audio to 30 s (the feature extractor does by default)"
                )
            out = session.run({"input_features": input_features.to(self.parent.dtype)})
            return BaseModelOutput(last_hidden_state=out["last_hidden_state"])
        if input_features is not None:
            raise InputError(f"the ONNX encoder in {self.parent.folder} reads input_ids, not input_features")
        if input_ids is None:
            raise InputError("the ONNX encoder needs input_ids (the graph has no inputs_embeds)")
        if input_ids.dim() == 1:
            input_ids = input_ids.unsqueeze(0)
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        out = session.run({"input_ids": input_ids, "attention_mask": mask})
        return BaseModelOutput(last_hidden_state=out["last_hidden_state"])

    forward = __call__


class ORTModelForConditionalGeneration(_OnCpu, GenerationMixin):
    """The three graphs of an encoder-decoder export behind ``generate`` (what :class:`ORTModelForSeq2SeqLM` and
    :class:`ORTModelForSpeechSeq2Seq` share).

    ``encoder_model.onnx`` runs once per ``generate`` call (``get_encoder()``); ``decoder_model.onnx`` runs the
    first decoding step and returns both the decoder's and the cross-attention key/value states, then
    ``decoder_with_past_model.onnx`` runs each later step on its new token. The states travel as an
    ``EncoderDecoderCache`` of two :class:`OrtCache`, so greedy, sampling and beam search (which reorders the
    decoder's side) run unchanged.
    """

    task: ClassVar[tuple[str, ...]] = ()
    main_input_name = "input_ids"
    _can_generate = True

    def __init__(self, sessions: dict[str, _Session], config: Any, folder: Path, export_info: dict[str, Any]) -> None:
        self.encoder_session = sessions[ENCODER_FILE]
        self.decoder_session = sessions[DECODER_FILE]
        self.decoder_with_past_session = sessions.get(DECODER_WITH_PAST_FILE)
        self.config = config
        self.folder = folder
        self.export_info = export_info
        self.name_or_path = str(folder)
        self.num_layers = sum(1 for name in self.decoder_session.output_names if name.endswith(".decoder.key"))
        encoder_input = self.encoder_session.input_names[0]
        if encoder_input != self.main_input_name:
            raise OnnxExportError(
                f"{folder / ENCODER_FILE} reads {encoder_input}; {type(self).__name__} runs encoders of "
                f"{self.main_input_name}. Load it with "
                f"{'ORTModelForSpeechSeq2Seq' if encoder_input == 'input_features' else 'ORTModelForSeq2SeqLM'}"
            )
        self.encoder = ORTEncoder(self)
        path = folder / "generation_config.json"
        self.generation_config = (
            GenerationConfig.from_pretrained(str(folder))
            if path.is_file()
            else GenerationConfig.from_model_config(config)
        )
        if self.decoder_with_past_session is None:
            self.generation_config.use_cache = False

    @classmethod
    def from_pretrained(
        cls,
        folder: str | os.PathLike[str],
        *,
        providers: list[str] | None = None,
        session_options: Any = None,
        use_cache: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Load the three graphs of a folder ``microformers export onnx`` wrote for this class's task.

        ``use_cache=False`` skips ``decoder_with_past_model.onnx`` (every step reruns the decoder on the whole
        sequence). ``providers`` defaults to the CPU execution provider; ``session_options`` is an
        ``onnxruntime.SessionOptions``. Other keyword arguments are refused (none is read).
        """
        import onnxruntime

        if kwargs:
            raise InputError(
                f"{cls.__name__}.from_pretrained() got arguments it does not read: {sorted(kwargs)}; it takes "
                "providers=, session_options= and use_cache="
            )
        root = Path(folder)
        info_path = root / EXPORT_INFO_NAME
        info = json.loads(info_path.read_text()) if info_path.is_file() else {}
        if info.get("task") and info["task"] not in cls.task:
            raise OnnxExportError(
                f"{root} was exported for task {info['task']!r}; {cls.__name__} runs {' or '.join(cls.task)} graphs. "
                f"Export again with --task {cls.task[0]}, or load it with the class for its task"
            )
        files = (ENCODER_FILE, DECODER_FILE) + ((DECODER_WITH_PAST_FILE,) if use_cache else ())
        missing = [name for name in files if not (root / name).is_file()]
        if missing:
            raise FileMissingError(
                f"{root} lacks {', '.join(missing)}: export the model first (microformers export onnx MODEL {root} "
                f"--task {cls.task[0]})"
            )
        options = session_options
        if options is None:
            options = onnxruntime.SessionOptions()
            options.log_severity_level = 3
        sessions = {
            name: _Session(
                onnxruntime.InferenceSession(
                    str(root / name), options, providers=providers or ["CPUExecutionProvider"]
                ),
                root / name,
            )
            for name in files
        }
        config = AutoConfig.from_pretrained(str(root))
        return cls(sessions, config, root, info)

    def get_encoder(self) -> ORTEncoder:
        return self.encoder

    def __call__(self, *args: Any, **kwargs: Any) -> Seq2SeqLMOutput:
        return self.forward(*args, **kwargs)

    def _decode(
        self,
        encoder_inputs: dict[str, torch.Tensor | None],
        attention_mask: torch.Tensor | None,
        decoder_input_ids: torch.Tensor | None,
        decoder_attention_mask: torch.Tensor | None,
        encoder_outputs: Any,
        past_key_values: Any,
        use_cache: bool | None,
        kwargs: dict[str, Any],
    ) -> Seq2SeqLMOutput:
        unused = {k: v for k, v in kwargs.items() if v is not None and v is not False and k != "return_dict"}
        if unused:
            raise InputError(f"{type(self).__name__}.forward does not take {sorted(unused)}")
        if decoder_input_ids is None:
            raise InputError(f"{type(self).__name__}.forward needs decoder_input_ids (the decoder's tokens)")
        if decoder_attention_mask is not None and not bool(decoder_attention_mask.all()):
            raise InputError(
                "the exported decoder attends causally over every decoder token and takes no decoder_attention_mask; "
                "pass decoder tokens without padding (or none)"
            )
        if encoder_outputs is None:
            encoder_outputs = self.encoder(**encoder_inputs, attention_mask=attention_mask)
        hidden = encoder_outputs[0] if isinstance(encoder_outputs, (tuple, list)) else encoder_outputs.last_hidden_state
        batch = hidden.shape[0]
        encoder_mask = "encoder_attention_mask" in self.decoder_session.input_names
        if attention_mask is None or not encoder_mask:  # Whisper's decoder graphs take no mask: every frame is read
            attention_mask = torch.ones(batch, hidden.shape[1], dtype=torch.long)
        use_cache = self.generation_config.use_cache if use_cache is None else use_cache
        if use_cache and self.decoder_with_past_session is None:
            raise GenerationError(
                f"{self.folder} was loaded with use_cache=False (no decoder_with_past_model.onnx session); pass "
                "use_cache=False, or load it with use_cache=True"
            )
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        feeds = {"input_ids": decoder_input_ids, "encoder_attention_mask": attention_mask}
        if past and use_cache:
            for i in range(self.num_layers):
                self_keys, self_values, cross_keys, cross_values = past_key_values[i]
                feeds[f"past_key_values.{i}.decoder.key"], feeds[f"past_key_values.{i}.decoder.value"] = (
                    self_keys, self_values
                )  # fmt: skip
                feeds[f"past_key_values.{i}.encoder.key"] = cross_keys
                feeds[f"past_key_values.{i}.encoder.value"] = cross_values
            out = self.decoder_with_past_session.run(feeds)
            cross = past_key_values.cross_attention_cache
        else:
            feeds["encoder_hidden_states"] = hidden
            out = self.decoder_session.run(feeds)
            cross = OrtCache([
                (out[f"present.{i}.encoder.key"], out[f"present.{i}.encoder.value"]) for i in range(self.num_layers)
            ])  # fmt: skip
        cache = None
        if use_cache:
            own = OrtCache([
                (out[f"present.{i}.decoder.key"], out[f"present.{i}.decoder.value"]) for i in range(self.num_layers)
            ])  # fmt: skip
            cache = EncoderDecoderCache(own, cross)
        return Seq2SeqLMOutput(logits=out["logits"], past_key_values=cache, encoder_last_hidden_state=hidden)


class ORTModelForSeq2SeqLM(ORTModelForConditionalGeneration):
    """An encoder-decoder exported for ``text2text-generation`` (T5, BART, mBART, Marian) with ``generate``.

    ``pipeline("text2text-generation" | "summarization" | "translation", model=..., tokenizer=...)`` takes it.
    """

    task: ClassVar[tuple[str, ...]] = ("text2text-generation",)
    main_input_name = "input_ids"

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: Any = None,
        past_key_values: Any = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> Seq2SeqLMOutput:
        """One decoder call (the encoder too, unless ``encoder_outputs`` are given); ``past_key_values`` is the
        ``EncoderDecoderCache`` a previous call returned, and then ``decoder_input_ids`` are the new tokens only."""
        return self._decode(
            {"input_ids": input_ids}, attention_mask, decoder_input_ids, decoder_attention_mask, encoder_outputs,
            past_key_values, use_cache, kwargs,
        )  # fmt: skip


# PyTorch Whisper's generate() arguments for timestamps, long-form and fallback decoding, which the exported graphs'
# generate does not run (refused by name rather than ignored)
_WHISPER_PYTORCH_ONLY = (
    "return_token_timestamps", "return_segments", "condition_on_prev_tokens", "compression_ratio_threshold",
    "logprob_threshold", "no_speech_threshold", "prompt_ids", "prompt_condition_type", "force_unique_generate_call",
)  # fmt: skip


class ORTModelForSpeechSeq2Seq(ORTModelForConditionalGeneration):
    """A speech encoder-decoder exported for ``automatic-speech-recognition`` (Whisper) with ``generate``.

    ``encoder_model.onnx`` reads ``input_features`` (the feature extractor's log-mel frames; its ``attention_mask``
    is not read: Whisper's encoder attends to every frame, as the PyTorch model). ``generate`` builds Whisper's
    decoder prompt (``<|startoftranscript|>``, the language given as ``language="en"`` / ``"<|en|>"`` or detected
    from the first step's logits, ``task="transcribe" | "translate"``, ``<|notimestamps|>``) and decodes with
    microformers-generation (greedy, beam search, ``temperature=`` sampling); like the PyTorch model it returns
    the generated tokens without the prompt and final eos (the whole output with ``return_dict_in_generate=True``).
    Short-form only: one 30 s window per row, without timestamps (where the model emits timestamp tokens all the
    same, PyTorch Whisper goes on to later windows: a warning says so); ``pipeline("automatic-speech-recognition",
    model=..., tokenizer=..., feature_extractor=...)`` takes it (``chunk_length_s`` for longer audio).
    """

    task: ClassVar[tuple[str, ...]] = ("automatic-speech-recognition",)
    main_input_name = "input_features"

    def forward(
        self,
        input_features: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: Any = None,
        past_key_values: Any = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> Seq2SeqLMOutput:
        """One decoder call (the encoder too, unless ``encoder_outputs`` are given); ``past_key_values`` is the
        ``EncoderDecoderCache`` a previous call returned, and then ``decoder_input_ids`` are the new tokens only."""
        return self._decode(
            {"input_features": input_features}, attention_mask, decoder_input_ids, decoder_attention_mask,
            encoder_outputs, past_key_values, use_cache, kwargs,
        )  # fmt: skip

    def generate(
        self,
        input_features: torch.Tensor | None = None,
        generation_config: GenerationConfig | None = None,
        language: str | list[str] | None = None,
        task: str | None = None,
        return_timestamps: bool | None = None,
        temperature: float | None = None,
        is_multilingual: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """Transcribe (or translate) up to 30 s of audio per row; see the class docstring. ``is_multilingual``
        overrides ``generation_config.is_multilingual``, as in PyTorch Whisper."""
        if getattr(self.config, "model_type", None) != "whisper":  # another speech encoder-decoder: plain decoding
            if language is not None or task is not None or return_timestamps or is_multilingual is not None:
                raise GenerationError(
                    "language=, task=, return_timestamps= and is_multilingual= are Whisper's generate() arguments"
                )
            if temperature is not None:
                kwargs["temperature"] = temperature
            return super().generate(input_features, generation_config=generation_config, **kwargs)
        try:  # Whisper's prompt and result, as the PyTorch model's generate builds them
            from microformers_whisper import detect_language, generated_tokens_only, whisper_decoder_prompt
        except ImportError as exc:
            raise PluginError(
                f"{type(self).__name__}.generate on a Whisper model needs microformers-whisper ({exc}): "
                "pip install 'microformers-onnx[whisper]'"
            ) from exc
        refused = sorted(name for name in _WHISPER_PYTORCH_ONLY if kwargs.get(name) not in (None, False))
        if return_timestamps:
            refused.insert(0, "return_timestamps")
        if isinstance(temperature, (list, tuple)):
            refused.append("temperature=[...] (fallback temperatures)")
        if refused:
            raise GenerationError(
                f"{type(self).__name__}.generate runs short-form decoding without timestamps; {', '.join(refused)} "
                "need the PyTorch Whisper model (AutoModelForSpeechSeq2Seq)"
            )
        for name in _WHISPER_PYTORCH_ONLY:
            kwargs.pop(name, None)
        if kwargs.get("decoder_input_ids") is not None:
            raise GenerationError("Whisper's generate builds decoder_input_ids itself; pass language= / task= instead")
        kwargs.pop("decoder_input_ids", None)
        config = copy.deepcopy(generation_config if generation_config is not None else self.generation_config)
        if is_multilingual is not None:
            config.is_multilingual = is_multilingual
        encoder_outputs = kwargs.get("encoder_outputs")
        if input_features is None:
            input_features = kwargs.pop("inputs", None)
        if input_features is None and encoder_outputs is None:
            raise GenerationError("generate() needs input_features (from WhisperFeatureExtractor) or encoder_outputs")
        window = 2 * int(self.config.max_source_positions)
        if input_features is not None and input_features.shape[-1] > window:
            raise GenerationError(
                f"input_features has {input_features.shape[-1]} frames (over 30 s); the exported model decodes one "
                f"{window}-frame window per row: use the pipeline's chunk_length_s=30, or the PyTorch model for "
                "long-form decoding"
            )
        if encoder_outputs is None:  # encoded once, for language detection and decoding
            encoder_outputs = self.encoder(input_features=input_features)
            kwargs["encoder_outputs"] = encoder_outputs
        kwargs.pop("attention_mask", None)  # the feature extractor's frame mask: Whisper reads every frame
        hidden = encoder_outputs[0] if isinstance(encoder_outputs, (tuple, list)) else encoder_outputs.last_hidden_state
        prompt = whisper_decoder_prompt(  # the language detected (where needed) from one run of the decoder graph
            config,
            hidden.shape[0],
            language,
            task,
            False,
            lambda: detect_language(self, encoder_outputs=encoder_outputs, generation_config=config),
        )
        begin = prompt.shape[-1]
        for name in ("max_new_tokens", "max_length", "num_beams", "return_dict_in_generate"):
            if name in kwargs:
                setattr(config, name, kwargs.pop(name))
        kwargs.pop("do_sample", None)  # as PyTorch Whisper: sampling is asked for with temperature > 0
        max_positions = int(self.config.max_target_positions)
        if (config.max_new_tokens or 0) + begin > max_positions:
            raise GenerationError(
                f"the decoder prompt ({begin} tokens) plus max_new_tokens={config.max_new_tokens} exceeds "
                f"max_target_positions={max_positions}; lower max_new_tokens"
            )
        if config.max_new_tokens is None:  # as PyTorch Whisper: max_length grows by the prompt
            config.max_length = min((config.max_length or 20) + min(max_positions // 2 - 1, begin), max_positions)
        config.do_sample = temperature is not None and temperature > 0.0
        config.temperature = temperature if config.do_sample else 1.0
        if config.do_sample:
            config.num_beams = 1
        outputs = super().generate(generation_config=config, decoder_input_ids=prompt, **kwargs)
        sequences = outputs if isinstance(outputs, torch.Tensor) else outputs["sequences"]
        no_timestamps = getattr(config, "no_timestamps_token_id", None)
        if no_timestamps is not None and bool((sequences[:, begin:] > int(no_timestamps)).any()):
            logger.warning(
                "%s: the model generated timestamp tokens after <|notimestamps|>; PyTorch Whisper would decode "
                "later windows from the last timestamp pair, the exported graphs decode this one window only",
                type(self).__name__,
            )
        if not isinstance(outputs, torch.Tensor):
            return outputs
        return generated_tokens_only(outputs, begin, config)
