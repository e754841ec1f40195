"""Model outputs: values readable as attributes, as dict keys, or by position.

Like the reference's ``ModelOutput``: fields left ``None`` are absent from ``keys()`` and from
positional access, so ``outputs[0]`` is the first field that was actually returned. The task outputs
(``BaseModelOutput``, ``CausalLMOutput`` ...) are in ``microformers_sdk.outputs``.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ModelOutput(dict):
    """Base class; subclasses declare their fields as annotations (all default to ``None``)."""

    _fields: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields: list[str] = []
        for klass in reversed(cls.__mro__):
            for name in getattr(klass, "__annotations__", {}):
                if not name.startswith("_") and name not in fields:
                    fields.append(name)
        cls._fields = tuple(fields)
        _register_pytree_node(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        if len(args) > len(self._fields):
            raise TypeError(f"{type(self).__name__} takes at most {len(self._fields)} positional values")
        values = dict(zip(self._fields, args))
        for key, value in kwargs.items():
            if key in values:
                raise TypeError(f"{type(self).__name__} got '{key}' twice")
            values[key] = value
        for name in self._fields:
            value = values.pop(name, None)
            if value is not None:
                super().__setitem__(name, value)
        for key, value in values.items():  # extra fields a plugin adds
            if value is not None:
                super().__setitem__(key, value)

    def __getattr__(self, name: str) -> Any:
        if name in self:
            return super().__getitem__(name)
        if name in self._fields:
            return None
        raise AttributeError(f"'{type(self).__name__}' has no field '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __setitem__(self, key: Any, value: Any) -> None:
        if value is None:
            self.pop(key, None)
        else:
            super().__setitem__(key, value)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return super().__getitem__(key)
        return self.to_tuple()[key]

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(self.values())

    def __reduce__(self) -> Any:
        return (type(self), (), None, None, iter(self.items()))



def _register_pytree_node(cls: type[ModelOutput]) -> None:
    """Make ``cls`` a pytree node, so ``torch.export`` / ``torch.compile`` see through it: its children are the values
    of the fields that are set, its context their names."""
    from torch.utils import _pytree

    def flatten(output: ModelOutput) -> tuple[list[Any], list[str]]:
        return list(output.values()), list(output.keys())

    def unflatten(values: Any, keys: Any) -> ModelOutput:
        return cls(**dict(zip(keys, values)))

    _pytree.register_pytree_node(cls, flatten, unflatten, serialized_type_name=f"{cls.__module__}.{cls.__qualname__}")
