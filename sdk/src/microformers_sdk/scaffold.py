"""``microformers new-plugin NAME``: write a new model-plugin distribution that passes its own tests.

The generated distribution ``microformers-NAME`` holds a ``pyproject.toml`` with the entry point, a
README, a config class, a small decoder-only model built from SDK pieces (RMSNorm, rotary
positions, the configured attention kernel, SwiGLU MLP, a KV cache) with a causal-LM head, the
plugin module registering them, and tests: the SDK conformance suite plus a registration test.
Everything is written into a staging folder first and moved into place at the end, so a failure
leaves nothing half-written.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from microformers.errors import ConfigError

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")


def plugin_names(name: str) -> dict[str, str]:
    """The distribution, package, model_type and class-prefix names derived from ``NAME``."""
    if not NAME_PATTERN.match(name or ""):
        raise ConfigError(
            f"new-plugin: NAME {name!r} is not a valid plugin name; use lowercase letters and digits, starting "
            "with a letter, optionally joined by '-' or '_' (e.g. 'myarch' or 'my-arch')"
        )
    if name.startswith("microformers"):
        raise ConfigError(
            f"new-plugin: NAME {name!r} should not repeat the 'microformers' prefix; pass just the architecture "
            f"name, e.g. {name.removeprefix('microformers').strip('-_') or 'myarch'!r}"
        )
    words = re.split(r"[-_]", name)
    snake = "_".join(words)
    package = f"microformers_{snake}"
    prefix = "".join(word[:1].upper() + word[1:] for word in words)
    # Sorted like ruff/isort would, whichever side of "microformers_sdk" the package name falls.
    test_imports = sorted(
        [
            f"from {package}.configuration_{snake} import {prefix}Config",
            f"from {package}.modeling_{snake} import {prefix}ForCausalLM, {prefix}Model",
            "from microformers_sdk.testing import ModelConformanceTests",
        ]
    )
    return {
        "__NAME__": name,
        "__DIST__": f"microformers-{'-'.join(words)}",
        "__PACKAGE__": package,
        "__MODEL_TYPE__": snake,
        "__MODULE__": snake,
        "__PREFIX__": prefix,
        "__TEST_IMPORTS__": "\n".join(test_imports),
    }


def check_not_shadowing(names: dict[str, str]) -> None:
    """Refuse a name whose distribution, plugin or model_type is already installed: installing the new plugin
    would replace (or fight with) the installed one, e.g. ``new-plugin llama`` and ``microformers-llama``."""
    import importlib.metadata as md

    from microformers.plugins import ENTRY_POINT_GROUP, registry

    dist, snake = names["__DIST__"], names["__MODEL_TYPE__"]
    clashes = []
    try:
        clashes.append(f"the distribution {dist} {md.version(dist)} is installed")
    except md.PackageNotFoundError:
        pass
    if any(ep.name == snake for ep in md.entry_points(group=ENTRY_POINT_GROUP)):
        clashes.append(f"an installed plugin is named '{snake}'")
    if registry.get("configs", snake) is not None:
        clashes.append(f"model_type '{snake}' is provided by plugin '{registry.get('configs', snake).plugin}'")
    if clashes:
        raise ConfigError(
            f"new-plugin: NAME {names['__NAME__']!r} would shadow an installed plugin ({'; '.join(clashes)}); "
            f"installing it would replace or conflict with that one. Choose another NAME, e.g. "
            f"'my{snake.replace('_', '')}', or uninstall {dist} first."
        )


def scaffold_plugin(name: str, directory: str | Path = ".", force: bool = False) -> Path:
    """Write ``microformers-NAME/`` under ``directory``; return its path.

    An existing non-empty target raises a ``ConfigError`` unless ``force`` (which replaces it).
    """
    names = plugin_names(name)
    check_not_shadowing(names)
    parent = Path(directory)
    if parent.exists() and not parent.is_dir():
        raise ConfigError(f"new-plugin: --directory {parent} is a file; pass a folder to create the plugin in")
    target = parent / names["__DIST__"]
    if target.exists() and (not target.is_dir() or any(target.iterdir())) and not force:
        raise ConfigError(
            f"new-plugin: {target} already exists and is not empty; choose another --directory or pass --force "
            "to replace it"
        )
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{names['__DIST__']}-", dir=parent))
    try:
        for relative, template in _templates().items():
            path = staging / _fill(relative, names)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(_fill(template, names), encoding="utf-8")
        if target.exists():
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def new_plugin_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """The ``microformers new-plugin`` CLI command (see ``hookspecs.register_cli_commands``)."""
    parser.add_argument("name", metavar="NAME", help="architecture name, e.g. 'myarch' (model_type and package)")
    parser.add_argument("--directory", "-d", default=".", help="where to create microformers-NAME/ (default: .)")
    parser.add_argument("--force", action="store_true", help="replace an existing non-empty target folder")

    def run(args: argparse.Namespace) -> int:
        target = scaffold_plugin(args.name, args.directory, force=args.force)
        names = plugin_names(args.name)
        print(f"created {target}")
        print("next steps:")
        print(f"  pip install -e {target}")
        print(f"  pytest {target / 'tests'}")
        print(f"  microformers plugins   # lists '{names['__NAME__']}'")
        return 0

    return run


def _fill(text: str, names: dict[str, str]) -> str:
    for placeholder, value in names.items():
        text = text.replace(placeholder, value)
    return text


def _templates() -> dict[str, str]:
    return {
        "pyproject.toml": _PYPROJECT,
        "README.md": _README,
        "src/__PACKAGE__/__init__.py": _INIT,
        "src/__PACKAGE__/plugin.py": _PLUGIN,
        "src/__PACKAGE__/configuration___MODULE__.py": _CONFIGURATION,
        "src/__PACKAGE__/modeling___MODULE__.py": _MODELING,
        "tests/test_conformance.py": _TEST_CONFORMANCE,
        "tests/test_plugin.py": _TEST_PLUGIN,
    }


_PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "__DIST__"
version = "0.1.0"
description = "The __PREFIX__ architecture for microformers"
readme = "README.md"
requires-python = ">=3.10"
dependencies = [
    "microformers>=0.1.0",
    "microformers-sdk>=0.1.0",
    "torch>=2.1",
]

[project.optional-dependencies]
test = ["pytest>=7"]

# The kernel finds the plugin through this entry point (group "microformers").
[project.entry-points.microformers]
__NAME__ = "__PACKAGE__.plugin"

[tool.setuptools.packages.find]
where = ["src"]
"""

_README = """\
# __DIST__

The `__MODEL_TYPE__` architecture for [microformers](https://pypi.org/project/microformers/).

```bash
pip install -e .
microformers plugins          # shows '__NAME__' and what it registers
pytest tests                  # the SDK conformance suite and a registration test
```

```python
from microformers import AutoConfig, AutoModelForCausalLM

config = AutoConfig.for_model("__MODEL_TYPE__", hidden_size=64, num_hidden_layers=2)
model = AutoModelForCausalLM.from_config(config)
model.save_pretrained("tiny-__NAME__")
model = AutoModelForCausalLM.from_pretrained("tiny-__NAME__")
```

Layout:

- `src/__PACKAGE__/plugin.py`: the entry point; registers the config and model classes by
  `"module:Name"` strings, so discovery stays cheap.
- `configuration___MODULE__.py`: `__PREFIX__Config` (`model_type = "__MODEL_TYPE__"`).
- `modeling___MODULE__.py`: `__PREFIX__Model` and `__PREFIX__ForCausalLM`, a small pre-norm decoder built
  from `microformers_sdk` pieces. Replace it with your architecture; keep the parameter names equal to the
  tensor names of the checkpoints you want to load.
- `tests/test_conformance.py`: `microformers_sdk.testing.ModelConformanceTests` on a tiny config.
"""

_INIT = '''\
"""__DIST__: the ``__MODEL_TYPE__`` architecture for microformers (model classes load on first access)."""

from __future__ import annotations

from microformers.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "__PREFIX__Config": "configuration___MODULE__",
    "__PREFIX__Model": "modeling___MODULE__",
    "__PREFIX__ForCausalLM": "modeling___MODULE__",
}

__all__ = ["__version__", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
'''

_PLUGIN = '''\
"""Entry point ``__NAME__``: registers the ``__MODEL_TYPE__`` config and model classes."""

from __future__ import annotations

from typing import Any

from microformers import hookimpl

MICROFORMERS_API_VERSION = 1

MODELS: dict[str, str] = {
    "AutoModel": "__PACKAGE__.modeling___MODULE__:__PREFIX__Model",
    "AutoModelForCausalLM": "__PACKAGE__.modeling___MODULE__:__PREFIX__ForCausalLM",
}


@hookimpl
def register_models(register: Any) -> None:
    register("__MODEL_TYPE__", "__PACKAGE__.configuration___MODULE__:__PREFIX__Config", MODELS)
'''

_CONFIGURATION = '''\
"""``__PREFIX__Config``: the ``config.json`` of ``model_type: __MODEL_TYPE__`` checkpoints."""

from __future__ import annotations

from typing import Any

from microformers import PretrainedConfig
from microformers.errors import ConfigError


class __PREFIX__Config(PretrainedConfig):
    model_type = "__MODEL_TYPE__"

    def __init__(
        self,
        vocab_size: int = 32000,
        hidden_size: int = 512,
        intermediate_size: int = 1376,
        num_hidden_layers: int = 8,
        num_attention_heads: int = 8,
        max_position_embeddings: int = 2048,
        rms_norm_eps: float = 1e-6,
        rope_theta: float = 10000.0,
        rope_scaling: dict[str, Any] | None = None,
        hidden_act: str = "silu",
        initializer_range: float = 0.02,
        use_cache: bool = True,
        tie_word_embeddings: bool = False,
        **kwargs: Any,
    ) -> None:
        if hidden_size % num_attention_heads:
            raise ConfigError(
                f"hidden_size={hidden_size} is not a multiple of num_attention_heads={num_attention_heads} in "
                "__PREFIX__Config; fix config.json"
            )
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.use_cache = use_cache
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
'''

_MODELING = '''\
"""``__PREFIX__Model`` and ``__PREFIX__ForCausalLM``: a pre-norm decoder made of microformers-sdk pieces."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from microformers import PreTrainedModel
from microformers_sdk.outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from microformers_sdk.attention import get_attention_function
from microformers_sdk.cache import Cache
from microformers_sdk.inputs import prepare_decoder_inputs
from microformers_sdk.layers import GatedMLP, RMSNorm
from microformers_sdk.losses import causal_lm_loss
from microformers_sdk.masks import build_attention_mask
from microformers_sdk.rope_settings import rope_settings_from_config
from microformers_sdk.rotary import RotaryEmbedding, apply_rotary_pos_emb

from .configuration___MODULE__ import __PREFIX__Config


class __PREFIX__Attention(nn.Module):
    def __init__(self, config: __PREFIX__Config, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)

    def forward(
        self,
        hidden_states: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor | None,
        is_causal: bool,
        cache: Cache | None,
        attention_fn: Any,
    ) -> torch.Tensor:
        batch, length, _ = hidden_states.shape

        def heads(projection: nn.Linear) -> torch.Tensor:
            return projection(hidden_states).view(batch, length, -1, self.head_dim).transpose(1, 2)

        query, key = apply_rotary_pos_emb(heads(self.q_proj), heads(self.k_proj), *rotary)
        value = heads(self.v_proj)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)
        output = attention_fn(query, key, value, mask, scaling=self.head_dim**-0.5, is_causal=is_causal)
        return self.o_proj(output.transpose(1, 2).reshape(batch, length, -1))


class __PREFIX__Layer(nn.Module):
    def __init__(self, config: __PREFIX__Config, layer_idx: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn = __PREFIX__Attention(config, layer_idx)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)

    def forward(self, hidden_states: torch.Tensor, *attention_args: Any) -> torch.Tensor:
        hidden_states = hidden_states + self.self_attn(self.input_layernorm(hidden_states), *attention_args)
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class __PREFIX__PreTrainedModel(PreTrainedModel):
    config_class = __PREFIX__Config
    base_model_prefix = "model"
    _no_split_modules: ClassVar[list[str]] = ["__PREFIX__Layer"]


class __PREFIX__Model(__PREFIX__PreTrainedModel):
    def __init__(self, config: __PREFIX__Config) -> None:
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(__PREFIX__Layer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(rope_settings_from_config(config))
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPast | tuple[Any, ...]:
        inputs = prepare_decoder_inputs(
            self,
            self.embed_tokens,
            input_ids=input_ids,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
            output_attentions=False,
            output_hidden_states=False,
            return_dict=return_dict,
        )
        hidden_states, cache, past = inputs.inputs_embeds, inputs.cache, inputs.past_length
        length = hidden_states.shape[1]
        rotary = self.rotary_emb(inputs.position_ids, dtype=hidden_states.dtype)
        mask, is_causal = build_attention_mask(attention_mask, length, past, device=hidden_states.device)
        attention_fn = get_attention_function(self.config)
        for layer in self.layers:
            hidden_states = layer(hidden_states, rotary, mask, is_causal, cache, attention_fn)
        output = BaseModelOutputWithPast(
            last_hidden_state=self.norm(hidden_states), past_key_values=cache if inputs.use_cache else None
        )
        return output if inputs.return_dict else output.to_tuple()


class __PREFIX__ForCausalLM(__PREFIX__PreTrainedModel):
    _tied_weights_keys: ClassVar[dict[str, str]] = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: __PREFIX__Config) -> None:
        super().__init__(config)
        self.model = __PREFIX__Model(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast | tuple[Any, ...]:
        return_dict = self.config.return_dict if return_dict is None else return_dict
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
        )
        logits = self.lm_head(outputs.last_hidden_state)
        loss = causal_lm_loss(logits, labels) if labels is not None else None
        output = CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=outputs.past_key_values)
        return output if return_dict else output.to_tuple()
'''

_TEST_CONFORMANCE = '''\
"""__DIST__ through the microformers-sdk conformance suite."""

from __future__ import annotations

__TEST_IMPORTS__


class Test__PREFIX__Conformance(ModelConformanceTests):
    config_class = __PREFIX__Config
    config_kwargs = {
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 64,
        "pad_token_id": 0,
    }
    model_classes = (__PREFIX__Model, __PREFIX__ForCausalLM)
    padding_side = "left"


class Test__PREFIX__TiedConformance(ModelConformanceTests):
    config_class = __PREFIX__Config
    config_kwargs = {**Test__PREFIX__Conformance.config_kwargs, "tie_word_embeddings": True}
    model_classes = (__PREFIX__ForCausalLM,)
    padding_side = "left"
'''

_TEST_PLUGIN = '''\
"""The entry-point module registers what the README promises (checked without installing the plugin)."""

from __future__ import annotations

from typing import Any

from microformers.plugins import resolve_ref
from __PACKAGE__ import plugin


def test_plugin_registers_config_and_models() -> None:
    registered: list[tuple[Any, ...]] = []
    assert plugin.MICROFORMERS_API_VERSION == 1
    plugin.register_models(register=lambda *args: registered.append(args))
    assert len(registered) == 1
    model_type, config_ref, models = registered[0]
    assert model_type == "__MODEL_TYPE__"
    assert resolve_ref(config_ref).model_type == "__MODEL_TYPE__"
    assert set(models) == {"AutoModel", "AutoModelForCausalLM"}
    for ref in models.values():
        assert resolve_ref(ref).config_class is resolve_ref(config_ref)
'''
