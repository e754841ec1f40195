"""microformers: the Transformers API on a plugin microkernel.

Importing this package is cheap: torch, tokenizers and plugins load only when a name that needs
them is first used (module ``__getattr__`` below).
"""

from __future__ import annotations

from . import logging
from ._version import KERNEL_API_VERSION, __version__
from .errors import (
    CheckpointError,
    ConfigError,
    DeviceError,
    FileMissingError,
    GenerationError,
    InputError,
    MicroformersError,
    PluginConflictWarning,
    PluginError,
    RemoteCodeError,
    ShapeMismatchError,
    UnknownModelTypeError,
)
from .lazy import lazy_exports
from .plugins import hookimpl, prefer, registry

_LAZY: dict[str, str] = {
    "PretrainedConfig": "configuration",
    "PreTrainedConfig": "configuration",
    "PreTrainedModel": "modeling",
    "ModelOutput": "outputs",
    "AutoConfig": "auto",
    "AutoModel": "auto",
    "AutoModelForCausalLM": "auto",
    "AutoModelForMaskedLM": "auto",
    "AutoModelForSequenceClassification": "auto",
    "AutoModelForTokenClassification": "auto",
    "AutoModelForQuestionAnswering": "auto",
    "AutoModelForMultipleChoice": "auto",
    "AutoModelForNextSentencePrediction": "auto",
    "AutoModelForPreTraining": "auto",
    "AutoModelForCTC": "auto",
    "AutoModelForSeq2SeqLM": "auto",
    "AutoModelForSpeechSeq2Seq": "auto",
    "AutoModelForTextEncoding": "auto",
    "AutoModelForAudioClassification": "auto",
    "AutoModelForImageClassification": "auto",
    "AutoFeatureExtractor": "auto",
    "AutoImageProcessor": "auto",
    "auto_class": "auto",
    "AutoTokenizer": "auto",
    "AutoProcessor": "auto",
    "GenerationConfig": "generation",
    "GenerationMixin": "generation",
    "pipeline": "pipelines",
    "PIPELINE_REGISTRY": "pipelines",
    "set_seed": "utils",
}

__all__ = [
    "KERNEL_API_VERSION",
    "CheckpointError",
    "ConfigError",
    "DeviceError",
    "FileMissingError",
    "GenerationError",
    "InputError",
    "MicroformersError",
    "PluginConflictWarning",
    "PluginError",
    "RemoteCodeError",
    "ShapeMismatchError",
    "UnknownModelTypeError",
    "__version__",
    "hookimpl",
    "logging",
    "prefer",
    "registry",
    *_LAZY,
]


logging.get_logger()  # the library logger gets its handler and MICROFORMERS_VERBOSITY level now
_kernel_getattr, __dir__ = lazy_exports(__name__, _LAZY)


def __getattr__(name: str) -> object:
    """Kernel names first, then names plugins contribute through ``register_exports``, then the model classes the
    installed plugins register (``from microformers import BertModel``, as from the reference)."""
    if name in _LAZY or name.startswith("__"):
        return _kernel_getattr(name)
    reg = registry.get("exports", name) or registry.get("architectures", name)
    if reg is None:
        if registry.provider_of("exports", name) is not None:
            raise registry.missing_error("exports", name, what="name")
        raise AttributeError(f"module 'microformers' has no attribute {name!r}")
    value = reg.load()
    globals()[name] = value
    return value
