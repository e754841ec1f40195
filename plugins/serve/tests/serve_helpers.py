"""Shared by the serve tests: a tiny random Llama with a real BPE tokenizer and chat template, and
``microformers serve`` started in a subprocess on a free port."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

import microformers
from microformers_sdk.testing import assert_similar_generation

REPO = Path(__file__).resolve().parents[3]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{'<|im_start|>assistant\\n'}}{% endif %}"
)
CONTEXT = 1024


def build_tiny_llama(folder: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder.mkdir(parents=True, exist_ok=True)
    texts = [p.read_text(encoding="utf-8") for p in sorted((REPO / "tests" / "corpus").glob("*.md"))]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "chat_template": CHAT_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    torch.manual_seed(0)
    model_config = microformers.AutoConfig.for_model(
        "llama", vocab_size=tokenizer.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT, eos_token_id=2,
        bos_token_id=1,
    )  # fmt: skip
    model = microformers.AutoModelForCausalLM.from_config(model_config)
    with torch.no_grad():  # a wide spread: well-separated logits, so greedy choices are clear-cut
        for param in model.parameters():
            param.normal_(0.0, 0.2)
    model.save_pretrained(folder)
    return folder


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run the in-process reference on one thread (see ServerProcess), restoring the setting after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def scored_greedy(model: Any, prompt: list[int], new: int) -> tuple[list[int], list[torch.Tensor]]:
    """What ``generate`` makes alone (greedy, one thread) after ``prompt``: the new token ids, and per step the
    ``[1, vocab]`` scores that chose them."""
    with one_thread():
        out = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=new,
            do_sample=False,
            return_dict_in_generate=True,
            output_scores=True,
        )
    return out.sequences[0, len(prompt) :].tolist(), list(out.scores)


def assert_similar_tokens(ours: list[int], expected: list[int], scores: list[torch.Tensor]) -> None:
    """The engine's tokens (a batch of other rows, a ragged cache: other shapes) against ``generate`` alone: the
    same up to a near tie of ``scores`` (:func:`scored_greedy`)."""
    assert_similar_generation([ours], [expected], scores)


def assert_similar_text(text: str, expected: list[int], scores: list[torch.Tensor], tokenizer: Any) -> None:
    """An answer the server sent as text against the tokens ``generate`` chose alone (:func:`scored_greedy`): the
    same text, or the same up to a token where a token the answer goes on with instead scored within 1e-4 (or 1e-4
    relative) of the one chosen alone, a near tie the engine's other shapes may break the other way. After it the
    two may differ in anything."""
    if text == tokenizer.decode(expected, skip_special_tokens=True):
        return

    def shown(ids: list[int]) -> str:  # the text of ids, without a character still waiting for its next bytes
        return tokenizer.decode(ids, skip_special_tokens=True).rstrip("\ufffd")

    k = 0
    while k < len(expected) and text.startswith(shown(expected[: k + 1])):
        k += 1
    assert k < len(expected), f"{text!r} goes on past what generate made alone: {shown(expected)!r}"
    step = scores[k][0].float()
    chosen = float(step[expected[k]])
    others = [t for t in range(step.shape[-1]) if t != expected[k] and text.startswith(shown([*expected[:k], t]))]
    gap = min((abs(float(step[t]) - chosen) for t in others), default=float("inf"))
    assert gap <= max(1e-4, 1e-4 * abs(chosen)), (
        f"{text!r} differs from generate alone ({shown(expected)!r}) after {k} tokens, where no token it goes on with "
        f"was a near tie of the one chosen alone (closest gap {gap:.3g})"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """``microformers serve`` in a subprocess, on a free port."""

    def __init__(self, folder: Path, *flags: str) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        # One thread: tiny models gain nothing from two, and on a loaded machine OpenMP threads spinning at
        # barriers make every step many times slower.
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "microformers.cli", "serve", str(folder), "--port", str(self.port), *flags]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.wait_ready()

    def wait_ready(self, timeout: float = 120) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: {self.process.stdout.read() if self.process.stdout else ''}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the server did not start")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


class Collector:
    """Records a request's events and signals when it is done."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.done = threading.Event()

    def __call__(self, event: Any) -> None:
        self.events.append(event)
        if event.kind != "delta":
            self.done.set()

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events if e.kind == "delta")

    @property
    def final(self) -> Any:
        return self.events[-1]
