"""How llama.cpp GGUF files of GPT-2 map onto this plugin's model (read by microformers-gguf).

llama.cpp keeps GPT-2's fused ``c_attn`` (``attn_qkv``) and its learned positions (``position_embd``), but
stores the ``Conv1D`` weights as ``(out, in)`` matrices where the Hugging Face checkpoint has ``(in, out)``:
:class:`Transpose` undoes that (biases are unchanged). Norms are LayerNorms with biases; no rotary.
The converter always writes ``output.weight`` (a copy of the embeddings).
"""

from __future__ import annotations

from microformers_sdk.gguf import Check, GGUFArchitecture, Meta, Transpose, linear

_BLOCK = "transformer.h.{bid}"

GPT2 = GGUFArchitecture(
    gguf_name="gpt2",
    model_type="gpt2",
    architectures=("GPT2LMHeadModel",),
    config={
        "n_embd": Meta("embedding_length"),
        "n_layer": Meta("block_count"),
        "n_head": Meta("attention.head_count"),
        "n_positions": Meta("context_length", default=1024),
        "n_inner": Meta("feed_forward_length", default=None),
        "layer_norm_epsilon": Meta("attention.layer_norm_epsilon", float, default=1e-5),
    },
    tensors={
        "token_embd.weight": "transformer.wte.weight",
        "position_embd.weight": "transformer.wpe.weight",
        **linear("output_norm", "transformer.ln_f"),
        "output.weight": "lm_head.weight",
        **linear("blk.{bid}.attn_norm", f"{_BLOCK}.ln_1"),
        **linear("blk.{bid}.attn_qkv", f"{_BLOCK}.attn.c_attn", Transpose()),
        **linear("blk.{bid}.attn_output", f"{_BLOCK}.attn.c_proj", Transpose()),
        **linear("blk.{bid}.ffn_norm", f"{_BLOCK}.ln_2"),
        **linear("blk.{bid}.ffn_up", f"{_BLOCK}.mlp.c_fc", Transpose()),
        **linear("blk.{bid}.ffn_down", f"{_BLOCK}.mlp.c_proj", Transpose()),
    },
    rope=False,
    checks=(
        Check("token_embd.weight", 1, ("n_embd",)),
        Check("blk.0.attn_qkv.weight", 1, ("n_embd",)),
        Check("blk.0.ffn_up.weight", 0, ("n_inner",)),
        Check("position_embd.weight", 0, ("n_positions",)),
    ),
)
