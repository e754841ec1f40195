"""How a model plugin describes llama.cpp GGUF files of its architecture.

A GGUF file names its model family in ``general.architecture`` and stores the config as metadata keys
(``qwen3.embedding_length``) and the weights under llama.cpp's tensor names (``blk.0.attn_q.weight``),
sometimes laid out differently from the Hugging Face checkpoint (rows interleaved, weights transposed,
norms offset by one, experts stacked). A model plugin says how its files map with one
:class:`GGUFArchitecture` value and one registration; ``microformers-gguf`` reads it when it meets such a
file, so the GGUF plugin knows no architecture itself::

    # microformers_myarch/plugin.py (no import of microformers-gguf, nothing imported at discovery)
    @hookimpl
    def register_gguf_architectures(register):
        register("myarch", "microformers_myarch.gguf_mapping:MYARCH")

    # microformers_myarch/gguf_mapping.py
    MYARCH = GGUFArchitecture(
        gguf_name="myarch",
        model_type="myarch",
        architectures=("MyArchForCausalLM",),
        config={"hidden_size": Meta("embedding_length"), "hidden_act": "silu", ...},
        tensors={"token_embd.weight": "model.embed_tokens.weight",
                 **linear("blk.{bid}.attn_q", "model.layers.{bid}.self_attn.q_proj", Rotary("num_attention_heads"))},
    )

This module imports neither torch nor ``gguf``; the transforms import torch when they run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


class _Optional:
    def __repr__(self) -> str:
        return "OPTIONAL"


REQUIRED: Any = _Required()
"""``Meta(default=REQUIRED)``: a file without the key is refused, naming the key."""
OPTIONAL: Any = _Optional()
"""``Meta(default=OPTIONAL)``: a file without the key leaves the config field unset (the config class default)."""


@attrs.frozen
class Field:
    """A default taken from another config field already read (``num_key_value_heads`` defaults to the head count)."""

    name: str


@attrs.frozen
class Quotient:
    """A default computed from two fields already read (``head_dim`` = ``hidden_size // num_attention_heads``)."""

    numerator: str
    denominator: str


@attrs.frozen
class Meta:
    """A config field read from one GGUF metadata key.

    ``key`` is relative to ``"<gguf_name>."`` (``"embedding_length"``) unless it starts with ``general.``
    or ``tokenizer.``; a tuple gives alternatives, the first present wins. ``kind`` is ``int``, ``float``,
    ``bool``, ``str`` or ``list``; an integer list where one integer is wanted (a per-layer value that
    is the same for all layers) gives its maximum. ``default`` is a value, a :class:`Field`,
    ``REQUIRED`` or ``OPTIONAL``.
    """

    key: str | tuple[str, ...]
    kind: type = int
    default: Any = REQUIRED

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.key,) if isinstance(self.key, str) else tuple(self.key)


@attrs.frozen
class Check:
    """A declared size checked against the tensor table before anything is built.

    ``tensor``'s PyTorch dimension ``dim`` must equal the product of the config ``fields`` (integers
    are constant factors; ``head_dim`` falls back to ``hidden_size // num_attention_heads``). Absent
    tensors are not checked.
    """

    tensor: str
    dim: int
    fields: tuple[str | int, ...]


# -- tensor transforms ---------------------------------------------------------------------------
# Each undoes one llama.cpp layout change. ``apply(tensor, config)`` gets the dequantised tensor
# (PyTorch shape) and the config dict built from the same file; ``shape(shape, config)`` the shape after.


class Transform(Protocol):
    def apply(self, tensor: Any, config: Mapping[str, Any]) -> Any: ...

    def shape(self, shape: tuple[int, ...], config: Mapping[str, Any]) -> tuple[int, ...]: ...


@attrs.frozen
class Rotary:
    """Undo llama.cpp's Q/K row interleave: each head's two rotary halves are stored as row pairs.

    ``heads`` names the config field with the number of heads the rows split into
    (``num_attention_heads`` for Q, ``num_key_value_heads`` for K). A pure row permutation, so a loader
    may apply :meth:`rows` to quantised rows before dequantising.
    """

    heads: str

    def rows(self, rows: int, config: Mapping[str, Any]) -> Any:
        """``hf_rows = gguf_rows[perm]``."""
        import torch

        n_heads = int(config[self.heads])
        if n_heads <= 0 or rows % (2 * n_heads):
            raise ValueError(f"cannot split {rows} attention rows into {n_heads} heads of rotary pairs ({self.heads})")
        half = rows // n_heads // 2
        return torch.arange(rows).view(n_heads, half, 2).transpose(1, 2).reshape(-1)

    def apply(self, tensor: Any, config: Mapping[str, Any]) -> Any:
        return tensor[self.rows(tensor.shape[0], config)]

    def shape(self, shape: tuple[int, ...], config: Mapping[str, Any]) -> tuple[int, ...]:
        return shape


@attrs.frozen
class Transpose:
    """Swap the two dimensions of a matrix (GPT-2's ``Conv1D`` stores ``(in, out)``; llama.cpp stores ``(out, in)``)."""

    def apply(self, tensor: Any, config: Mapping[str, Any]) -> Any:
        return tensor.t().contiguous()

    def shape(self, shape: tuple[int, ...], config: Mapping[str, Any]) -> tuple[int, ...]:
        return tuple(reversed(shape))


@attrs.frozen
class Shift:
    """Add a constant, in float32 (Gemma's ``(1 + w)`` norms are stored by llama.cpp as ``w + 1``: ``Shift(-1.0)``)."""

    amount: float

    def apply(self, tensor: Any, config: Mapping[str, Any]) -> Any:
        return (tensor.float() + self.amount).to(tensor.dtype)

    def shape(self, shape: tuple[int, ...], config: Mapping[str, Any]) -> tuple[int, ...]:
        return shape


@attrs.frozen
class Reshape:
    """Give the tensor the Hugging Face shape when llama.cpp squeezed a dimension (``(1, h)`` stored as ``(h,)``).

    ``shape`` entries are integers or config field names; ``-1`` once for the rest.
    """

    shape_: tuple[int | str, ...] = attrs.field(alias="shape")

    def _dims(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        return tuple(int(config[d]) if isinstance(d, str) else d for d in self.shape_)

    def apply(self, tensor: Any, config: Mapping[str, Any]) -> Any:
        return tensor.reshape(self._dims(config))

    def shape(self, shape: tuple[int, ...], config: Mapping[str, Any]) -> tuple[int, ...]:
        dims = self._dims(config)
        if -1 in dims:
            total = 1
            for d in shape:
                total *= d
            known = 1
            for d in dims:
                known *= d if d != -1 else 1
            dims = tuple(total // known if d == -1 else d for d in dims)
        return dims


# -- tensor targets ------------------------------------------------------------------------------


@attrs.frozen
class Target:
    """A GGUF tensor that becomes one Hugging Face tensor after ``transforms`` (applied in order)."""

    name: str
    transforms: tuple[Any, ...] = ()


@attrs.frozen
class Experts:
    """A stacked ``(experts, ...)`` GGUF tensor split into one Hugging Face tensor per expert.

    ``name`` has ``{expert}`` (and ``{bid}``); ``transforms`` apply to each expert's slice.
    """

    name: str
    transforms: tuple[Any, ...] = ()


@attrs.frozen
class Part:
    """One of ``count`` GGUF tensors concatenated (in ``index`` order along ``dim``) into one Hugging Face tensor.

    Used where llama.cpp stores separately what the model keeps fused (``attn_q``/``attn_k``/``attn_v``
    into ``qkv_proj``; stacked ``ffn_gate_exps``/``ffn_up_exps`` into ``experts.gate_up_proj``).
    """

    name: str
    index: int
    count: int
    dim: int = 0
    transforms: tuple[Any, ...] = ()


def linear(
    gguf: str, hf: str, *transforms: Any, params: tuple[str, ...] = ("weight", "bias")
) -> dict[str, str | Target]:
    """``{gguf.weight: hf.weight, gguf.bias: hf.bias}``, each with ``transforms`` (``Transpose`` only on weights)."""
    out: dict[str, str | Target] = {}
    for param in params:
        kept = tuple(t for t in transforms if not (param != "weight" and isinstance(t, Transpose)))
        out[f"{gguf}.{param}"] = Target(f"{hf}.{param}", kept) if kept else f"{hf}.{param}"
    return out


# -- the architecture ------------------------------------------------------------------------------


class GGUFView(Protocol):
    """What ``adjust_config`` is given: the file's metadata, its tensor table, and tensor values on request."""

    path: Any
    metadata: Mapping[str, Any]
    shapes: Mapping[str, tuple[int, ...]]  # GGUF tensor name -> PyTorch shape

    def key(self, name: str) -> str:
        """``"<gguf_name>.<name>"``."""
        ...

    def read(self, tensor: str) -> Any:
        """The tensor dequantised to a float32 ``torch.Tensor`` (PyTorch shape)."""
        ...


@attrs.frozen
class GGUFArchitecture:
    """How files with ``general.architecture == gguf_name`` map onto the Hugging Face ``model_type``.

    Config: ``config`` maps each Hugging Face field to a :class:`Meta` (read from the file) or a constant.
    The GGUF plugin adds ``model_type``, ``architectures``, ``vocab_size`` (``<arch>.vocab_size``, else the
    vocabulary, else the rows of ``token_embedding``), ``tie_word_embeddings`` (``tied_output`` absent), the special
    token ids, and, when ``rope`` is true, ``rope_parameters``/``rope_scaling`` from ``<arch>.rope.*``
    (theta from the ``rope_theta`` field). ``flags`` sets a field to whether a tensor is present
    (``{"attention_bias": "blk.0.attn_q.bias"}``). ``adjust_config`` (a function or ``"module:function"``)
    runs last, ``adjust_config(config: dict, gguf: GGUFView) -> None``, for what data cannot say
    (per-layer patterns, factors stored as tensors). ``checks`` compare declared sizes with tensors.

    Tensors: ``tensors`` maps GGUF names, with ``{bid}`` standing for the block number, to a Hugging Face
    name (same ``{bid}``), a :class:`Target`, :class:`Experts` or :class:`Part`; ``{expert}`` in a GGUF name
    (``blk.{bid}.ffn_gate.{expert}.weight``) matches one-tensor-per-expert files. Tensors matching a
    regular expression in ``derived`` are ones the model rebuilds itself (rotary tables) and are skipped
    silently; any other unmapped tensor is skipped with a warning.

    Tokenizer: ``tokenizer`` picks how a SentencePiece (``tokenizer.ggml.model == "llama"``) vocabulary
    is rebuilt: ``"metaspace"`` (Llama: a ``Metaspace`` pre-tokenizer adds the prefix space),
    ``"normalizer"`` (Phi-3: a normalizer prepends ``▁`` and replaces spaces, no pre-tokenizer) or
    ``"gemma"`` (no prefix space, spaces become ``▁``; whitespace-only pieces respelled with ``▁``; merges
    ordered by vocabulary position). Byte-level (``"gpt2"``) vocabularies need no choice.
    """

    gguf_name: str
    model_type: str
    architectures: tuple[str, ...]
    config: Mapping[str, Any]
    tensors: Mapping[str, Any]
    flags: Mapping[str, str] = attrs.field(factory=dict)
    rope: bool = True
    tied_output: str = "output.weight"
    token_embedding: str = "token_embd.weight"
    derived: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()
    tokenizer: str = "metaspace"
    adjust_config: Callable[..., None] | str | None = None

    def __attrs_post_init__(self) -> None:
        if self.tokenizer not in ("metaspace", "normalizer", "gemma"):
            raise ValueError(
                f"GGUFArchitecture({self.gguf_name!r}).tokenizer={self.tokenizer!r}: use 'metaspace', "
                "'normalizer' or 'gemma'"
            )
        for name, target in self.tensors.items():
            if not isinstance(target, (str, Target, Experts, Part)):
                raise TypeError(
                    f"GGUFArchitecture({self.gguf_name!r}).tensors[{name!r}] is {target!r}: use a name, "
                    "Target, Experts or Part"
                )


# -- the llama family's common parts, for plugins mapping llama-like decoders -----------------------

DECODER_CONFIG: dict[str, Any] = {
    "hidden_size": Meta("embedding_length"),
    "intermediate_size": Meta("feed_forward_length"),
    "num_hidden_layers": Meta("block_count"),
    "num_attention_heads": Meta("attention.head_count"),
    "num_key_value_heads": Meta("attention.head_count_kv", default=Field("num_attention_heads")),
    "max_position_embeddings": Meta("context_length", default=2048),
    "rms_norm_eps": Meta("attention.layer_norm_rms_epsilon", float, default=1e-6),
    "rope_theta": Meta("rope.freq_base", float, default=10000.0),
    "hidden_act": "silu",
}
"""Config fields every llama-like GGUF states the same way (``hidden_act`` is SiLU)."""

DECODER_CHECKS: tuple[Check, ...] = (
    Check("token_embd.weight", 1, ("hidden_size",)),
    Check("blk.0.ffn_up.weight", 0, ("intermediate_size",)),
    Check("blk.0.attn_q.weight", 0, ("num_attention_heads", "head_dim")),
    Check("blk.0.attn_k.weight", 0, ("num_key_value_heads", "head_dim")),
)

ROTARY_TABLES: tuple[str, ...] = (r"rope_freqs\.weight", r"blk\.\d+\.attn_rot_embd(\.weight)?")
"""Tensors llama.cpp stores that a Hugging Face model rebuilds itself (rotary frequencies)."""


def decoder_tensors(*, q: Any = (), k: Any = (), norm: Any = ()) -> dict[str, Any]:
    """The llama-like tensor names: embeddings, norms, q/k/v/o (with biases), gated MLP, LM head.

    ``q``/``k`` are transforms for the query/key projections (``Rotary`` for llama), ``norm`` for every
    norm weight (``Shift(-1.0)`` where llama.cpp stores ``1 + w``).
    """

    def norm_target(hf: str) -> Any:
        return Target(hf, tuple(norm)) if norm else hf

    block = "model.layers.{bid}"
    return {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": norm_target("model.norm.weight"),
        "output.weight": "lm_head.weight",
        "blk.{bid}.attn_norm.weight": norm_target(f"{block}.input_layernorm.weight"),
        "blk.{bid}.ffn_norm.weight": norm_target(f"{block}.post_attention_layernorm.weight"),
        **linear("blk.{bid}.attn_q", f"{block}.self_attn.q_proj", *q),
        **linear("blk.{bid}.attn_k", f"{block}.self_attn.k_proj", *k),
        **linear("blk.{bid}.attn_v", f"{block}.self_attn.v_proj"),
        **linear("blk.{bid}.attn_output", f"{block}.self_attn.o_proj"),
        **linear("blk.{bid}.ffn_gate", f"{block}.mlp.gate_proj", params=("weight",)),
        **linear("blk.{bid}.ffn_up", f"{block}.mlp.up_proj", params=("weight",)),
        **linear("blk.{bid}.ffn_down", f"{block}.mlp.down_proj", params=("weight",)),
    }
