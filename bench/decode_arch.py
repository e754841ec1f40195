"""Greedy decode speed of a new decoder architecture at SmolLM2 size, next to Llama's, vs the reference, in one run.

    .venv/bin/python bench/decode_arch.py [--arch phi3] [--new-tokens 64] [--repeats 3] [--longrope] [--compile]

Two randomly initialised float32 models of SmolLM2-135M's shape (hidden 576, 30 layers, 9 query / 3
key-value heads, intermediate 1536, vocabulary 49152, tied embeddings): a Llama and one of the new
architectures (``--arch``, default ``phi3``; ``--longrope`` gives the Phi-3 LongRoPE scaling with
random factors, its short set in use at these lengths). The reference builds and saves each folder
once (under the bench directory); both implementations load the same files. Each measurement is a
batch-1 ``generate(..., max_new_tokens=N, min_new_tokens=N, do_sample=False)`` (prompt included in
the time), ``torch.set_num_threads(2)``; all variants are interleaved and repeated, medians printed.
The ratio column is ours / reference for each architecture; the question it answers is whether
the new architecture stays as far ahead of the reference as Llama does. New tokens of ours are
compared with the reference's. ``--compile`` adds ours with ``compile_decode_step()`` and a
``StaticCache`` (its compile time is excluded: the first call is a warm-up). ``--cpu-time`` divides by
the process's CPU time instead of wall time (with ``MICROFORMERS_BENCH_THREADS=1``, what a shared,
overloaded machine disturbs least).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

# The SmolLM2 shape in each architecture's config spelling (Llama's is _common.SMOLLM2_SHAPE).
ARCH_CONFIGS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "phi3": (
        "Phi3Config",
        "Phi3ForCausalLM",
        {
            **{k: v for k, v in common.SMOLLM2_SHAPE.items() if k != "head_dim"},
            "original_max_position_embeddings": common.SMOLLM2_SHAPE["max_position_embeddings"],
        },
    ),
}


def arch_folder(arch: str, longrope: bool) -> Path:
    """A float32 safetensors folder of a random ``arch`` model of SmolLM2's shape, made once by the reference."""
    folder = common.BENCH_DIR / f"random-{arch}{'-longrope' if longrope else ''}-135m-f32"
    if (folder / "model.safetensors").is_file() and (folder / "config.json").is_file():
        return folder
    import torch
    import transformers

    config_name, model_name, fields = ARCH_CONFIGS[arch]
    fields = dict(fields)
    if longrope:
        rotary_half = fields["hidden_size"] // fields["num_attention_heads"] // 2
        draw = random.Random(0)
        fields["max_position_embeddings"] = 4 * fields["original_max_position_embeddings"]
        fields["rope_scaling"] = {
            "type": "longrope",
            "short_factor": [1.0 + draw.random() for _ in range(rotary_half)],
            "long_factor": [1.0 + 8 * draw.random() for _ in range(rotary_half)],
        }
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(getattr(transformers, config_name)(**fields)).to(torch.float32)
    common.BENCH_DIR.mkdir(parents=True, exist_ok=True)
    staging = folder.with_name(folder.name + ".partial")
    model.save_pretrained(staging)
    staging.rename(folder)
    return folder


def reference_generate(model: Any, ids: Any, mask: Any, new_tokens: int) -> Any:
    return model.generate(
        ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=2
    )


def our_generate(model: Any, ids: Any, mask: Any, new_tokens: int, static: bool = False) -> Any:
    from microformers_sdk.cache import StaticCache

    extra = {"past_key_values": StaticCache(max_cache_len=ids.shape[1] + new_tokens)} if static else {}
    return model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=2,
        **extra,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", choices=sorted(ARCH_CONFIGS), default="phi3")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--longrope", action="store_true", help="Phi-3 LongRoPE scaling (random factors)")
    parser.add_argument("--compile", action="store_true", help="add ours with compile_decode_step + StaticCache")
    parser.add_argument("--cpu-time", action="store_true", help="tokens per CPU second instead of per wall second")
    args = parser.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter

    def timed(run: Any) -> tuple[float, Any]:
        start = clock()
        result = run(ids, mask)
        return clock() - start, result

    import torch

    common.set_threads()
    n = args.new_tokens
    folders = {"llama": common.model_folder("random"), args.arch: arch_folder(args.arch, args.longrope)}
    variants: dict[tuple[str, str], Any] = {}
    for arch, folder in folders.items():
        reference, ours = common.load_reference(folder), common.load_ours(folder)
        variants[(arch, "reference")] = lambda ids, mask, m=reference: reference_generate(m, ids, mask, n)
        variants[(arch, "eager")] = lambda ids, mask, m=ours: our_generate(m, ids, mask, n)
        if args.compile:
            ours.compile_decode_step()
            variants[(arch, "compiled")] = lambda ids, mask, m=ours: our_generate(m, ids, mask, n, static=True)

    ids, mask = common.prompts(folders["llama"], 1)
    notes = [f"load average at start: {common.load_average()}"]
    outputs: dict[tuple[str, str], Any] = {}
    for key, run in variants.items():  # warm-up (and compilation)
        _, outputs[key] = timed(run)
    times: dict[tuple[str, str], list[float]] = {key: [] for key in variants}
    for repeat in range(args.repeats):
        print(f"pass {repeat + 1}/{args.repeats} (load average {common.load_average()})", file=sys.stderr, flush=True)
        for key, run in variants.items():
            seconds, outputs[key] = timed(run)
            times[key].append(seconds)
    speed = {key: n / common.median(t) for key, t in times.items()}

    rows: list[tuple[str, str, str, str]] = []
    payload: dict[str, Any] = {
        "arch": args.arch,
        "longrope": args.longrope,
        "new_tokens": n,
        "prompt": ids.shape[1],
        "cpu_time": args.cpu_time,
    }
    for arch in folders:
        want = outputs[(arch, "reference")][:, ids.shape[1] :]
        for kind in ("eager", "compiled"):
            if (arch, kind) not in speed:
                continue
            same = torch.equal(outputs[(arch, kind)][:, ids.shape[1] :], want)
            ratio = speed[(arch, kind)] / speed[(arch, "reference")]
            rows.append(
                (
                    f"{arch} decode tokens/s, batch 1 ({kind})",
                    f"{speed[(arch, kind)]:.1f}",
                    f"{speed[(arch, 'reference')]:.1f}",
                    f"{ratio:.2f}x" + ("" if same else " TOKENS DIFFER"),
                )
            )
            payload[f"{arch}-{kind}"] = {
                "tokens_per_s": speed[(arch, kind)],
                "reference_tokens_per_s": speed[(arch, "reference")],
                "ratio": ratio,
                "tokens_identical": same,
            }
    clock_name = "CPU" if args.cpu_time else "wall"
    notes.append(
        f"load average at end: {common.load_average()}; medians of {args.repeats} interleaved runs; "
        f"tokens per {clock_name} second, {torch.get_num_threads()} thread(s)"
    )
    title = f"greedy decode, random SmolLM2-shaped {args.arch}{' (LongRoPE)' if args.longrope else ''} vs llama"
    common.print_table(f"{title}, float32, {n} new tokens, prompt {ids.shape[1]}", rows, "\n".join(notes))
    common.write_json(f"decode_{args.arch}", payload)


if __name__ == "__main__":
    main()
