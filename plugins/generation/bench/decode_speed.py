"""Greedy and beam-search decode speed, microformers vs the reference, on one random Llama in one run.

    .venv/bin/python plugins/generation/bench/decode_speed.py [--layers 4] [--hidden 256] [--new 64]

Prints tokens/s for both and the ratio; also checks that the tokens are identical.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch


def timed(fn, repeats: int) -> tuple[float, torch.Tensor]:
    fn()  # warm-up
    best = float("inf")
    out = None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import transformers

    import microformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 3,
        num_hidden_layers=args.layers,
        num_attention_heads=max(1, args.hidden // 64),
        num_key_value_heads=max(1, args.hidden // 128),
        max_position_embeddings=2048,
        eos_token_id=None,
        pad_token_id=0,
    )
    folder = tempfile.mkdtemp()
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    reference = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
    ours = microformers.AutoModelForCausalLM.from_pretrained(folder)
    ids = torch.randint(3, args.vocab, (args.batch, 16))
    for label, kwargs in (("greedy", {}), ("beam4", {"num_beams": 4})):
        gen = {"input_ids": ids, "max_new_tokens": args.new, "min_new_tokens": args.new, **kwargs}
        ref_time, ref_out = timed(lambda gen=gen: reference.generate(**gen), args.repeats)
        our_time, our_out = timed(lambda gen=gen: ours.generate(**gen), args.repeats)
        tokens = args.new * args.batch
        print(
            f"{label:7s} reference {tokens / ref_time:8.1f} tok/s   microformers {tokens / our_time:8.1f} tok/s   "
            f"ratio {ref_time / our_time:5.2f}x   identical={torch.equal(ref_out, our_out)}"
        )


if __name__ == "__main__":
    main()
