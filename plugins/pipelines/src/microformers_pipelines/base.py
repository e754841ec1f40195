"""The pipeline base classes: ``Pipeline`` and ``ChunkPipeline``, with batching and collation.

``Pipeline`` runs ``preprocess -> _forward -> postprocess`` over one input, a list, or an iterable
(streamed), batching model inputs ``batch_size`` at a time with padding. A ``ChunkPipeline`` may turn
one input into several model inputs (text windows, candidate labels) and gets them back together in
``postprocess``. Exported as ``microformers.Pipeline`` / ``microformers.ChunkPipeline``; any plugin's
tasks subclass them. The kernel's ``pipeline()`` finds a task and builds its class.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

from microformers.errors import ConfigError, InputError, MicroformersError

# Keys padded with 1 rather than 0 when batching (masks where 1 means "not a real token").
_PAD_WITH_ONE = frozenset({"special_tokens_mask", "p_mask"})


class Pipeline:
    """Base class of every task: subclasses implement the four steps below.

    ``_sanitize_parameters(**kwargs) -> (preprocess_params, forward_params, postprocess_params)`` sorts the
    keyword arguments given at construction or call time; ``preprocess(item, **p)`` returns the model inputs
    of one item (tensors with a batch dimension of 1, plus any other values, which are passed through);
    ``_forward(model_inputs, **p)`` runs the model on a padded batch; ``postprocess(model_outputs, **p)``
    turns the outputs of one item (batch dimension 1 again) into the user's result.
    """

    #: Whether the task needs a tokenizer (``pipeline()`` loads one from the model's folder).
    needs_tokenizer: bool = True
    #: Whether ``pipeline()`` must be given (or default to) a model; a task that builds its own sets False.
    needs_model: bool = True
    #: Padding side used when batching; ``None`` means the tokenizer's ``padding_side``.
    padding_side: str | None = None
    #: The reference's framework tag (``return_tensors=self.framework`` in tokenizer calls): always PyTorch.
    framework: str = "pt"

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        task: str = "",
        device: Any = None,
        dtype: Any = None,
        batch_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.task = task
        self.device = resolve_device(device, model)
        if isinstance(model, torch.nn.Module):
            if dtype is not None:
                from microformers.modeling import to_torch_dtype

                model.to(to_torch_dtype(dtype))
            if device is not None:
                model.to(self.device)
            model.eval()
        if self.needs_tokenizer and tokenizer is None:
            raise ConfigError(
                f"the '{task or type(self).__name__}' pipeline needs a tokenizer: pass tokenizer=... "
                "(a folder, Hub id or tokenizer object), or a model folder that contains tokenizer files"
            )
        self.batch_size = check_batch_size(batch_size)
        try:
            steps = self._sanitize_parameters(**kwargs)
        except TypeError as exc:  # a task's _sanitize_parameters with named options got another one
            raise ConfigError(
                f"the '{task or type(self).__name__}' pipeline does not take that argument: {exc}"
            ) from exc
        self._preprocess_params, self._forward_params, self._postprocess_params = steps

    def __repr__(self) -> str:
        return f"{type(self).__name__}(task={self.task!r}, model={type(self.model).__name__}, device={self.device})"

    # -- the four steps ----------------------------------------------------------------------------
    def _sanitize_parameters(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        if kwargs:
            raise ConfigError(f"the '{self.task}' pipeline does not take {', '.join(sorted(kwargs))}")
        return {}, {}, {}

    def preprocess(self, input_: Any, **preprocess_params: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement preprocess")

    def _forward(self, model_inputs: dict[str, Any], **forward_params: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement _forward")

    def postprocess(self, model_outputs: Any, **postprocess_params: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement postprocess")

    # -- running -----------------------------------------------------------------------------------
    def is_single_input(self, inputs: Any, preprocess_params: dict[str, Any]) -> bool:
        """Whether ``inputs`` is one item (default: anything but a list, tuple, iterator or torch Dataset)."""
        return not isinstance(inputs, (list, tuple)) and not _is_stream(inputs)

    def forward(self, model_inputs: Mapping[str, Any], **forward_params: Any) -> Any:
        """Run ``_forward`` on model inputs (as ``preprocess`` returns them) on the pipeline's device, without grad."""
        with torch.inference_mode():
            return self._forward(_to_device(dict(model_inputs), self.device), **forward_params)

    def save_pretrained(self, save_directory: str | Any, **kwargs: Any) -> None:
        """Save the model and the tokenizer into one folder (``pipeline(task, model=folder)`` loads both);
        ``safe_serialization`` and ``max_shard_size`` go to the model's ``save_pretrained``.

        A custom pipeline class (registered in-process with ``PIPELINE_REGISTRY.register_pipeline``, or loaded
        from such a folder) is saved as the reference saves it: its module and the modules it imports
        relatively are copied into the folder and ``config.json`` gets ``custom_pipelines``
        (``{task: {"impl": "module.Class", "pt": [Auto class names]}}``), so that
        ``pipeline(model=folder, trust_remote_code=True)`` builds it in another process.
        """
        from microformers.configuration import refuse_push_to_hub

        refuse_push_to_hub(kwargs.pop("push_to_hub", False))
        model_kwargs = {k: kwargs.pop(k) for k in ("safe_serialization", "max_shard_size") if k in kwargs}
        if kwargs:
            raise ConfigError(f"Pipeline.save_pretrained does not take {', '.join(sorted(kwargs))}")
        if not hasattr(self.model, "save_pretrained"):
            raise ConfigError(f"Pipeline.save_pretrained: the model ({type(self.model).__name__}) cannot be saved")
        custom = custom_pipelines(type(self), getattr(self.model, "config", None))
        if custom:
            save_pipeline_code(type(self), save_directory)
            self.model.config.custom_pipelines = custom
        self.model.save_pretrained(save_directory, **model_kwargs)
        if self.tokenizer is not None and hasattr(self.tokenizer, "save_pretrained"):
            self.tokenizer.save_pretrained(save_directory)

    def __call__(self, inputs: Any = None, *args: Any, batch_size: int | None = None, **kwargs: Any) -> Any:
        if args:
            raise ConfigError(
                f"the '{self.task}' pipeline takes its inputs as one argument (a single item, a list or an "
                f"iterable) and its options as keywords; got {len(args) + 1} positional arguments"
            )
        pre, fwd, post = self._sanitize_parameters(**kwargs)
        params = (
            {**self._preprocess_params, **pre},
            {**self._forward_params, **fwd},
            {**self._postprocess_params, **post},
        )
        size = check_batch_size(batch_size) if batch_size is not None else self.batch_size
        if isinstance(inputs, torch.utils.data.Dataset) and not isinstance(inputs, Iterable):
            inputs = map(inputs.__getitem__, range(len(inputs)))  # a map-style Dataset streams like the reference's
        if self.is_single_input(inputs, params[0]):
            return next(self._run([inputs], size, *params))
        if _is_stream(inputs):
            return self._run(inputs, size, *params)
        return list(self._run(list(inputs), size, *params))

    def run_single(self, item: Any, pre: dict[str, Any], fwd: dict[str, Any], post: dict[str, Any]) -> Any:
        return next(self._run([item], 1, pre, fwd, post))

    def _preprocess_item(self, item: Any, params: dict[str, Any]) -> list[Any]:
        return [self.preprocess(item, **params)]

    def _postprocess_item(self, outputs: list[Any], params: dict[str, Any]) -> Any:
        return self.postprocess(outputs[0], **params)

    def _run(
        self, items: Iterable[Any], batch_size: int, pre: dict[str, Any], fwd: dict[str, Any], post: dict[str, Any]
    ) -> Iterator[Any]:
        """Results in input order; ``batch_size`` items are preprocessed and run together."""
        iterator = iter(items)
        while group := list(itertools.islice(iterator, batch_size)):
            pieces: list[tuple[int, Any]] = []
            for index, item in enumerate(group):
                if item is None:
                    raise InputError(
                        f"the '{self.task or type(self).__name__}' pipeline got None as an input: pass the input "
                        "itself (the text, or what the task takes), a list of inputs or an iterable of them"
                    )
                pieces.extend((index, model_inputs) for model_inputs in self._preprocess_item(item, pre))
            outputs: list[list[Any]] = [[] for _ in group]
            for start in range(0, len(pieces), batch_size):
                chunk = pieces[start : start + batch_size]
                for (index, _), row in zip(chunk, self.forward_batch([p for _, p in chunk], fwd)):
                    outputs[index].append(row)
            for item_outputs in outputs:
                yield self._postprocess_item(item_outputs, post)

    def forward_batch(self, rows: list[Mapping[str, Any]], forward_params: dict[str, Any]) -> list[dict[str, Any]]:
        """Pad ``rows`` into one batch, run ``_forward`` and split its outputs back into rows."""
        batch = rows[0] if len(rows) == 1 else self.collate(rows)
        outputs = _to_device(_as_dict(self.forward(batch, **forward_params)), torch.device("cpu"))
        if len(rows) == 1:
            return [Outputs(outputs)]
        return [Outputs(_row(outputs, i, len(rows))) for i in range(len(rows))]

    def padding_value(self, key: str) -> Any:
        """What a batch is padded with under ``key`` (``input_ids`` takes the tokenizer's pad token)."""
        if key == "input_ids":
            pad_id = getattr(self.tokenizer, "pad_token_id", None)
            if pad_id is None:
                raise ConfigError(
                    "batching needs padding but the tokenizer has no pad token; set one "
                    "(tokenizer.pad_token = tokenizer.eos_token) or use batch_size=1"
                )
            return pad_id
        return 1 if key in _PAD_WITH_ONE else 0

    def collate(self, rows: list[Mapping[str, Any]]) -> dict[str, Any]:
        """Stack the rows' tensors along dimension 0, padding dimension 1; other values become lists."""
        keys = list(rows[0])
        if any(set(row) != set(keys) for row in rows):
            raise MicroformersError(f"{type(self).__name__}.preprocess returned different keys for different inputs")
        side = self.padding_side or getattr(self.tokenizer, "padding_side", None) or "right"
        batch: dict[str, Any] = {}
        for key in keys:
            values = [row[key] for row in rows]
            if not all(isinstance(v, torch.Tensor) for v in values):
                batch[key] = values
            elif values[0].dim() < 2 or len({v.shape[1] for v in values}) == 1:
                batch[key] = torch.cat(values, dim=0)
            else:
                batch[key] = _pad_cat(values, self.padding_value(key), side)
        return batch


class ChunkPipeline(Pipeline):
    """A pipeline whose ``preprocess`` yields several model inputs per item; ``postprocess`` gets their list."""

    def _preprocess_item(self, item: Any, params: dict[str, Any]) -> list[Any]:
        return list(self.preprocess(item, **params))

    def _postprocess_item(self, outputs: list[Any], params: dict[str, Any]) -> Any:
        return self.postprocess(outputs, **params)


class Outputs(dict):  # type: ignore[type-arg]
    """One input's model outputs for ``postprocess``: keys (``outputs["logits"]``) or attributes (``outputs.logits``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"model outputs have no '{name}'; they have {', '.join(self)}") from None

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(v for v in self.values() if v is not None)


class KeyDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``dataset[i][key]``: feed one column of a dataset to a pipeline (``pipe(KeyDataset(ds, "text"))``)."""

    def __init__(self, dataset: Any, key: str) -> None:
        self.dataset = dataset
        self.key = key

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> Any:
        return self.dataset[i][self.key]


class KeyPairDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``{"text": dataset[i][key1], "text_pair": dataset[i][key2]}`` for pair tasks."""

    def __init__(self, dataset: Any, key1: str, key2: str) -> None:
        self.dataset = dataset
        self.key1, self.key2 = key1, key2

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"text": self.dataset[i][self.key1], "text_pair": self.dataset[i][self.key2]}


# -- batching helpers ------------------------------------------------------------------------------
def _is_stream(inputs: Any) -> bool:
    return isinstance(inputs, Iterator) or (
        isinstance(inputs, Iterable) and not isinstance(inputs, (str, bytes, dict, list, tuple, torch.Tensor))
    )


def _pad_cat(values: list[torch.Tensor], pad: Any, side: str) -> torch.Tensor:
    width = max(v.shape[1] for v in values)
    out = values[0].new_full((sum(v.shape[0] for v in values), width, *values[0].shape[2:]), pad)
    row = 0
    for value in values:
        rows, length = value.shape[0], value.shape[1]
        if side == "left":
            out[row : row + rows, width - length :] = value
        else:
            out[row : row + rows, :length] = value
        row += rows
    return out


def _as_dict(outputs: Any) -> dict[str, Any]:
    if isinstance(outputs, Mapping):
        return dict(outputs.items())
    if isinstance(outputs, (tuple, list)):
        return {str(i): value for i, value in enumerate(outputs)}
    return {"output": outputs}


def _row(outputs: dict[str, Any], index: int, size: int) -> dict[str, Any]:
    def take(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == size:
            return value[index : index + 1]
        if isinstance(value, tuple) and value and all(isinstance(v, torch.Tensor) for v in value):
            return tuple(take(v) for v in value)
        if isinstance(value, list) and len(value) == size:
            return value[index]
        return value

    return {key: take(value) for key, value in outputs.items()}


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value if value.device == device else value.to(device)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_to_device(v, device) for v in value)
    return value


def check_batch_size(batch_size: Any) -> int:
    if batch_size is None:
        return 1
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size={batch_size!r}: pass a positive integer")
    return batch_size


def resolve_device(device: Any, model: Any = None) -> torch.device:
    """``None`` (the model's device), ``-1``/``"cpu"``, a CUDA index, ``"cuda:1"``, ``"mps"`` or a torch.device;
    a device this machine does not have is refused (``DeviceError``) before the model is moved."""
    if device is None:
        return getattr(model, "device", None) or torch.device("cpu")
    from microformers.devices import check_device

    return check_device(device, "device")


def custom_pipelines(cls: type, config: Any) -> dict[str, dict[str, Any]]:
    """The ``custom_pipelines`` entries of ``config.json`` for a pipeline class: its in-process registrations,
    and the entries of the model's config (a folder saved before) that name this class."""
    from microformers.plugins import IN_PROCESS, registry

    impl = f"{cls.__module__.rpartition('.')[2]}.{cls.__name__}"
    entries = {
        task: dict(info)
        for task, info in (getattr(config, "custom_pipelines", None) or {}).items()
        if isinstance(info, Mapping) and str(info.get("impl", "")).rpartition(".")[2] == cls.__name__
    }
    for reg in registry.all("pipelines"):
        if reg.plugin == IN_PROCESS and reg.ref is cls:
            info: dict[str, Any] = {"impl": impl, "pt": list(reg.meta.get("model_class") or ())}
            if reg.meta.get("default_model"):
                info["default"] = {"model": reg.meta["default_model"]}
            if reg.meta.get("type"):
                info["type"] = reg.meta["type"]
            entries[reg.name] = info
    return entries


def save_pipeline_code(cls: type, save_directory: str | Any) -> None:
    """Copy the module defining ``cls`` (and the modules it imports relatively) into ``save_directory``."""
    import inspect
    from pathlib import Path

    from microformers.hub import atomic_write_bytes
    from microformers.remote import collect_code_files

    own_module = (
        "put the pipeline class in a module of its own (e.g. my_pipeline.py) so its code can be saved and reloaded"
    )
    if cls.__module__ == "__main__":  # checked first: an interactive __main__ has no file at all
        raise ConfigError(f"Pipeline.save_pretrained: {cls.__name__} is defined in __main__; {own_module}")
    try:
        source = Path(inspect.getfile(cls))
    except (TypeError, OSError) as exc:
        raise ConfigError(
            f"Pipeline.save_pretrained: the code of {cls.__name__} has no file to save ({exc}); {own_module}"
        ) from exc
    if source.suffix != ".py":
        raise ConfigError(
            f"Pipeline.save_pretrained: {cls.__name__} is defined in {source.name} ({cls.__module__}); {own_module}"
        )
    folder = Path(save_directory)
    for name, path in collect_code_files(source.stem, source.parent, {}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(folder / name, path.read_bytes())
