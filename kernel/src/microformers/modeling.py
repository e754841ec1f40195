"""``PreTrainedModel``: the base class of every model a plugin provides.

Loading builds the model with its parameters on the meta device (no memory, no random init) and
then materialises each parameter straight from the (memory-mapped) checkpoint tensor, cast once to
the requested dtype. Saving writes config and weights into a staging folder and moves them into place.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .configuration import (
    PretrainedConfig,
    config_from_dict,
    dtype_name,
    read_json,
    refuse_push_to_hub,
)
from .devices import check_device, check_device_map, device_map_entries
from .errors import CheckpointError, ConfigError, ShapeMismatchError
from .generation import GenerationMixin
from .hub import resolve_file, split_hub_kwargs, staged_folder
from .logging import ProgressLine
from .model_helpers import (
    disable_input_require_grads,
    enable_input_require_grads,
    init_weights,
    place_modules,
    resize_token_embeddings,
)
from .module_utils import ModuleUtilsMixin
from .offload import offload_request
from .plugins import registry
from .protocols import AdapterManager, CheckpointFormat, Quantizer, QuantizerFactory
from .remote import RegisterForAutoClass, write_custom_code
from .weights import open_checkpoint, save_format

logger = logging.getLogger("microformers")

_LOCAL = threading.local()
_META_FACTORIES = frozenset({torch.empty, torch.empty_like, torch.empty_strided, torch.rand, torch.randn})
# In-place tensor methods that keep the shape (used by initialisers): no-ops on meta tensors.
_FILLS = frozenset("normal_ uniform_ fill_ zero_ copy_ clamp_ mul_ div_ add_ sub_ erfinv_ exponential_".split())


class _MetaConstruction(TorchFunctionMode):
    """Uninitialised and random tensors are created on the meta device; ``nn.init`` leaves meta tensors alone.

    A torch function mode is thread-local: other threads keep building real modules meanwhile.
    """

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _META_FACTORIES:
            kwargs["device"] = "meta"
        else:
            target = args[0] if args else kwargs.get("tensor")
            init = getattr(func, "__module__", None) == "torch.nn.init" or getattr(func, "__name__", "") in _FILLS
            if init and isinstance(target, torch.Tensor) and target.is_meta:
                return target  # initialising meta tensors: nothing to do (and it would import torch._dynamo)
        return func(*args, **kwargs)


@contextlib.contextmanager
def meta_parameters(intercept: bool = True) -> Iterator[None]:
    """Within this block (in this thread), models are built with every parameter on the meta device.

    Parameters made by ``torch.empty`` (every torch layer) never get memory; the few made from values
    (``torch.ones`` in a norm: one row, bounded by ``check_declared_sizes``) are moved to meta by
    ``post_init``. Tensors built from values (buffers, rotary frequencies) stay real.
    """
    previous = constructing_on_meta()
    _LOCAL.meta = True
    try:
        with _MetaConstruction() if intercept else contextlib.nullcontext():
            yield
    finally:
        _LOCAL.meta = previous


def build_on_meta(cls: type[nn.Module], *args: Any) -> Any:
    """``cls(*args)`` with its parameters on meta; built again with real factories if a buffer (or a tensor
    attribute) came out on meta too, i.e. was made with ``torch.empty``/``rand*``, whose values it needs."""
    with meta_parameters():
        model = cls(*args)
    if any(_meta_state(module) for module in model.modules()):
        with meta_parameters(intercept=False):
            model = cls(*args)
    return model


def _meta_state(module: nn.Module) -> bool:
    values = [*module._buffers.values(), *(v for k, v in vars(module).items() if not k.startswith("_parameters"))]
    values += [x for v in values if isinstance(v, (dict, list, tuple)) for x in (v.values() if isinstance(v, dict) else v)]
    return any(isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter) and v.is_meta for v in values)


def constructing_on_meta() -> bool:
    return getattr(_LOCAL, "meta", False)


_LAYER_FIELDS = ("num_hidden_layers", "num_layers", "n_layer")
_DIM_FIELDS = ("hidden_size", "intermediate_size", "vocab_size", "head_dim", "num_attention_heads", "num_key_value_heads")
MAX_LAYERS = 4096


def config_source(fmt: CheckpointFormat, files: list[Path]) -> Path:
    """The file a checkpoint's configuration was read from: the weights file itself (GGUF) or config.json."""
    return files[0] if hasattr(fmt, "load_config") else files[0].parent / "config.json"


def check_declared_sizes(
    config: PretrainedConfig,
    fmt: CheckpointFormat,
    files: list[Path],
    strict: bool = True,
    unbuilt: tuple[str, ...] = (),
) -> None:
    """Refuse, before building anything, sizes in a config that the checkpoint's tensors cannot back.

    A dimension larger than every tensor dimension, or more layers than the tensors have layer indices,
    would build a model the weights cannot fill (or exhaust memory building it). ``unbuilt`` names sizes
    the model class never allocates (an audio classifier's ``vocab_size``); they are only type-checked.
    """
    shapes = fmt.shapes(files) if hasattr(fmt, "shapes") else {}
    source = config_source(fmt, files)
    largest = max((dim for shape in shapes.values() for dim in shape), default=None)
    indices = {int(i) for name in shapes for i in re.findall(r"\.(\d+)(?=\.)", name)}
    for field in _LAYER_FIELDS + _DIM_FIELDS:
        value = getattr(config, field, None)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{field}={value!r} in {source} must be a non-negative integer; fix the file")
        if field in _LAYER_FIELDS:  # a few missing layers get the precise missing-tensor error later
            present = max(indices, default=-1) + 1
            limit = min(present + 64, MAX_LAYERS) if strict and shapes else MAX_LAYERS
            what = f"its tensors have layer indices up to {present - 1}" if limit < MAX_LAYERS else f"at most {limit}"
        else:
            limit, what = largest, f"the largest tensor dimension in the checkpoint is {largest}"
        if limit is not None and value > limit and field not in unbuilt:
            raise ConfigError(
                f"{field}={value} in {source} does not match the weights: {what}. The configuration is corrupt "
                "or belongs to another checkpoint; fix the value or use the matching files."
            )


def to_torch_dtype(dtype: Any) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    name = dtype_name(dtype)
    value = getattr(torch, name or "", None)
    if not isinstance(value, torch.dtype):
        raise ConfigError(f"dtype={dtype!r} is not a torch dtype; use e.g. 'float32', 'bfloat16' or 'auto'")
    return value


class PreTrainedModel(nn.Module, GenerationMixin, RegisterForAutoClass, ModuleUtilsMixin):
    """Base class for models; see hookspecs and docs/plugin-authoring.md for what subclasses set."""

    # config sizes (e.g. "vocab_size") the class never builds anything from: loading does not hold them
    # against the checkpoint's tensor shapes
    _config_sizes_not_built: ClassVar[tuple[str, ...]] = ()

    config_class: ClassVar[type[PretrainedConfig] | None] = None
    base_model_prefix: ClassVar[str] = ""
    main_input_name: ClassVar[str] = "input_ids"
    # target parameter name -> source parameter name, tied when config.tie_word_embeddings is true
    _tied_weights_keys: ClassVar[dict[str, str]] = {}
    _no_split_modules: ClassVar[list[str]] = []
    # regex patterns of checkpoint keys that are fine to be missing / unexpected
    _keys_to_ignore_on_load_missing: ClassVar[list[str]] = []
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = []
    supports_gradient_checkpointing: ClassVar[bool] = False

    def __init__(self, config: PretrainedConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        if not isinstance(config, PretrainedConfig):
            raise ConfigError(
                f"{type(self).__name__}(config) needs a PretrainedConfig, got {type(config).__name__}; "
                f"build one with {self.config_class.__name__ if self.config_class else 'AutoConfig'}(...)"
            )
        self.config = config
        self.name_or_path = config.name_or_path

    # -- construction ------------------------------------------------------------------------------
    def post_init(self) -> None:
        """Call at the end of ``__init__``: initialises weights (skipped while loading) and ties them."""
        if constructing_on_meta():
            for module in self.modules():
                for name, param in module._parameters.items():
                    if param is not None and not param.is_meta:
                        module._parameters[name] = type(param)(param.to("meta"), requires_grad=param.requires_grad)
        else:
            self.apply(self._init_weights)
        self.tie_weights()

    def _init_weights(self, module: nn.Module) -> None:
        """Initialise one module's fresh parameters (called for every module by ``post_init``, and for the modules of
        weights a checkpoint lacks): the reference's defaults (``model_helpers.init_weights``). Models with other
        initialisers override it."""
        init_weights(self, module)

    def tie_weights(self) -> None:
        if not getattr(self.config, "tie_word_embeddings", False):
            return
        for target, source in self._tied_weights_keys.items():
            owner_name, _, param_name = target.rpartition(".")
            try:
                source_param = self.get_parameter(source)
                owner = self.get_submodule(owner_name)
            except AttributeError:
                continue
            if getattr(self.config, "torchscript", False):  # TorchScript mode: a copy, as the reference clones
                source_param = nn.Parameter(source_param.detach().clone(), requires_grad=source_param.requires_grad)
            setattr(owner, param_name, source_param)

    def tied_parameter_names(self) -> set[str]:
        if not getattr(self.config, "tie_word_embeddings", False):
            return set()
        return set(self._tied_weights_keys)

    # -- conveniences users know ------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        for param in self.parameters():
            if param.is_meta and "_offload_main_device" in self.__dict__:  # on disk (offload.py): where it runs
                return self.__dict__["_offload_main_device"]
            return param.device
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        for param in self.parameters():
            if param.is_floating_point():
                return param.dtype
        return torch.get_default_dtype()

    @property
    def base_model(self) -> nn.Module:
        return getattr(self, self.base_model_prefix, self)

    def get_input_embeddings(self) -> nn.Module:
        base = self.base_model
        if base is not self:
            return base.get_input_embeddings()
        raise NotImplementedError(f"{type(self).__name__} does not define get_input_embeddings()")

    def get_output_embeddings(self) -> nn.Module | None:
        return None

    def num_parameters(self, only_trainable: bool = False, exclude_embeddings: bool = False) -> int:
        skip = {id(m.weight) for m in self.modules() if isinstance(m, nn.Embedding)} if exclude_embeddings else set()
        return sum(p.numel() for p in self.parameters() if (p.requires_grad or not only_trainable) and id(p) not in skip)

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Module:
        """Give the input embeddings (and an untied output head) ``new_num_tokens`` rows, rounded up to
        ``pad_to_multiple_of``; new rows around the old rows' mean (``mean_resizing``); tied heads follow and
        ``config.vocab_size`` is updated. Returns the new input embeddings."""
        return resize_token_embeddings(self, new_num_tokens, pad_to_multiple_of, mean_resizing)

    def enable_input_require_grads(self) -> None:
        """Make the input embeddings' output require grad (adapters on a frozen model with checkpointing)."""
        enable_input_require_grads(self)

    def disable_input_require_grads(self) -> None:
        """Undo ``enable_input_require_grads``."""
        disable_input_require_grads(self)

    def push_to_hub(self, *args: Any, **kwargs: Any) -> None:
        refuse_push_to_hub(True)

    # -- gradient checkpointing: base models run each layer through ``self._call_layer`` ----------
    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict[str, Any] | None = None) -> None:
        """Recompute layer activations during backward while training (less memory, same gradients)."""
        if not self.supports_gradient_checkpointing:
            raise ConfigError(f"{type(self).__name__} does not support gradient checkpointing")
        from torch.utils.checkpoint import checkpoint

        options = {"use_reentrant": False, **(gradient_checkpointing_kwargs or {})}
        for module in self.modules():
            if isinstance(module, PreTrainedModel):
                module._checkpoint_fn = lambda fn, *a, **kw: checkpoint(fn, *a, **options, **kw)

    def gradient_checkpointing_disable(self) -> None:
        for module in self.modules():
            module.__dict__.pop("_checkpoint_fn", None)

    @property
    def is_gradient_checkpointing(self) -> bool:
        return "_checkpoint_fn" in self.__dict__

    def _call_layer(self, layer: nn.Module, *args: Any) -> Any:
        run = self.__dict__.get("_checkpoint_fn")
        if run is None or not self.training:
            return layer(*args)
        # a KV cache is not built while recomputing: layers get None in its place
        return run(layer.__call__, *(None if hasattr(a, "get_seq_length") else a for a in args))

    # -- adapters: the reference's API, each call handed to the adapter plugin registered for the
    # adapter's peft_type (hookspecs.register_adapters), which keeps one manager per model -----------
    def _adapters(self, adapter_config: Any = None, source: Any = None) -> AdapterManager:
        manager = self.__dict__.get("_adapter_manager")
        if manager is None and adapter_config is not None:
            if isinstance(adapter_config, Mapping):
                peft_type = adapter_config.get("peft_type")
            else:
                peft_type = getattr(adapter_config, "peft_type", None)
            peft_type = getattr(peft_type, "value", peft_type)
            where = str(source) if source is not None else "the adapter config"
            if not isinstance(peft_type, str):
                raise ConfigError(
                    f"{where}: 'peft_type' is {peft_type!r:.80}; it must name the adapter type, e.g. \"LORA\""
                )
            what = "adapter type (peft_type)" if source is None else f"adapter type (peft_type in {where})"
            cls = registry.require("adapters", peft_type, what=what)
            manager = self.__dict__["_adapter_manager"] = cls(self)
        if manager is None:
            if not registry.names("adapters"):
                raise registry.missing_error("adapters", "LORA", what="adapter type (peft_type)")
            raise ConfigError("No adapter loaded: add one with add_adapter(config) or load_adapter(path) first")
        return manager

    def add_adapter(self, adapter_config: Any, adapter_name: str | None = None) -> None:
        """Add a fresh trainable adapter (e.g. ``LoraConfig(...)``) and make it the active one."""
        self._adapters(adapter_config).add_adapter(adapter_config, adapter_name)

    def load_adapter(self, peft_model_id: Any = None, adapter_name: str | None = None, **kwargs: Any) -> Any:
        """Load an adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``) onto this model."""
        config = kwargs.get("peft_config")
        if peft_model_id is not None and (
            not isinstance(peft_model_id, (str, os.PathLike)) or not str(os.fspath(peft_model_id)).strip()
        ):
            raise ConfigError(
                f"load_adapter(peft_model_id={peft_model_id!r}): pass the adapter's folder or Hub id as a string or "
                "path (or peft_config= with adapter_state_dict=)"
            )
        if config is None:
            if peft_model_id is None:
                raise ConfigError("load_adapter needs the adapter folder, or peft_config= and adapter_state_dict=")
            hub_kwargs = split_hub_kwargs({**(kwargs.get("adapter_kwargs") or {}), **kwargs})[0]
            path = resolve_file(peft_model_id, "adapter_config.json", **hub_kwargs)
            config = read_json(path, what="adapter configuration")
            return self._adapters(config, source=path).load_adapter(peft_model_id, adapter_name, **kwargs)
        return self._adapters(config).load_adapter(peft_model_id, adapter_name, **kwargs)

    def set_adapter(self, adapter_name: str | list[str]) -> None:
        """Run only the named adapter(s)."""
        self._adapters().set_adapter(adapter_name)

    def disable_adapters(self) -> None:
        """Run the base model alone until ``enable_adapters()``."""
        self._adapters().disable_adapters()

    def enable_adapters(self) -> None:
        self._adapters().enable_adapters()

    def active_adapters(self) -> list[str]:
        return self._adapters().active_adapters()

    def delete_adapter(self, adapter_names: str | list[str]) -> None:
        self._adapters().delete_adapter(adapter_names)

    def get_adapter_state_dict(self, adapter_name: str | None = None, state_dict: Any = None) -> dict[str, Any]:
        """The adapter's tensors under the ``peft`` names (the active adapter by default)."""
        return self._adapters().get_adapter_state_dict(adapter_name, state_dict)

    def merge_adapter(self, adapter_names: list[str] | None = None) -> None:
        self._adapters().merge_adapter(adapter_names)

    def unmerge_adapter(self) -> None:
        self._adapters().unmerge_adapter()

    def merge_and_unload(self, **kwargs: Any) -> PreTrainedModel:
        """Fold the adapters into the base weights and remove them; returns the plain model."""
        return self._adapters().merge_and_unload(**kwargs)

    def print_trainable_parameters(self) -> None:
        self._adapters().print_trainable_parameters()

    def get_memory_footprint(self, return_buffers: bool = True) -> int:
        """Bytes held by parameters (and buffers: quantized weights live there)."""
        tensors = [*self.parameters(), *(self.buffers() if return_buffers else ())]
        return sum(t.numel() * t.element_size() for t in tensors)

    @classmethod
    def from_config(cls, config: PretrainedConfig, **kwargs: Any) -> PreTrainedModel:
        dtype = to_torch_dtype(kwargs.pop("dtype", kwargs.pop("torch_dtype", None)))
        if kwargs.get("attn_implementation"):
            config._attn_implementation = check_attention(kwargs.pop("attn_implementation"))
        kwargs.pop("attn_implementation", None)
        if kwargs:
            raise ConfigError(f"from_config() does not take {', '.join(sorted(kwargs))}; set such values on the config")
        model = cls(config)
        return model.to(dtype) if dtype is not None else model

    # -- loading ---------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path: str | os.PathLike[str],
        *model_args: Any,
        config: PretrainedConfig | str | None = None,
        dtype: Any = "auto",
        torch_dtype: Any = None,
        device: Any = None,
        device_map: Any = None,
        attn_implementation: str | None = None,
        ignore_mismatched_sizes: bool = False,
        output_loading_info: bool = False,
        strict: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Load a model folder, Hub repo or registered alias (see the module docstring for how weights are read).

        Big models (``microformers.offload``): ``device_map="auto"`` places whole modules on the GPUs, then the
        CPU, then disk, within ``max_memory`` (``{0: "2GiB", "cpu": "300MiB"}``; default: the free memory);
        modules placed on disk (there, or by a dict ``device_map`` value ``"disk"``) need ``offload_folder`` and
        have their weights read just in time for their forward, from the safetensors checkpoint itself or, for
        other formats or with ``offload_state_dict=True``, from copies written into ``offload_folder``.
        ``low_cpu_mem_usage``: loading always builds the model without memory and fills it tensor by tensor, which
        is what True asks for; False (the reference then builds a randomly initialised model first) gives the same
        model, and is refused with a ``device_map``, as in the reference.
        """
        if device is not None:
            check_device(device, "device")
        check_device_map(device_map)
        tensor_parallel = None
        if any(k in kwargs for k in ("tp_plan", "tp_size", "device_mesh")):
            from .tensor_parallel import tensor_parallel_request

            tp_args = [kwargs.pop(k, None) for k in ("tp_plan", "tp_size", "device_mesh")]
            tensor_parallel = tensor_parallel_request(*tp_args, device, device_map)
        checkpoint, kwargs = open_checkpoint(pretrained_model_name_or_path, kwargs)
        pretrained, hub_kwargs = checkpoint.source, checkpoint.hub_kwargs
        kwargs.pop("trust_remote_code", None)
        for framework in ("from_tf", "from_flax"):
            if kwargs.pop(framework, False):
                raise ConfigError(
                    f"{framework}=True: microformers reads PyTorch checkpoints (model.safetensors, pytorch_model.bin) "
                    "and GGUF files, not TensorFlow or Flax weights (the reference's v5 dropped them too). Convert the "
                    "checkpoint once with a transformers 4.x release (from_pretrained(..., "
                    f"{framework}=True).save_pretrained(folder)) and load that folder"
                )
        big_model = offload_request(kwargs, device_map, device)  # max_memory, offload_*, low_cpu_mem_usage
        quant_args = {k: kwargs.pop(k) for k in ("quantization_config", "load_in_8bit", "load_in_4bit") if k in kwargs}
        if torch_dtype is not None:
            dtype = torch_dtype
        folder, fmt_reg, files = checkpoint.resolve()
        fmt: CheckpointFormat = fmt_reg.load()

        if not isinstance(config, PretrainedConfig):
            config_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k not in ("state_dict",)}
            config = cls._load_config(config or folder, fmt, files, config_kwargs)
        if kwargs:  # with a config object nothing else can take them: refuse rather than drop them
            raise ConfigError(
                f"from_pretrained() does not use {', '.join(sorted(kwargs))}: neither a loading argument nor a "
                f"setting of {type(config).__name__}; check the spelling (settings of a config= object go on it)"
            )
        if attn_implementation is not None:
            config._attn_implementation = check_attention(attn_implementation)
        config.name_or_path = str(pretrained)

        target_dtype = cls._pick_dtype(dtype, config)
        check_declared_sizes(config, fmt, files, strict, cls._config_sizes_not_built)
        try:
            model = build_on_meta(cls, config, *model_args)
        except ConfigError as exc:  # the class refused a config value: say which file it came from
            raise ConfigError(f"{config_source(fmt, files)}: {exc}") from exc
        quantizer = _quantizer(config, **quant_args)
        source = quantizer.prepare(model, fmt, files, target_dtype) if quantizer else fmt.load(files, dtype=target_dtype)
        if big_model is not None:  # device_map="auto" / with "disk": placed under max_memory (offload.py)
            device_map = big_model.plan(model, target_dtype, quantized=quantizer is not None)
            source = source if quantizer else big_model.wrap(source, model, files, target_dtype)
        placement = tensor_placement(device, device_map)
        if tensor_parallel is not None:
            if quantizer is not None:
                raise ConfigError("tp_plan: tensor parallelism of a quantized model is not supported; drop one of them")
            if not strict or ignore_mismatched_sizes:
                raise ConfigError(
                    "tp_plan: tensor parallelism needs every weight from the checkpoint (strict=True, "
                    "ignore_mismatched_sizes=False); a weight initialised here would not be split across processes"
                )
            source, placement = tensor_parallel.shard(model, source), tensor_parallel.placement
        info = model._materialise(source, target_dtype, ignore_mismatched_sizes, strict, files, placement=placement)
        model.tie_weights()
        if quantizer is not None:
            quantizer.finish(model)
        model.eval()
        model._after_load(folder, hub_kwargs)
        if device is not None:
            model.to(device)
        if big_model is not None:  # moves modules, hooks those on disk, records model.hf_device_map
            big_model.dispatch(model)
        elif device_map is not None:  # places modules, records model.hf_device_map
            place_modules(model, device_map)
        return (model, info) if output_loading_info else model

    @classmethod
    def _load_config(cls, source: Any, fmt: CheckpointFormat, files: list[Path], overrides: dict[str, Any]) -> PretrainedConfig:
        if cls.config_class is None:
            raise ConfigError(f"{cls.__name__} has no config_class; pass config=... to from_pretrained")
        if hasattr(fmt, "load_config"):
            config_dict = fmt.load_config(files)
            return config_from_dict(cls.config_class, config_dict, files[0], overrides)
        return cls.config_class.from_pretrained(source, **overrides)

    @staticmethod
    def _pick_dtype(dtype: Any, config: PretrainedConfig) -> torch.dtype:
        if dtype == "auto":
            return to_torch_dtype(config.dtype) or torch.float32
        return to_torch_dtype(dtype) or torch.float32

    def _checkpoint_key_map(self, checkpoint_keys: set[str]) -> dict[str, str]:
        """Model parameter name -> checkpoint key, bridging a base-model prefix present on one side only."""
        own = self.state_dict(keep_vars=True).keys()
        prefix = self.base_model_prefix
        mapping: dict[str, str] = {}
        for name in own:
            if name in checkpoint_keys:
                mapping[name] = name
            elif prefix and name.startswith(prefix + ".") and name[len(prefix) + 1 :] in checkpoint_keys:
                mapping[name] = name[len(prefix) + 1 :]
            elif prefix and f"{prefix}.{name}" in checkpoint_keys:
                mapping[name] = f"{prefix}.{name}"
        return mapping

    def _materialise(
        self,
        source: Mapping[str, torch.Tensor],
        dtype: torch.dtype,
        ignore_mismatched_sizes: bool,
        strict: bool,
        files: list[Path],
        placement: Callable[[str], torch.device | None] | None = None,
    ) -> dict[str, list[Any]]:
        """Put the checkpoint's tensors into the meta-built model; ``placement`` (parameter name -> device,
        or None to leave it where the checkpoint put it) moves each tensor as it is read, so a model
        loaded onto an accelerator never exists whole on the CPU."""
        import re

        checkpoint_keys = set(source.keys())
        key_map = self._checkpoint_key_map(checkpoint_keys)
        tied = self.tied_parameter_names()
        where = files[0] if len(files) == 1 else files[0].parent
        file_of = getattr(source, "file_of", lambda _key: where)
        mismatched: list[tuple[str, tuple[int, ...], tuple[int, ...]]] = []
        missing: list[str] = []
        state = self.state_dict(keep_vars=True)
        filled: set[int] = set()
        progress = ProgressLine("Loading weights", len(state))
        try:
            for name, current in state.items():
                progress.update()
                if name in tied or id(current) in filled:
                    continue  # tied, or another path to a module already listed (one module shared by two owners)
                filled.add(id(current))
                key = key_map.get(name)
                if key is None:
                    missing.append(name)
                    continue
                tensor = source[key]
                target = placement(name) if placement is not None else None
                if target is not None and tensor.device != target:
                    tensor = tensor.to(target)
                if tuple(tensor.shape) != tuple(current.shape):
                    if not ignore_mismatched_sizes:
                        raise ShapeMismatchError(
                            f"tensor '{key}' in {file_of(key)} has shape "
                            f"{tuple(tensor.shape)}, but the model built from config.json expects {tuple(current.shape)} "
                            "for it. The config does not match the weights; fix config.json, or pass "
                            "ignore_mismatched_sizes=True to re-initialise this tensor."
                        )
                    mismatched.append((name, tuple(tensor.shape), tuple(current.shape)))
                    missing.append(name)
                    continue
                if current.is_floating_point() and not tensor.is_floating_point():
                    raise CheckpointError(
                        f"tensor '{key}' in {file_of(key)} is stored as "
                        f"{tensor.dtype}, but the model's '{name}' holds floating-point values; the checkpoint is "
                        "corrupt or was converted wrongly. Re-save it with floating-point weights."
                    )
                if tensor.is_floating_point() and current.is_floating_point():
                    tensor = tensor.to(dtype) if isinstance(current, nn.Parameter) else tensor.to(current.dtype)
                elif not current.is_floating_point() and tensor.dtype != current.dtype:
                    # The reference casts to the model's integer dtype; a cast that changes a value is refused instead.
                    cast = tensor.to(current.dtype)
                    if not torch.equal(cast, tensor):  # compares values, promoting both dtypes
                        raise CheckpointError(
                            f"tensor '{key}' in {file_of(key)} is stored as {tensor.dtype} with values that "
                            f"{current.dtype}, the dtype of the model's '{name}', cannot hold exactly; the checkpoint "
                            f"is corrupt or was converted wrongly. Re-save it with {current.dtype} values."
                        )
                    tensor = cast
                self._set_tensor(name, tensor)
        finally:  # the line ends even when a tensor is refused
            progress.close()

        ignore_missing = [re.compile(p) for p in self._keys_to_ignore_on_load_missing]
        reported = [m for m in missing if not any(p.search(m) for p in ignore_missing)]
        prefix = self.base_model_prefix
        base_missing = [
            m for m in reported if (not prefix or m.startswith(prefix + ".") or type(self) is self._base_class())
        ]
        mismatched_names = {m[0] for m in mismatched}
        hard_missing = [m for m in base_missing if m not in mismatched_names and self._is_persistent_param(m)]
        if hard_missing and strict:
            shown = ", ".join(hard_missing[:8]) + (
                f" and {len(hard_missing) - 8} more" if len(hard_missing) > 8 else ""
            )
            raise CheckpointError(
                f"checkpoint {where} is missing {len(hard_missing)} tensor(s) the model needs: {shown}. "
                "The checkpoint is incomplete or for a different architecture; pass strict=False to "
                "initialise them randomly instead."
            )
        self._initialise_missing(missing, dtype)
        used = set(key_map.values())
        ignore_unexpected = [re.compile(p) for p in self._keys_to_ignore_on_load_unexpected]
        unexpected = sorted(k for k in checkpoint_keys - used if not any(p.search(k) for p in ignore_unexpected))
        if unexpected:
            logger.warning("Unused weights in %s: %s", where, ", ".join(unexpected[:20]))
        if reported:
            logger.warning("Newly initialised weights (not in %s): %s", where, ", ".join(reported[:20]))
        return {"missing_keys": reported, "unexpected_keys": unexpected, "mismatched_keys": mismatched}

    def _base_class(self) -> type:
        base = getattr(self, self.base_model_prefix, None) if self.base_model_prefix else None
        return type(base) if isinstance(base, nn.Module) else type(self)

    def _is_persistent_param(self, name: str) -> bool:
        owner_name, _, attr = name.rpartition(".")
        owner = self.get_submodule(owner_name)
        return attr in owner._parameters or attr not in owner._non_persistent_buffers_set

    def _set_tensor(self, name: str, tensor: torch.Tensor) -> None:
        owner_name, _, attr = name.rpartition(".")
        owner = self.get_submodule(owner_name)
        if attr in owner._parameters:
            old = owner._parameters[attr]
            requires_grad = old.requires_grad if old is not None and tensor.is_floating_point() else False
            owner._parameters[attr] = nn.Parameter(tensor, requires_grad=requires_grad)
        else:
            owner._buffers[attr] = tensor

    def _initialise_missing(self, missing: list[str], dtype: torch.dtype) -> None:
        modules: dict[str, nn.Module] = {}
        for name in missing:
            owner_name, _, attr = name.rpartition(".")
            owner = self.get_submodule(owner_name)
            current = owner._parameters.get(attr)
            if current is not None and current.device.type == "meta":
                fresh = torch.empty(current.shape, dtype=dtype if current.is_floating_point() else current.dtype)
                owner._parameters[attr] = nn.Parameter(fresh, requires_grad=current.requires_grad)
                modules[owner_name] = owner
        for module in modules.values():
            self._init_weights(module)

    def _after_load(self, folder: Path, hub_kwargs: dict[str, Any]) -> None:
        """Extension point run after weights are in place (generation reads generation_config.json)."""
        self._load_generation_config(folder, hub_kwargs)

    # -- saving ----------------------------------------------------------------------------------
    def save_pretrained(
        self,
        save_directory: str | os.PathLike[str],
        state_dict: Mapping[str, torch.Tensor] | None = None,
        max_shard_size: int | str = "50GB",
        safe_serialization: bool = True,
        is_main_process: bool = True,
        **kwargs: Any,
    ) -> None:
        refuse_push_to_hub(kwargs.get("push_to_hub"))
        if getattr(self, "_device_mesh", None) is not None:  # tensor parallel: every rank gathers, rank 0 writes
            from .tensor_parallel import gathered_state

            state_dict, is_main_process = gathered_state(self, state_dict, is_main_process)
        if not is_main_process:
            return
        if self.__dict__.get("_adapter_manager") is not None:  # adapter files only, as the reference does
            return self._adapters().save_pretrained(
                save_directory, state_dict=state_dict, safe_serialization=safe_serialization, max_shard_size=max_shard_size,
                **kwargs,
            )
        unused = sorted(set(kwargs) - {"push_to_hub", "token"})  # token only uploads, as in the reference
        if unused:
            raise ConfigError(f"save_pretrained() does not take {', '.join(unused)}; drop it or check the spelling")
        target = Path(save_directory)
        if target.is_file():
            raise ConfigError(f"save_pretrained: {target} is a file; pass a folder")
        fmt, replaces = save_format(safe=safe_serialization)  # False: the legacy pickle format
        state = dict(state_dict if state_dict is not None else self.state_dict())
        for name in self.tied_parameter_names():
            state.pop(name, None)
        self.config.architectures = [type(self).__name__]
        self.config.dtype = dtype_name(self.dtype)
        with staged_folder(target, replace=replaces) as staging:
            fmt.save(state, staging, max_shard_size, {"format": "pt"})
            write_custom_code(self, self.config, staging)
            self.config.save_pretrained(staging)
            self._save_generation_config(staging)
            self._save_extra_files(staging)

    def _save_extra_files(self, folder: Path) -> None:
        """Extension point: write model-specific files into a save's staging folder (nothing by default)."""


def tensor_placement(device: Any, device_map: Any) -> Callable[[str], torch.device | None] | None:
    """Parameter name -> the device ``from_pretrained(device=..., device_map=...)`` will put it on (``device_map``
    wins, as it is applied last), or None when neither is given. A name takes its longest matching prefix."""
    wanted = device_map if device_map is not None else device
    if wanted is None:
        return None
    by_prefix = {  # a module on disk (offload.py) is left where the checkpoint reader put it
        prefix: None if value == "disk" else check_device(value, "device_map")
        for prefix, value in device_map_entries(wanted).items()
    }
    by_prefix = {prefix: value for prefix, value in by_prefix.items() if value is None or value.type != "meta"}
    ordered = sorted(by_prefix.items(), key=lambda item: len(item[0]), reverse=True)

    def device_of(name: str) -> torch.device | None:
        for prefix, value in ordered:
            if not prefix or name == prefix or name.startswith(prefix + "."):
                return value
        return None

    return device_of


def check_attention(name: str) -> str:
    """``name`` if a plugin registers it as an attention implementation, else the registry's error listing them."""
    if registry.get("attention", name) is None:
        raise registry.missing_error("attention", name, what="attention implementation (attn_implementation)")
    return name


def _quantizer(
    config: PretrainedConfig, quantization_config: Any = None, load_in_8bit: bool = False, load_in_4bit: bool = False
) -> Quantizer | None:
    """The quantizer a plugin registered for ``quantization_config`` (argument, else config.json), or None."""
    spec = quantization_config
    if load_in_8bit or load_in_4bit:
        if spec is not None or (load_in_8bit and load_in_4bit):
            raise ConfigError("pass one of quantization_config, load_in_8bit=True or load_in_4bit=True")
        spec = {"quant_method": "int8" if load_in_8bit else "int4"}
    source = "the quantization_config argument" if spec is not None else "config.json's quantization_config"
    spec = spec if spec is not None else getattr(config, "quantization_config", None)
    if spec is None:
        return None
    if isinstance(spec, Mapping):
        spec = dict(spec)
    elif callable(getattr(spec, "to_dict", None)):
        spec = spec.to_dict()
    else:
        raise ConfigError(
            f"{source} is a {type(spec).__name__} ({spec!r:.80}); it must be an object such as "
            '{"quant_method": "int8"} or a quantization config class (Int8Config(), GPTQConfig(...))'
        )
    if not spec.get("quant_method"):
        raise ConfigError(f"{source} {spec} has no 'quant_method' (e.g. 'int8', 'int4', 'gguf')")
    if not isinstance(spec["quant_method"], str):
        raise ConfigError(
            f"{source}: 'quant_method' is {spec['quant_method']!r:.80}, expected a method name such as 'int8', "
            "'int4' or 'gguf'"
        )
    factory: QuantizerFactory = registry.require("quantizers", spec["quant_method"], what="quantization method")
    quantizer = factory(spec)
    if load_in_8bit or load_in_4bit:
        flag = "load_in_8bit" if load_in_8bit else "load_in_4bit"
        logger.warning("%s=True: quantizing with '%s' (%s)", flag, quantizer.quant_method, quantizer.description)
    config.quantization_config = quantizer.to_dict()
    return quantizer
