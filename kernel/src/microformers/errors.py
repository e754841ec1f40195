"""Every error the kernel raises derives from :class:`MicroformersError`.

Messages name the file, setting or plugin involved and say what to do about it.
"""

from __future__ import annotations


class MicroformersError(Exception):
    """Base class of all microformers errors."""


class ConfigError(MicroformersError, ValueError):
    """A configuration file or setting is missing, malformed or inconsistent."""


class FileMissingError(MicroformersError, FileNotFoundError):
    """A file a model, tokenizer or config needs could not be found locally or on the Hub."""


class CheckpointError(MicroformersError, ValueError):
    """A checkpoint file is truncated, corrupted or does not match the model."""


class ShapeMismatchError(CheckpointError):
    """A tensor in a checkpoint has a different shape than the model parameter it loads into."""


class UnknownModelTypeError(MicroformersError, ValueError):
    """No installed plugin provides a ``model_type`` (or head, task, format ...)."""


class PluginError(MicroformersError, ImportError):
    """A plugin is missing, broken, or targets a different kernel API version."""


class RemoteCodeError(MicroformersError):
    """Code shipped with a model folder cannot or may not run."""


class InputError(MicroformersError, ValueError):
    """Arguments passed to a model, tokenizer or pipeline call do not fit together."""


class GenerationError(MicroformersError, ValueError):
    """Generation settings are contradictory or the inputs cannot be generated from."""


class PluginConflictWarning(UserWarning):
    """Two plugins registered the same name; the documented rule picked one."""


class DeviceError(ConfigError):
    """A requested device (``device=``, ``device_map=``, ``--device``) does not exist on this machine."""
