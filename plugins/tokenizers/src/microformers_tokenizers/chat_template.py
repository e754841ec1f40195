"""Chat templates: Jinja rendering in a sandbox with the helpers Hub templates expect.

Templates come from model folders downloaded from the internet, so they are untrusted code. They run
in jinja2's ``ImmutableSandboxedEnvironment`` (no attribute access to ``__class__`` and other
internals, no mutation of lists and dicts passed in), and everything they can see is rebuilt from
plain JSON-like values first. Resources are bounded too (``LIMITS``): rendering time, the size of every
string, list and output the template builds, and the size of integers; every failure, whatever Python
raised inside, is a ``ChatTemplateError`` naming the template.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import inspect
import json
import re
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.utils
from jinja2.compiler import CodeGenerator
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


@dataclasses.dataclass
class TemplateLimits:
    """What one chat template rendering may use. Real chat templates stay far below every limit."""

    seconds: float = 5.0  # wall-clock time of one rendering
    chars: int = 2**25  # length of the output and of any string, list or dict the template builds
    int_bits: int = 4096  # size of any integer the template computes (about 1,200 decimal digits)


LIMITS = TemplateLimits()


class _LimitExceeded(SecurityError):
    pass


class _Timeout(BaseException):
    """Raised asynchronously inside the rendering thread when its time is up."""


def _check_size(value: Any, what: str) -> Any:
    if isinstance(value, str | list | tuple | dict) and len(value) > LIMITS.chars:
        raise _LimitExceeded(f"{what} would build a value of {len(value):,} items (limit {LIMITS.chars:,})")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > LIMITS.int_bits:
        raise _LimitExceeded(f"{what} would build a {value.bit_length():,}-bit integer (limit {LIMITS.int_bits:,})")
    return value


_FORMAT_WIDTH = re.compile(r"(?:%[-+ #0]*\.?|\{[^{}]*:[^{}]*?)(\d+)")  # widths/precisions in % and {} formats


def _check_args(args: Any, what: str) -> None:
    """Refuse sizes/widths beyond the limits before a string function allocates them."""
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > LIMITS.chars:
            raise _LimitExceeded(f"{what} got the integer argument {arg:.3g} (limit {LIMITS.chars:,})")
        if isinstance(arg, str) and any(int(w) > LIMITS.chars for w in _FORMAT_WIDTH.findall(arg)):
            raise _LimitExceeded(f"{what} got a format with a width beyond {LIMITS.chars:,}")


def _length(value: Any) -> int:
    return len(value) if isinstance(value, str | list | tuple | dict) else 0


def _binop_limits(operator: str, left: Any, right: Any) -> None:
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (left, right))
    what = f"the operation {operator!r}"
    if operator == "**" and ints and right > 0 and abs(left) > 1:
        if right * max(abs(left).bit_length() - 1, 1) > LIMITS.int_bits:
            raise _LimitExceeded(
                f"{what} would compute a number of about {right * abs(left).bit_length():,} bits "
                f"(limit {LIMITS.int_bits:,})"
            )
    elif operator == "*" and ints:
        if left.bit_length() + right.bit_length() > LIMITS.int_bits + 1:
            raise _LimitExceeded(f"{what} would compute a number beyond {LIMITS.int_bits:,} bits")
    elif operator == "*":
        count, seq = (left, right) if isinstance(left, int) else (right, left)
        if isinstance(count, int) and count > 0 and _length(seq) * count > LIMITS.chars:
            raise _LimitExceeded(f"{what} would build {_length(seq) * count:,} items (limit {LIMITS.chars:,})")
    elif operator == "+" and _length(left) + _length(right) > LIMITS.chars:
        raise _LimitExceeded(f"{what} would build {_length(left) + _length(right):,} items (limit {LIMITS.chars:,})")
    elif operator == "%" and isinstance(left, str):
        _check_args([left], what)


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
        jinja2.utils.Namespace.__setitem__(self, name, _check_size(value, f"namespace.{name}"))

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


class _BoundedCodeGenerator(CodeGenerator):
    """``a ~ b`` goes through the environment, so the size of concatenations is checked too."""

    def visit_Concat(self, node: Any, frame: Any) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class _StrictSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, but reaching for an unsafe attribute fails at once, and sizes are bounded.

    jinja2's sandbox answers ``obj.__class__`` with an undefined value that prints as an empty
    string; an escape attempt should stop the template with an error instead of rendering quietly.
    """

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset(["**", "*", "+", "%"])

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__!r} object is unsafe")

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _binop_limits(operator, left, right)
        return _check_size(super().call_binop(context, operator, left, right), f"the operation {operator!r}")

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(__obj, "__name__", type(__obj).__name__)
        if isinstance(getattr(__obj, "__self__", None), str):
            _check_args([*args, *kwargs.values()], f"{name}()")
        return _check_size(ImmutableSandboxedEnvironment.call(__self, __context, __obj, *args, **kwargs), f"{name}()")

    def wrap_str_format(self, value: Any) -> Any:
        wrapped = super().wrap_str_format(value)
        if wrapped is not None:
            _check_args([value.__self__], "str.format")
        return wrapped

    def bounded_concat(self, values: Any) -> str:
        total = 0
        parts = []
        for value in values:
            part = str(value)
            total += len(part)
            if total > LIMITS.chars:
                raise _LimitExceeded(f"'~' would build a string of over {LIMITS.chars:,} characters")
            parts.append(part)
        return "".join(parts)


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    if not all(isinstance(v, int) for v in (n, min, max)) or n * max > 100_000:
        raise _LimitExceeded(f"lipsum(n={n!r}, max={max!r}) asks for more than 100,000 words")
    return jinja2.utils.generate_lorem_ipsum(n, html, min, max)


def _bounded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        skip = 2 if hasattr(func, "jinja_pass_arg") else 1  # the context/environment, then the filtered value
        checked = [*args[skip:], *kwargs.values()]
        _check_args(
            [a for a in checked if not isinstance(a, str)] + (list(args[:1]) if name == "format" else []), f"|{name}"
        )
        return _check_size(func(*args, **kwargs), f"the filter |{name}")

    return bounded


@lru_cache(maxsize=32)
def compile_chat_template(source: str) -> jinja2.Template:
    """Compile a template in the sandbox with the helpers Hub chat templates use."""
    env = _StrictSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _DictFactory()
    env.globals["namespace"] = _SafeNamespace
    env.globals["lipsum"] = _lipsum
    env.filters = {name: _bounded_filter(name, func) for name, func in env.filters.items()}
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
    template_name: str = "the chat template",
    **template_kwargs: Any,
) -> list[str]:
    """Render each conversation with ``template``; returns one string per conversation.

    ``template_name`` names the template in errors (e.g. "the chat template 'tool_use' of <folder>").
    """
    name = template_name
    if continue_final_message and add_generation_prompt:
        raise ConfigError(
            "apply_chat_template: continue_final_message and add_generation_prompt cannot both be set; use "
            "continue_final_message to extend the last message, add_generation_prompt to open a new assistant turn."
        )
    try:
        compiled = compile_chat_template(template)
    except ChatTemplateError as exc:
        raise ChatTemplateError(f"{name}: {exc}") from exc.__cause__
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
        text = _render(
            compiled,
            name,
            dict(
                messages=chat,
                tools=tool_schemas,
                documents=documents,
                add_generation_prompt=add_generation_prompt,
                **variables,
            ),
        )
        if field is not None:
            text = _cut_at_tag(text, final_text)
        rendered.append(text)
    return rendered


def _render(compiled: jinja2.Template, name: str, variables: dict[str, Any]) -> str:
    """Render within ``LIMITS``; any failure becomes a ``ChatTemplateError`` naming the template."""
    hint = "Fix the template, or pass another chat_template=..."
    try:
        return _with_deadline(lambda: _collect(compiled.generate(**variables)), LIMITS.seconds)
    except _Timeout:
        raise ChatTemplateSecurityError(
            f"{name} ran for more than {LIMITS.seconds:g} s and was stopped (a runaway loop?). {hint}"
        ) from None
    except _LimitExceeded as exc:
        raise ChatTemplateSecurityError(f"{name} was stopped: {exc}. {hint}") from exc
    except SecurityError as exc:
        raise ChatTemplateSecurityError(
            f"{name} was stopped by the sandbox: {exc}. Chat templates may not access Python "
            "internals (attributes such as __class__ or __globals__); use a template that does not."
        ) from exc
    except TemplateError as exc:
        raise ChatTemplateError(
            f"{name} raised an error: {exc.message or exc}. This usually means the conversation "
            "does not fit the template's rules (e.g. roles must alternate user/assistant); change the messages "
            "or pass another chat_template=..."
        ) from exc
    except (Exception, RecursionError, MemoryError) as exc:
        raise ChatTemplateError(f"{name} failed while rendering: {type(exc).__name__}: {exc}. {hint}") from exc


def _collect(chunks: Any) -> str:
    parts = []
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > LIMITS.chars:
            raise _LimitExceeded(f"its output grew beyond {LIMITS.chars:,} characters")
        parts.append(chunk)
    return "".join(parts)


def _with_deadline(work: Callable[[], str], seconds: float) -> str:
    """Run ``work`` in this thread; after ``seconds``, raise ``_Timeout`` inside it (between bytecodes)."""
    thread_id = ctypes.c_ulong(threading.get_ident())
    lock = threading.Lock()
    state = {"running": True, "fired": False}

    def fire() -> None:
        with lock:
            if state["running"]:
                state["fired"] = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(thread_id, ctypes.py_object(_Timeout))

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        return work()
    finally:
        with lock:
            state["running"] = False
            if state["fired"]:  # not delivered yet: withdraw it
                ctypes.pythonapi.PyThreadState_SetAsyncExc(thread_id, None)
        timer.cancel()


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
