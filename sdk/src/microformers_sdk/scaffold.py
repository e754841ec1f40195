"""``microformers new-plugin NAME``: write a new model-plugin distribution that passes its own tests.

The generated distribution ``microformers-NAME`` holds a ``pyproject.toml`` with the entry point, a
README, a config class, a model file that reads top to bottom like the shipped decoder plugins'
(``microformers-llama``'s eager path): attention with its ``q_proj``/``k_proj``/``v_proj``/``o_proj`` named
in the file, the MLP, the decoder layer, the model and its causal-LM and sequence-classification heads,
with SDK pieces as building blocks only (attention kernels, RMSNorm, the gated MLP, rotary positions,
caches, masks, losses, outputs); the plugin module registering them; and tests: the SDK conformance
suite plus a registration test. ``sdk/tests/test_scaffold.py`` keeps it in step with the real plugins.
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
            f"from {package}.modeling_{snake} import (\n"
            f"    {prefix}ForCausalLM,\n    {prefix}ForSequenceClassification,\n    {prefix}Model,\n)",
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
- `modeling___MODULE__.py`: a pre-norm decoder that reads top to bottom: `__PREFIX__Attention` (its
  `q_proj`/`k_proj`/`v_proj`/`o_proj` named in the file), the MLP, `__PREFIX__DecoderLayer`, `__PREFIX__Model`,
  then the heads `__PREFIX__ForCausalLM` and `__PREFIX__ForSequenceClassification`. `microformers_sdk` supplies
  building blocks only (attention kernels, RMSNorm, the gated MLP, rotary positions, caches, masks, losses,
  outputs). Replace it with your architecture; keep the parameter names equal to the tensor names of the
  checkpoints you want to load.
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
    "__PREFIX__ForSequenceClassification": "modeling___MODULE__",
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
    "AutoModelForSequenceClassification": "__PACKAGE__.modeling___MODULE__:__PREFIX__ForSequenceClassification",
}


@hookimpl
def register_models(register: Any) -> None:
    register("__MODEL_TYPE__", "__PACKAGE__.configuration___MODULE__:__PREFIX__Config", MODELS)
'''

_CONFIGURATION = '''\
"""``__PREFIX__Config``: the ``config.json`` of ``model_type: __MODEL_TYPE__`` checkpoints (imports no torch)."""

from __future__ import annotations

from typing import Any

from microformers import PretrainedConfig
from microformers_sdk.config_checks import check_heads_divide, check_positive_ints
from microformers_sdk.rope_settings import normalize_rope_settings


class __PREFIX__Config(PretrainedConfig):
    """Decoder-only transformer: RMSNorm, rotary positions, grouped-query attention and a gated MLP."""

    model_type = "__MODEL_TYPE__"

    def __init__(
        self,
        vocab_size: int = 32000,
        hidden_size: int = 512,
        intermediate_size: int = 1376,
        num_hidden_layers: int = 8,
        num_attention_heads: int = 8,
        num_key_value_heads: int | None = None,
        hidden_act: str = "silu",
        max_position_embeddings: int = 2048,
        initializer_range: float = 0.02,
        rms_norm_eps: float = 1e-6,
        use_cache: bool = True,
        rope_theta: float = 10000.0,
        rope_scaling: dict[str, Any] | None = None,
        attention_bias: bool = False,
        attention_dropout: float = 0.0,
        mlp_bias: bool = False,
        pad_token_id: int | None = None,
        bos_token_id: int | None = 1,
        eos_token_id: int | list[int] | None = 2,
        tie_word_embeddings: bool = False,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_attention_heads if num_key_value_heads is None else num_key_value_heads
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.attention_bias = attention_bias
        self.attention_dropout = attention_dropout
        self.mlp_bias = mlp_bias
        check_positive_ints(
            self,
            ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads"),
        )  # fmt: skip
        check_heads_divide(self, "hidden_size", "num_attention_heads")
        # grouped-query attention: every key/value head serves the same number of query heads
        check_heads_divide(self, "num_attention_heads", "num_key_value_heads")
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        normalize_rope_settings(
            head_dim=self.hidden_size // self.num_attention_heads,
            max_position_embeddings=self.max_position_embeddings,
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling,
            setting=f"{type(self).__name__}.rope_scaling",
        )
'''

_MODELING = '''\
"""The ``__MODEL_TYPE__`` decoder, top to bottom: attention, MLP, decoder layer, model, then the heads.

Parameter names are the Llama-style checkpoint tensor names (``model.embed_tokens.weight``,
``model.layers.{i}.self_attn.{q,k,v,o}_proj.weight``, ``model.layers.{i}.mlp.{gate,up,down}_proj.weight``,
``model.layers.{i}.{input,post_attention}_layernorm.weight``, ``model.norm.weight``, ``lm_head.weight``,
``score.weight``); change them to those of the checkpoints you load. ``microformers_sdk`` supplies building
blocks only: the attention kernels, RMSNorm, the gated MLP, rotary positions, caches, masks, losses, outputs.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from microformers import PreTrainedModel
from microformers_sdk.attention import eager_attention, get_attention_function
from microformers_sdk.cache import Cache
from microformers_sdk.decoder_heads import keep_logits_positions, pool_last_tokens
from microformers_sdk.inputs import prepare_decoder_inputs
from microformers_sdk.layers import GatedMLP, RMSNorm
from microformers_sdk.losses import causal_lm_loss, sequence_classification_loss
from microformers_sdk.masks import build_attention_mask
from microformers_sdk.outputs import BaseModelOutputWithPast, CausalLMOutputWithPast, SequenceClassifierOutputWithPast
from microformers_sdk.rotary import RotaryEmbedding, apply_rotary_pos_emb, rope_settings_from_config

from .configuration___MODULE__ import __PREFIX__Config

__all__ = [
    "__PREFIX__Attention",
    "__PREFIX__Config",
    "__PREFIX__DecoderLayer",
    "__PREFIX__ForCausalLM",
    "__PREFIX__ForSequenceClassification",
    "__PREFIX__Model",
    "__PREFIX__PreTrainedModel",
]


# -- attention -------------------------------------------------------------------------------------
class __PREFIX__Attention(nn.Module):
    """Grouped-query self-attention with rotary positions; the kernel is chosen by ``attn_implementation``."""

    def __init__(self, config: __PREFIX__Config, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = float(config.attention_dropout or 0.0)
        hidden, bias = config.hidden_size, config.attention_bias
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None,
        is_causal: bool,
        past_key_values: Cache | None,
        attention_fn: Any,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, q_len, _ = hidden_states.shape
        split = (batch, q_len, -1, self.head_dim)  # -> (batch, heads, q_len, head_dim)
        query = self.q_proj(hidden_states).view(split).transpose(1, 2)
        key = self.k_proj(hidden_states).view(split).transpose(1, 2)
        value = self.v_proj(hidden_states).view(split).transpose(1, 2)
        query, key = apply_rotary_pos_emb(query, key, *rotary)
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)
        dropout = self.attention_dropout if self.training else 0.0
        weights = None
        if output_attentions:  # only the eager kernel hands back the probabilities
            output, weights = eager_attention(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, is_causal=is_causal,
                return_weights=True,
            )  # fmt: skip
        else:
            output = attention_fn(
                query, key, value, attention_mask, scaling=self.scaling, dropout=dropout, is_causal=is_causal
            )
        output = output.transpose(1, 2).reshape(batch, q_len, -1)
        return self.o_proj(output), weights


# -- MLP and decoder layer -------------------------------------------------------------------------
class __PREFIX__DecoderLayer(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``.

    The MLP is the SDK's ``GatedMLP``: ``down_proj(act(gate_proj(x)) * up_proj(x))`` (SwiGLU with ``silu``);
    write your own ``nn.Module`` here where your architecture's differs.
    """

    def __init__(self, config: __PREFIX__Config, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = __PREFIX__Attention(config, layer_idx)
        self.mlp = GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act, bias=config.mlp_bias)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None,
        is_causal: bool,
        past_key_values: Cache | None,
        attention_fn: Any,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.self_attn(
            self.input_layernorm(hidden_states),
            rotary,
            attention_mask,
            is_causal,
            past_key_values,
            attention_fn,
            output_attentions,
        )
        hidden_states = hidden_states + attended
        hidden_states = hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states, weights


# -- model -----------------------------------------------------------------------------------------
class __PREFIX__PreTrainedModel(PreTrainedModel):
    config_class = __PREFIX__Config
    base_model_prefix = "model"
    _no_split_modules: ClassVar[list[str]] = ["__PREFIX__DecoderLayer"]
    supports_gradient_checkpointing = True
    # checkpoints written by older exporters carry the rotary tables; they are recomputed
    _keys_to_ignore_on_load_unexpected: ClassVar[list[str]] = [r"rotary_emb\\.inv_freq"]


class __PREFIX__Model(__PREFIX__PreTrainedModel):
    """The decoder stack without a head; returns ``BaseModelOutputWithPast``."""

    def __init__(self, config: __PREFIX__Config) -> None:
        super().__init__(config)
        pad = config.pad_token_id
        padding_idx = pad if isinstance(pad, int) and 0 <= pad < config.vocab_size else None
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx)
        self.layers = nn.ModuleList(__PREFIX__DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(rope_settings_from_config(config))
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPast | tuple[Any, ...]:
        inputs = prepare_decoder_inputs(  # embeddings, cache, position ids, the config's defaults for the flags
            self,
            self.embed_tokens,
            input_ids=input_ids,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=return_dict,
        )
        hidden_states, cache = inputs.inputs_embeds, inputs.cache
        rotary = self.rotary_emb(inputs.position_ids, dtype=hidden_states.dtype)
        mask, is_causal = build_attention_mask(
            attention_mask, hidden_states.shape[1], inputs.past_length, device=hidden_states.device
        )
        attention_fn = get_attention_function(self.config)
        all_hidden_states: list[torch.Tensor] = []
        all_attentions: list[torch.Tensor] = []
        for layer in self.layers:
            if inputs.output_hidden_states:
                all_hidden_states.append(hidden_states)
            hidden_states, weights = self._call_layer(  # gradient checkpointing applies here when enabled
                layer, hidden_states, rotary, mask, is_causal, cache, attention_fn, inputs.output_attentions
            )
            if inputs.output_attentions:
                all_attentions.append(weights)
        hidden_states = self.norm(hidden_states)
        if inputs.output_hidden_states:
            all_hidden_states.append(hidden_states)
        output = BaseModelOutputWithPast(
            last_hidden_state=hidden_states,
            past_key_values=cache if inputs.use_cache else None,
            hidden_states=tuple(all_hidden_states) if inputs.output_hidden_states else None,
            attentions=tuple(all_attentions) if inputs.output_attentions else None,
        )
        return output if inputs.return_dict else output.to_tuple()


# -- heads -----------------------------------------------------------------------------------------
class __PREFIX__ForCausalLM(__PREFIX__PreTrainedModel):
    """Decoder plus a language-modelling head (``lm_head``, tied to the embeddings when configured)."""

    _tied_weights_keys: ClassVar[dict[str, str]] = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: __PREFIX__Config) -> None:
        super().__init__(config)
        self.model = __PREFIX__Model(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.lm_head = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        labels: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast | tuple[Any, ...]:
        """``logits_to_keep=n`` computes logits for the last ``n`` positions only (0: all); a tensor picks positions."""
        return_dict = self.config.return_dict if return_dict is None else return_dict
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        logits = self.lm_head(keep_logits_positions(outputs.last_hidden_state, logits_to_keep))
        loss = causal_lm_loss(logits, labels, kwargs.get("num_items_in_batch")) if labels is not None else None
        output = CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return output if return_dict else output.to_tuple()


class __PREFIX__ForSequenceClassification(__PREFIX__PreTrainedModel):
    """Decoder plus a linear ``score`` head read at each row's last non-padding token."""

    def __init__(self, config: __PREFIX__Config) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = __PREFIX__Model(config)
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.model.set_input_embeddings(value)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> SequenceClassifierOutputWithPast | tuple[Any, ...]:
        """Logits at each row's last non-padding token; with ``labels``, the loss ``config.problem_type`` asks for."""
        return_dict = self.config.return_dict if return_dict is None else return_dict
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        logits = self.score(outputs.last_hidden_state)
        pooled = pool_last_tokens(logits, input_ids, self.config.pad_token_id, type(self).__name__)
        loss = sequence_classification_loss(pooled, labels, self.config) if labels is not None else None
        output = SequenceClassifierOutputWithPast(
            loss=loss,
            logits=pooled,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
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
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
        "pad_token_id": 0,
        "num_labels": 3,
    }
    model_classes = (__PREFIX__Model, __PREFIX__ForCausalLM, __PREFIX__ForSequenceClassification)
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
    assert set(models) == {"AutoModel", "AutoModelForCausalLM", "AutoModelForSequenceClassification"}
    for ref in models.values():
        assert resolve_ref(ref).config_class is resolve_ref(config_ref)
'''
