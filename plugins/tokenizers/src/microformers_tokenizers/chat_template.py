"""Chat templates: Jinja rendering in a sandbox with the helpers Hub templates expect.

Templates come from model folders downloaded from the internet, so they are untrusted code. They run
in jinja2's ``ImmutableSandboxedEnvironment`` (no attribute access to ``__class__`` and other
internals, no mutation of lists and dicts passed in), and everything they can see is rebuilt from
plain JSON-like values first.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.utils
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from microformers.errors import ConfigError

_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class ChatTemplateError(ConfigError, TemplateError):
    """A chat template failed: it called ``raise_exception``, has a syntax error, or broke a sandbox rule."""

    def __init__(self, message: str) -> None:
        ConfigError.__init__(self, message)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ChatTemplateSecurityError(ChatTemplateError, SecurityError):
    """A chat template tried to reach Python internals and the sandbox refused."""


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    # Jinja's own tojson escapes HTML characters, which chat templates must not do.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _DictFactory:
    """``dict(...)`` for templates without handing them the real ``dict`` type."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _SafeNamespace(jinja2.utils.Namespace):
    """``namespace(...)`` that refuses underscore-prefixed names (a door to Python internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        self, rest = args[0], args[1:]
        values = dict(*rest, **kwargs)
        for name in values:
            _SafeNamespace._check(name)
        jinja2.utils.Namespace.__init__(self, values)

    def __setitem__(self, name: str, value: Any) -> None:
        _SafeNamespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(f"chat templates may not set the underscore-prefixed namespace attribute {name!r}")


class _GenerationTag(jinja2.ext.Extension):
    """Accept ``{% generation %}...{% endgeneration %}`` blocks (assistant-mask markers) and render their body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Callable[[], str]) -> str:
        return caller()


class _StrictSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, but reaching for an unsafe attribute fails at once.

    jinja2's sandbox answers ``obj.__class__`` with an undefined value that prints as an empty
    string; an escape attempt should stop the template with an error instead of rendering quietly.
    """

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__!r} object is unsafe")


@lru_cache(maxsize=32)
def compile_chat_template(source: str) -> jinja2.Template:
    """Compile a template in the sandbox with the helpers Hub chat templates use."""
    env = _StrictSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _DictFactory()
    env.globals["namespace"] = _SafeNamespace
    try:
        return env.from_string(source)
    except TemplateError as exc:
        raise ChatTemplateError(
            f"the chat template does not parse: {exc} (line {getattr(exc, 'lineno', '?')}). "
            "Fix the template in chat_template.jinja / tokenizer_config.json, or pass chat_template=..."
        ) from exc


def plain_data(value: Any) -> Any:
    """Rebuild ``value`` from JSON-like types so templates never touch arbitrary objects."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain_data(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain_data(v) for v in value)
    if hasattr(value, "item") and callable(value.item) and getattr(value, "shape", None) == ():
        return plain_data(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return plain_data(value.model_dump())
    return f"<{type(value).__name__}>"


def _alias_reasoning(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for message in chat:
        reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def _tool_schemas(tools: list[Any] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    schemas = []
    for tool in tools:
        if isinstance(tool, dict):
            schemas.append(tool)
        elif inspect.isfunction(tool) or inspect.ismethod(tool):
            schemas.append(function_schema(tool))
        else:
            raise ConfigError(
                f"apply_chat_template(tools=...): {tool!r} is neither a JSON schema dict nor a function; "
                "pass tools as JSON schemas or as functions with type hints."
            )
    return schemas


_JSON_TYPES: dict[Any, str] = {
    int: "integer",
    float: "number",
    str: "string",
    bool: "boolean",
    list: "array",
    dict: "object",
}


def function_schema(func: Callable[..., Any]) -> dict[str, Any]:
    """A minimal JSON schema for a typed function: name, first docstring paragraph, parameter types."""
    signature = inspect.signature(func)
    hints = getattr(func, "__annotations__", {})
    properties: dict[str, Any] = {}
    required = []
    for name, param in signature.parameters.items():
        hint = hints.get(name, param.annotation)
        properties[name] = {"type": _JSON_TYPES.get(hint, "string")}
        if param.default is inspect.Parameter.empty:
            required.append(name)
    doc = inspect.getdoc(func) or ""
    schema: dict[str, Any] = {
        "name": func.__name__,
        "description": doc.split("\n\n")[0].strip(),
        "parameters": {"type": "object", "properties": properties},
    }
    if required:
        schema["parameters"]["required"] = required
    return {"type": "function", "function": schema}


def render_chat_template(
    template: str,
    conversations: list[list[dict[str, Any]]],
    *,
    tools: list[Any] | None = None,
    documents: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    continue_final_message: bool | str = False,
    **template_kwargs: Any,
) -> list[str]:
    """Render each conversation with ``template``; returns one string per conversation."""
    if continue_final_message and add_generation_prompt:
        raise ConfigError(
            "apply_chat_template: continue_final_message and add_generation_prompt cannot both be set; use "
            "continue_final_message to extend the last message, add_generation_prompt to open a new assistant turn."
        )
    compiled = compile_chat_template(template)
    if documents is not None and not all(isinstance(d, dict) for d in documents):
        raise ConfigError("apply_chat_template(documents=...): documents must be dicts with 'title' and 'text' keys.")
    tool_schemas = plain_data(_tool_schemas(tools))
    documents = plain_data(documents)
    variables = plain_data(template_kwargs)
    rendered = []
    for chat in conversations:
        chat = getattr(chat, "messages", chat)
        chat = plain_data(chat)
        for message in chat:
            if not isinstance(message, dict):
                raise ConfigError(
                    f"apply_chat_template: each message must be a dict with 'role' and 'content'; got {message!r}."
                )
        chat = _alias_reasoning(chat)
        field = None
        final_text = ""
        if continue_final_message:
            field, final_text = _tag_final_message(chat, template, continue_final_message)
        try:
            text = compiled.render(
                messages=chat,
                tools=tool_schemas,
                documents=documents,
                add_generation_prompt=add_generation_prompt,
                **variables,
            )
        except SecurityError as exc:
            raise ChatTemplateSecurityError(
                f"the chat template was stopped by the sandbox: {exc}. Chat templates may not access Python "
                "internals (attributes such as __class__ or __globals__); use a template that does not."
            ) from exc
        except TemplateError as exc:
            raise ChatTemplateError(
                f"the chat template raised an error: {exc.message or exc}. This usually means the conversation "
                "does not fit the template's rules (e.g. roles must alternate user/assistant); change the messages "
                "or pass another chat_template=..."
            ) from exc
        if field is not None:
            text = _cut_at_tag(text, final_text)
        rendered.append(text)
    return rendered


def _tag_final_message(
    chat: list[dict[str, Any]], template: str, continue_final_message: bool | str
) -> tuple[str, str]:
    if not chat:
        raise ConfigError("apply_chat_template: continue_final_message is set but the conversation is empty.")
    field = continue_final_message if isinstance(continue_final_message, str) else "content"
    final = chat[-1].get(field)
    if final is None:
        raise ConfigError(
            f"apply_chat_template: continue_final_message is set but the final message has no {field!r} to continue."
        )
    fields = [field]
    if field in REASONING_FIELDS:
        fields = [f for f in REASONING_FIELDS if chat[-1].get(f) == final]
    if not any(f in template for f in fields):
        raise ConfigError(
            f"apply_chat_template: continue_final_message={field!r}, but the chat template never reads that field."
        )
    if isinstance(final, list | tuple):
        for block in reversed(final):
            if isinstance(block, dict) and "text" in block:
                final_text = block["text"]
                block["text"] = block["text"] + _CONTINUE_TAG
                return field, final_text
        raise ConfigError("apply_chat_template: continue_final_message is set but the final message has no text block.")
    for f in fields:
        chat[-1][f] = chat[-1][f] + _CONTINUE_TAG
    return field, final


def _cut_at_tag(text: str, final_text: str) -> str:
    tag = _CONTINUE_TAG.strip()
    if final_text.strip() not in text or tag not in text:
        raise ConfigError(
            "apply_chat_template: continue_final_message is set but the chat template dropped part of the final "
            "message, so it cannot be continued. Check that the template renders the last message verbatim."
        )
    at = text.rindex(tag)
    if text[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return text[:at]
    return text[:at].rstrip()
