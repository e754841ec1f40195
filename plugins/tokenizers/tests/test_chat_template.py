"""Chat templates render like the reference implementation, inside a sandbox."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import pytest

from microformers.errors import ConfigError, MicroformersError
from microformers_tokenizers import ChatTemplateError, PreTrainedTokenizerFast

FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATES = ["chatml_smollm2", "llama3_style", "tools_qwen_style"]

CONVERSATION = [
    {"role": "system", "content": "Eres un asistente útil. Responde en el idioma del usuario."},
    {"role": "user", "content": "¿Qué es un tokenizador?"},
    {"role": "assistant", "content": "Divide el texto en unidades llamadas tokens."},
    {"role": "user", "content": "请用中文解释 attention mask。"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": 'Get the current weather in a city, e.g. "Zürich" <b>now</b>',
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["city"],
            },
        },
    }
]
TOOL_CONVERSATION = [
    *CONVERSATION[:2],
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}],
    },
    {"role": "tool", "content": '{"temp": 21}'},
    {"role": "user", "content": "Thanks!"},
]


def template_text(name: str) -> str:
    return (FIXTURES / f"{name}.jinja").read_text(encoding="utf-8")


@pytest.fixture(scope="module", params=TEMPLATES)
def chat_pair(request: pytest.FixtureRequest, make_bpe_dir: Any, reference: Any) -> tuple[Any, Any, str]:
    folder = make_bpe_dir("GPT2Tokenizer")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = template_text(request.param)
    target = folder.parent / f"{folder.name}-{request.param}"
    target.mkdir(exist_ok=True)
    (target / "tokenizer.json").write_text((folder / "tokenizer.json").read_text())
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    return PreTrainedTokenizerFast.from_pretrained(target), reference.from_pretrained(str(target)), request.param


@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_renders_like_reference(chat_pair: Any, add_generation_prompt: bool) -> None:
    ours, ref, name = chat_pair
    for messages in (CONVERSATION, CONVERSATION[1:]):
        kwargs = {"tokenize": False, "add_generation_prompt": add_generation_prompt, "date_string": "26 Jul 2024"}
        text = ours.apply_chat_template(messages, **kwargs)
        assert text == ref.apply_chat_template(messages, **kwargs)
        assert messages[-1]["content"] in text
        assert (
            text.endswith("assistant\n" if name != "llama3_style" else "<|end_header_id|>\n\n") == add_generation_prompt
        )


def test_tools_and_documents_render_like_reference(chat_pair: Any) -> None:
    ours, ref, name = chat_pair
    documents = [{"title": "Glosario", "text": "Máscara de atención"}, {"title": "词表", "text": "分词器"}]
    kwargs = {"tokenize": False, "add_generation_prompt": True, "date_string": "26 Jul 2024"}
    kwargs_messages = TOOL_CONVERSATION if name == "tools_qwen_style" else CONVERSATION
    text = ours.apply_chat_template(kwargs_messages, tools=TOOLS, documents=documents, **kwargs)
    assert text == ref.apply_chat_template(kwargs_messages, tools=TOOLS, documents=documents, **kwargs)
    if name == "tools_qwen_style":
        assert '"Zürich"' in text and "<b>now</b>" in text and "1. Glosario" in text and "2. 词表" in text


def test_tokenized_chat_matches_reference(chat_pair: Any) -> None:
    ours, ref, _ = chat_pair
    kwargs = {"add_generation_prompt": True, "date_string": "26 Jul 2024"}
    assert ours.apply_chat_template(CONVERSATION, return_dict=False, **kwargs) == ref.apply_chat_template(
        CONVERSATION, return_dict=False, **kwargs
    )
    a = ours.apply_chat_template(CONVERSATION, **kwargs)
    b = ref.apply_chat_template(CONVERSATION, **kwargs)
    assert dict(a) == dict(b)
    batch = [CONVERSATION, CONVERSATION[1:2], CONVERSATION[:3]]
    a = ours.apply_chat_template(batch, padding=True, return_tensors="pt", **kwargs)
    b = ref.apply_chat_template(batch, padding=True, return_tensors="pt", **kwargs)
    assert a["input_ids"].tolist() == b["input_ids"].tolist()
    assert a["attention_mask"].tolist() == b["attention_mask"].tolist()
    texts = ours.apply_chat_template(batch, tokenize=False, **kwargs)
    assert texts == ref.apply_chat_template(batch, tokenize=False, **kwargs) and len(texts) == 3


def test_continue_final_message_matches_reference(chat_pair: Any) -> None:
    ours, ref, _ = chat_pair
    messages = [
        *CONVERSATION[:3],
        {"role": "user", "content": "Más"},
        {"role": "assistant", "content": "Claro, los tokens "},
    ]
    kwargs = {"tokenize": False, "continue_final_message": True, "date_string": "26 Jul 2024"}
    text = ours.apply_chat_template(messages, **kwargs)
    assert text == ref.apply_chat_template(messages, **kwargs)
    assert text.rstrip().endswith("los tokens")
    with pytest.raises(ConfigError, match="continue_final_message"):
        ours.apply_chat_template(messages, continue_final_message=True, add_generation_prompt=True)


def test_strftime_now_helper(make_bpe_dir: Any) -> None:
    tok = PreTrainedTokenizerFast.from_pretrained(make_bpe_dir("GPT2Tokenizer"))
    before = datetime.now()
    text = tok.apply_chat_template(CONVERSATION, chat_template=template_text("llama3_style"), tokenize=False)
    after = datetime.now()  # the date may change during the call (midnight): either day is right
    assert any(f"Today Date: {day.strftime('%d %b %Y')}" in text for day in (before, after))
    assert text.startswith(tok.bos_token)


def test_raise_exception_gives_clear_error(make_bpe_dir: Any) -> None:
    tok = PreTrainedTokenizerFast.from_pretrained(make_bpe_dir("GPT2Tokenizer"))
    not_alternating = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(ChatTemplateError, match="Conversation roles must alternate") as caught:
        tok.apply_chat_template(not_alternating, chat_template=template_text("llama3_style"), tokenize=False)
    assert isinstance(caught.value, MicroformersError)
    assert isinstance(caught.value, jinja2.TemplateError)  # what code written for the reference catches


@pytest.mark.parametrize(
    ("template", "refusal"),
    [
        ("{{ messages.__class__.__mro__ }}", "attribute '__class__' of a 'list' object is unsafe"),
        ("{{ ''.__class__.__base__.__subclasses__() }}", "attribute '__class__' of a 'str' object is unsafe"),
        ("{{ raise_exception.__globals__ }}", "attribute '__globals__' of a 'function' object is unsafe"),
        ("{% set ns = namespace(__init__=1) %}{{ ns }}", "underscore-prefixed namespace attribute '__init__'"),
        ("{{ messages[0].update({'role': 'x'}) }}", "attribute 'update' of a 'dict' object is unsafe"),
        ("{{ cycler.__init__.__globals__.os }}", "attribute '__init__' of a 'type' object is unsafe"),
    ],
)
def test_sandbox_refuses_python_internals(make_bpe_dir: Any, template: str, refusal: str) -> None:
    tok = PreTrainedTokenizerFast.from_pretrained(make_bpe_dir("GPT2Tokenizer"))
    with pytest.raises(jinja2.exceptions.SecurityError) as caught:
        tok.apply_chat_template(CONVERSATION, chat_template=template, tokenize=False)
    assert isinstance(caught.value, ChatTemplateError)
    assert "stopped by the sandbox" in str(caught.value) and refusal in str(caught.value)


def test_sandbox_escape_attempts_are_security_errors(make_bpe_dir: Any) -> None:
    tok = PreTrainedTokenizerFast.from_pretrained(make_bpe_dir("GPT2Tokenizer"))
    with pytest.raises(jinja2.exceptions.SecurityError, match="sandbox"):
        tok.apply_chat_template(CONVERSATION, chat_template="{{ messages.__class__ }}", tokenize=False)


def test_template_sources(make_bpe_dir: Any, reference: Any) -> None:
    folder = make_bpe_dir("GPT2Tokenizer")
    (folder / "chat_template.jinja").write_text(template_text("chatml_smollm2"), encoding="utf-8")
    extra = folder / "additional_chat_templates"
    extra.mkdir()
    (extra / "tool_use.jinja").write_text(template_text("tools_qwen_style"), encoding="utf-8")
    ours, ref = PreTrainedTokenizerFast.from_pretrained(folder), reference.from_pretrained(str(folder))
    assert ours.chat_template == ref.chat_template
    assert set(ours.chat_template) == {"default", "tool_use"}
    for tools in (None, TOOLS):
        assert ours.apply_chat_template(CONVERSATION, tools=tools, tokenize=False) == ref.apply_chat_template(
            CONVERSATION, tools=tools, tokenize=False
        )
    assert ours.get_chat_template("tool_use") == template_text("tools_qwen_style")


def test_missing_template_is_clear_error(make_bpe_dir: Any) -> None:
    tok = PreTrainedTokenizerFast.from_pretrained(make_bpe_dir("GPT2Tokenizer"))
    with pytest.raises(ConfigError, match="no chat template"):
        tok.apply_chat_template(CONVERSATION)
    with pytest.raises(ConfigError, match="empty"):
        tok.apply_chat_template([], chat_template="x")
    with pytest.raises(ChatTemplateError, match="does not parse"):
        tok.apply_chat_template(CONVERSATION, chat_template="{% for %}", tokenize=False)


def test_tools_as_functions(make_bpe_dir: Any) -> None:
    tok = PreTrainedTokenizerFast.from_pretrained(make_bpe_dir("GPT2Tokenizer"))

    def get_time(city: str, offset: int = 0) -> str:
        """Current time in a city.

        Args:
            city: the city
        """
        return city

    text = tok.apply_chat_template(
        CONVERSATION[:2], tools=[get_time], chat_template=template_text("tools_qwen_style"), tokenize=False
    )
    assert '"name": "get_time"' in text and '"city": {"type": "string"}' in text and '"required": ["city"]' in text


# -- resource limits: each template below hung, allocated gigabytes or escaped as a raw exception before --------
@pytest.mark.parametrize(
    ("template", "message"),
    [
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            r"ran for more than 0\.3 s and was stopped",
        ),
        (
            "{% for i in range(100000) %}{{ 'x' * 30000000 }}{% endfor %}",
            "its output grew beyond 33,554,432 characters",
        ),
        ("{{ 10**100000000 }}", "number of about 400,000,000 bits"),
        (
            "{% set ns = namespace(x=3) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}{% endfor %}",
            r"the operation '\*' would compute a number beyond 4,096 bits",
        ),
        ("{{ lipsum(10**7) }}", r"lipsum\(n=10000000, max=100\) asks for more than 100,000 words"),
        ("{{ 'a' * 3000000000 }}", "would build 3,000,000,000 items"),
        ("{{ [0] * 3000000000 }}", "would build 3,000,000,000 items"),
        (
            "{% set ns = namespace(x='ab') %}{% for i in range(40) %}{% set ns.x = ns.x ~ ns.x %}{% endfor %}",
            "'~' would build a string of over 33,554,432 characters",
        ),
        ("{{ 'a'|center(3000000000) }}", r"\|center got the integer argument 3e\+09"),
        ("{{ 'a'.ljust(3000000000) }}", r"ljust\(\) got the integer argument 3e\+09"),
        ("{{ '{:>3000000000}'.format(1) }}", "str.format got a format with a width beyond"),
        ("{{ '%3000000000d'|format(1) }}", r"\|format got a format with a width beyond"),
    ],
)
def test_resource_limits_stop_the_template(
    make_bpe_dir: Any, monkeypatch: pytest.MonkeyPatch, template: str, message: str
) -> None:
    if "ran for more than" in message:
        # the default (5 s) is slow for a test; only the runaway loop gets the short limit, so that on a loaded
        # machine the size limits of the other templates still trip before any time limit does
        from microformers_tokenizers import chat_template

        monkeypatch.setattr(chat_template.LIMITS, "seconds", 0.3)
    folder = make_bpe_dir("GPT2Tokenizer", chat_template=template)
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    with pytest.raises(ChatTemplateError, match=message) as caught:
        tok.apply_chat_template(CONVERSATION, tokenize=False)
    assert isinstance(caught.value, MicroformersError)
    assert f"the chat template of {folder}" in str(caught.value)


@pytest.mark.parametrize(
    ("template", "raw"),
    [
        ("{{ range(10**10) }}", "OverflowError"),
        ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "RecursionError"),
        ("{% include 'other.jinja' %}", "TypeError"),
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        ("{{ '{0} {1}'.format('a') }}", "IndexError"),
        ("{{ messages[0].content + 1 }}", "TypeError"),
    ],
)
def test_every_template_failure_is_a_microformers_error_naming_the_template(
    make_bpe_dir: Any, template: str, raw: str
) -> None:
    tok = PreTrainedTokenizerFast.from_pretrained(make_bpe_dir("GPT2Tokenizer", chat_template={"default": "x"}))
    tok.chat_template = {"default": "{{ messages[0].content }}", "tool_use": template}
    with pytest.raises(ChatTemplateError, match=f"failed while rendering: {raw}") as caught:
        tok.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
    assert isinstance(caught.value, MicroformersError)
    assert str(caught.value).startswith(f"the chat template 'tool_use' of {tok.name_or_path}")


def test_limits_leave_ordinary_templates_alone(make_bpe_dir: Any) -> None:
    tok = PreTrainedTokenizerFast.from_pretrained(make_bpe_dir("GPT2Tokenizer"))
    template = "{{ 'a' ~ 'b' }}{{ 2 ** 10 }}{{ 'x' * 3 }}{{ '%5d'|format(3) }}{{ '{:>4}'.format(1) }}{{ lipsum(1, False, 3, 5)|length > 0 }}"
    assert tok.apply_chat_template(CONVERSATION, chat_template=template, tokenize=False) == "ab1024xxx    3   1True"
