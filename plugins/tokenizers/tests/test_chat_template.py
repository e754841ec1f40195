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
    text = tok.apply_chat_template(CONVERSATION, chat_template=template_text("llama3_style"), tokenize=False)
    assert f"Today Date: {datetime.now().strftime('%d %b %Y')}" in text
    assert text.startswith(tok.bos_token)


def test_raise_exception_gives_clear_error(make_bpe_dir: Any) -> None:
    tok = PreTrainedTokenizerFast.from_pretrained(make_bpe_dir("GPT2Tokenizer"))
    not_alternating = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(ChatTemplateError, match="Conversation roles must alternate") as caught:
        tok.apply_chat_template(not_alternating, chat_template=template_text("llama3_style"), tokenize=False)
    assert isinstance(caught.value, MicroformersError)
    assert isinstance(caught.value, jinja2.TemplateError)  # what code written for the reference catches


@pytest.mark.parametrize(
    "template",
    [
        "{{ messages.__class__.__mro__ }}",
        "{{ ''.__class__.__base__.__subclasses__() }}",
        "{{ raise_exception.__globals__ }}",
        "{% set ns = namespace(__init__=1) %}{{ ns }}",
        "{{ messages[0].update({'role': 'x'}) }}",
        "{{ cycler.__init__.__globals__.os }}",
    ],
)
def test_sandbox_refuses_python_internals(make_bpe_dir: Any, template: str) -> None:
    tok = PreTrainedTokenizerFast.from_pretrained(make_bpe_dir("GPT2Tokenizer"))
    with pytest.raises(ChatTemplateError) as caught:
        tok.apply_chat_template(CONVERSATION, chat_template=template, tokenize=False)
    assert isinstance(caught.value, jinja2.exceptions.SecurityError | ChatTemplateError)
    assert "sandbox" in str(caught.value) or "underscore" in str(caught.value) or "raised an error" in str(caught.value)


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
