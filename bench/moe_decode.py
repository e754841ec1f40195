"""Greedy decode speed of the mixture-of-experts decoders (Mixtral, Qwen2-MoE) vs the reference, in one run.

    .venv/bin/python bench/moe_decode.py [--arch mixtral qwen2_moe] [--batch 1 4] [--new-tokens 48] [--repeats 3]

Small random float32 models (hidden 256, 4 layers, 8 experts of width 512, top-2; Qwen2-MoE adds a
shared expert of width 1024), built and saved once per run by the reference, loaded by both
implementations from the same files. Each measurement is ``generate(ids, attention_mask=mask,
max_new_tokens=N, min_new_tokens=N, do_sample=False)`` (prompt included), ``torch.set_num_threads(2)``
(``MICROFORMERS_BENCH_THREADS`` overrides); variants are interleaved and repeated, medians printed, ratio
= ours / reference tokens per second. The new tokens of ours are compared with the reference's.
The reference runs its default experts implementation (``grouped_mm`` in transformers 5.x); ours runs
each routed expert on its own tokens (``microformers_sdk.moe.run_experts``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

SHAPE: dict[str, Any] = {
    "vocab_size": 4000,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 1024,
    "num_experts_per_tok": 2,
    "pad_token_id": 0,
}
ARCHS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {**SHAPE, "num_local_experts": 8}),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        {**SHAPE, "num_experts": 8, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 1024},
    ),
}


def build(arch: str, root: Path) -> Path:
    import torch
    import transformers

    config_name, model_name, kwargs = ARCHS[arch]
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(getattr(transformers, config_name)(**kwargs))
    folder = root / arch
    model.save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", nargs="+", default=list(ARCHS), choices=list(ARCHS))
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch

    common.set_threads()
    n = args.new_tokens
    settings = {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False, "pad_token_id": 0}
    rows: list[tuple[str, str, str, str]] = []
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as root:
        for arch in args.arch:
            folder = build(arch, Path(root))
            ours, reference = common.load_ours(folder), common.load_reference(folder)
            for batch in args.batch:
                generator = torch.Generator().manual_seed(batch)
                ids = torch.randint(1, SHAPE["vocab_size"], (batch, 24), generator=generator)
                mask = torch.ones_like(ids)
                mask[1:, :4] = 0  # rows after the first are left-padded
                ids = ids.masked_fill(mask == 0, 0)
                times: dict[str, list[float]] = {"ours": [], "reference": []}
                outputs: dict[str, Any] = {}
                with torch.no_grad():
                    for _ in range(args.repeats):
                        for name, model in (("ours", ours), ("reference", reference)):
                            seconds, outputs[name] = common.timed(
                                lambda m=model, i=ids, a=mask: m.generate(i, attention_mask=a, **settings)
                            )
                            times[name].append(seconds)
                same = torch.equal(outputs["ours"], outputs["reference"])
                speed = {name: batch * n / common.median(values) for name, values in times.items()}
                ratio = speed["ours"] / speed["reference"]
                rows.append(
                    (
                        f"{arch} batch {batch}{'' if same else ' (TOKENS DIFFER)'}",
                        f"{speed['ours']:.1f} tok/s",
                        f"{speed['reference']:.1f} tok/s",
                        f"{ratio:.2f}x",
                    )
                )
                results[f"{arch}-batch{batch}"] = {**speed, "ratio": ratio, "same_tokens": same}
    common.print_table(
        f"MoE greedy decode, {n} new tokens, float32, {torch.get_num_threads()} threads",
        rows,
        note=f"load average: {common.load_average()}",
    )
    common.write_json("moe_decode", results)


if __name__ == "__main__":
    main()
