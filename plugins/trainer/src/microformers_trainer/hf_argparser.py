"""``HfArgumentParser``: command-line options (and JSON / YAML / dict configs) from dataclasses and attrs classes.

Each field becomes ``--name`` (and ``--na-me`` for a name with underscores). ``bool`` fields take an optional
value (``--flag``, ``--flag false``); a ``bool`` defaulting to ``True`` also gets ``--no_flag``. ``Literal`` and
``Enum`` fields take one of their values, ``list[X]`` fields one or more ``X``, ``Optional[X]`` is ``X``, a
union with ``str`` is ``str``, and a ``dict`` field a JSON object. A field without a default is required.
Field metadata ``help`` and ``aliases`` (see :func:`HfArg`) reach argparse.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import os
import sys
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal, Union

import attrs

from microformers import ConfigError, PluginError

_NO_DEFAULT = object()


def HfArg(
    *,
    aliases: str | list[str] | None = None,
    help: str | None = None,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    metadata: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """A ``dataclasses.field`` carrying argparse ``aliases`` and ``help`` in its metadata."""
    metadata = dict(metadata or {})
    if aliases is not None:
        metadata["aliases"] = aliases
    if help is not None:
        metadata["help"] = help
    return dataclasses.field(metadata=metadata, default=default, default_factory=default_factory, **kwargs)


@attrs.frozen
class _Field:
    """One ``__init__`` field of a dataclass or attrs class, with its resolved type and default."""

    name: str
    type: Any
    default: Any  # _NO_DEFAULT when the field is required
    metadata: dict[str, Any]


def _fields(cls: type) -> list[_Field]:
    try:
        hints = typing.get_type_hints(cls)
    except NameError as exc:
        raise ConfigError(
            f"HfArgumentParser: the type annotations of {cls.__name__} cannot be resolved ({exc}); declare the "
            "class at module level with importable annotation names"
        ) from exc
    out = []
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = _NO_DEFAULT
            out.append(_Field(f.name, hints.get(f.name, str), default, dict(f.metadata)))
    elif attrs.has(cls):
        for a in attrs.fields(cls):
            if not a.init:
                continue
            if isinstance(a.default, attrs.Factory):  # type: ignore[arg-type]
                default = a.default.factory()  # type: ignore[union-attr]
            elif a.default is attrs.NOTHING:
                default = _NO_DEFAULT
            else:
                default = a.default
            out.append(_Field(a.alias or a.name, hints.get(a.name, str), default, dict(a.metadata)))
    else:
        raise ConfigError(f"HfArgumentParser takes dataclasses (or attrs classes); got {cls!r}")
    return out


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("yes", "true", "t", "y", "1"):
        return True
    if text in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(f"truthy value expected: got {value!r} (use true/false, yes/no, 1/0)")


def _json_object(value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"a JSON object expected: {exc}") from exc
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"a JSON object expected, got {value!r}")
    return parsed


def _choice_type(choices: list[Any]) -> Callable[[str], Any]:
    by_text = {str(c): c for c in choices}
    return lambda text: by_text.get(text, text)


def _simplify(field: _Field) -> Any:
    """``Optional[X]`` -> X; a union containing ``str`` -> str (a value the class parses itself)."""
    kind = field.type
    origin = typing.get_origin(kind)
    if origin is Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        members = [m for m in typing.get_args(kind) if m is not type(None)]
        if len(members) == 1:
            return members[0]
        if str in members:
            return str
        raise ConfigError(
            f"HfArgumentParser: field {field.name!r} has the type {kind}; only Optional[X] or a union with str can "
            "be one command-line option"
        )
    return kind


class HfArgumentParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` with one option per field of each class in ``dataclass_types``."""

    def __init__(self, dataclass_types: type | Iterable[type] | None = None, **kwargs: Any) -> None:
        if dataclass_types is None:
            dataclass_types = []
        elif isinstance(dataclass_types, type):
            dataclass_types = [dataclass_types]
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(**kwargs)
        self.dataclass_types: list[type] = list(dataclass_types)
        self._field_names: dict[type, set[str]] = {}
        for cls in self.dataclass_types:
            group: Any = (
                self.add_argument_group(cls._argument_group_name) if hasattr(cls, "_argument_group_name") else self
            )
            fields = _fields(cls)
            self._field_names[cls] = {f.name for f in fields}
            for field in fields:
                self._add_field(group, field)

    @staticmethod
    def _add_field(parser: Any, field: _Field) -> None:
        options = [f"--{field.name}"]
        if "_" in field.name:
            options.append(f"--{field.name.replace('_', '-')}")
        kwargs = dict(field.metadata)
        aliases = kwargs.pop("aliases", [])
        aliases = [aliases] if isinstance(aliases, str) else list(aliases)
        kind = _simplify(field)
        origin = typing.get_origin(kind)
        required = field.default is _NO_DEFAULT
        if not required:
            kwargs["default"] = field.default
        if origin is Literal or (isinstance(kind, type) and issubclass(kind, enum.Enum)):
            choices = list(typing.get_args(kind)) if origin is Literal else [m.value for m in kind]
            kwargs.update(choices=choices, type=_choice_type(choices))
        elif kind is bool:
            help_kwargs = {k: v for k, v in kwargs.items() if k == "help"}
            kwargs.update(type=_to_bool, nargs="?", const=True)
            kwargs.setdefault("default", False)
            required = False
            parser.add_argument(*options, *aliases, **kwargs)
            if field.default is True:
                negated = [f"--no_{field.name}"]
                if "_" in field.name:
                    negated.append(f"--no-{field.name.replace('_', '-')}")
                parser.add_argument(*negated, action="store_false", dest=field.name, default=False, **help_kwargs)
            return
        elif origin is list or kind is list:
            args = typing.get_args(kind)
            kwargs.update(type=args[0] if args and args[0] is not Any else str, nargs="+")
        elif kind is dict or origin is dict:
            kwargs["type"] = _json_object
        elif kind is Any or not callable(kind):
            kwargs["type"] = str
        else:
            kwargs["type"] = kind
        if kind is str and bool in typing.get_args(field.type):  # ``bool | str``: a bare ``--fsdp`` means True
            kwargs.update(nargs="?", const=True)
        if required:
            kwargs["required"] = True
        parser.add_argument(*options, *aliases, dest=field.name, **kwargs)

    def _build(self, values: dict[str, Any]) -> tuple[list[Any], set[str]]:
        """Instances of every class from ``values``; also the keys no class took."""
        unused = set(values)
        outputs = []
        for cls in self.dataclass_types:
            names = self._field_names[cls]
            inputs = {k: v for k, v in values.items() if k in names}
            unused -= inputs.keys()
            outputs.append(cls(**inputs))
        return outputs, unused

    def parse_args_into_dataclasses(
        self,
        args: list[str] | None = None,
        return_remaining_strings: bool = False,
        look_for_args_file: bool = True,
        args_filename: str | os.PathLike[str] | None = None,
        args_file_flag: str | None = None,
    ) -> tuple[Any, ...]:
        """Parse ``args`` (default ``sys.argv[1:]``) into one instance per class, in order; options added to the
        parser by hand come back as an extra ``Namespace``. Options from files come first so the command line wins:
        ``<script>.args`` beside the running script (``look_for_args_file``), ``args_filename``, and the files
        given with ``args_file_flag`` (e.g. ``"--args_file"``, repeatable). Unknown options raise ``ConfigError``
        unless ``return_remaining_strings`` (then the remaining strings come last)."""
        if args_file_flag or args_filename or (look_for_args_file and sys.argv):
            files: list[Path] = []
            if args_filename:
                files.append(Path(args_filename))
            elif look_for_args_file and sys.argv:
                files.append(Path(sys.argv[0]).with_suffix(".args"))
            if args_file_flag:
                flag_parser = argparse.ArgumentParser(add_help=False)
                flag_parser.add_argument(args_file_flag, type=str, action="append")
                found, args = flag_parser.parse_known_args(args=args)
                files += [Path(p) for p in getattr(found, args_file_flag.lstrip("-").replace("-", "_")) or []]
            from_files = [part for f in files if f.is_file() for part in f.read_text(encoding="utf-8").split()]
            args = from_files + (list(args) if args is not None else sys.argv[1:])
        namespace, remaining = self.parse_known_args(args=args)
        values = vars(namespace)
        outputs, _ = self._build(values)
        taken = set().union(*self._field_names.values()) if self._field_names else set()
        extra = {k: v for k, v in values.items() if k not in taken}
        if extra:
            outputs.append(argparse.Namespace(**extra))
        if return_remaining_strings:
            return (*outputs, remaining)
        if remaining:
            raise ConfigError(f"Some specified arguments are not used by the HfArgumentParser: {remaining}")
        return tuple(outputs)

    def parse_dict(self, args: dict[str, Any], allow_extra_keys: bool = False) -> tuple[Any, ...]:
        """One instance per class from a dict of field values (no argparse); unknown keys raise ``ConfigError``
        unless ``allow_extra_keys``."""
        if not isinstance(args, dict):
            raise ConfigError(f"HfArgumentParser.parse_dict needs a dict of field values; got {type(args).__name__}")
        outputs, unused = self._build(args)
        if unused and not allow_extra_keys:
            raise ConfigError(f"Some keys are not used by the HfArgumentParser: {sorted(unused)}")
        return tuple(outputs)

    def parse_json_file(self, json_file: str | os.PathLike[str], allow_extra_keys: bool = False) -> tuple[Any, ...]:
        """:meth:`parse_dict` of a JSON file's object."""
        path = Path(json_file)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a readable JSON file ({exc})") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: holds a JSON {type(data).__name__}, not an object of field values")
        return self.parse_dict(data, allow_extra_keys=allow_extra_keys)

    def parse_yaml_file(self, yaml_file: str | os.PathLike[str], allow_extra_keys: bool = False) -> tuple[Any, ...]:
        """:meth:`parse_dict` of a YAML file's mapping (needs PyYAML)."""
        try:
            import yaml
        except ImportError as exc:
            raise PluginError(
                "HfArgumentParser.parse_yaml_file needs PyYAML: pip install microformers-trainer[yaml]"
            ) from exc
        path = Path(yaml_file)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: not a readable YAML file ({exc})") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: holds a YAML {type(data).__name__}, not a mapping of field values")
        return self.parse_dict(data, allow_extra_keys=allow_extra_keys)
