"""Tiny models and datasets for the trainer tests (hidden size 16, 2 layers: milliseconds per step)."""

from __future__ import annotations

from typing import Any

import torch

VOCAB = 40


def tiny_gpt2(**overrides: Any) -> Any:
    from microformers_gpt2.configuration_gpt2 import GPT2Config
    from microformers_gpt2.modeling_gpt2 import GPT2LMHeadModel

    torch.manual_seed(0)
    config = {"vocab_size": VOCAB, "n_embd": 16, "n_layer": 2, "n_head": 2, "n_positions": 16, **overrides}
    return GPT2LMHeadModel(GPT2Config(**config))


def tiny_bert_classifier(**overrides: Any) -> Any:
    from microformers_bert.configuration_bert import BertConfig
    from microformers_bert.modeling_bert import BertForSequenceClassification

    torch.manual_seed(0)
    config = {
        "vocab_size": VOCAB,
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "max_position_embeddings": 16,
        "num_labels": 3,
        **overrides,
    }
    return BertForSequenceClassification(BertConfig(**config))


def lm_rows(n: int, length: int = 8, seed: int = 0) -> list[dict[str, list[int]]]:
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(1, VOCAB, (length,), generator=g).tolist() for _ in range(n)]
    return [{"input_ids": r, "labels": list(r)} for r in rows]


def cls_rows(n: int, length: int = 6, seed: int = 0) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(1, VOCAB, (length,), generator=g).tolist(), "labels": i % 3} for i in range(n)]


def tiny_llama(**overrides: Any) -> Any:
    from microformers_llama.configuration_llama import LlamaConfig
    from microformers_llama.modeling_llama import LlamaForCausalLM

    torch.manual_seed(0)
    config = {
        "vocab_size": VOCAB,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 32,
        **overrides,
    }
    return LlamaForCausalLM(LlamaConfig(**config))


# -- a tiny encoder-decoder (T5) and a word-level tokenizer for the Seq2SeqTrainer tests ------------------
SEQ2SEQ_WORDS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()


def write_t5_word_tokenizer(folder: Any) -> int:
    """T5's special tokens (``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2) and :data:`SEQ2SEQ_WORDS`, as ``tokenizer.json``."""
    import json
    from pathlib import Path

    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    folder = Path(folder)
    specials = ["<pad>", "</s>", "<unk>"]
    vocab = {token: i for i, token in enumerate([*specials, *SEQ2SEQ_WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(specials)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "pad_token": "<pad>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return len(vocab)


def tiny_t5(vocab_size: int = 3 + len(SEQ2SEQ_WORDS), **overrides: Any) -> Any:
    """A 2-layer T5 (width 32) built with microformers-t5."""
    import microformers

    torch.manual_seed(0)
    config = {
        "vocab_size": vocab_size,
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 64,
        "num_layers": 2,
        "num_heads": 4,
        "relative_attention_num_buckets": 8,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0,
        **overrides,
    }
    return microformers.AutoModelForSeq2SeqLM.from_config(microformers.AutoConfig.for_model("t5", **config))


# -- running a script under torchrun (the DDP and FSDP tests) ---------------------------------------------
def start_rank_diagnostics(output_dir: str) -> None:
    """In a torchrun worker: a fatal signal prints every Python thread's stack to ``<output_dir>/fatal_rank<N>.log``,
    so a native crash says where the rank was."""
    import faulthandler
    import os
    from pathlib import Path

    Path(output_dir).mkdir(parents=True, exist_ok=True)
    log = open(Path(output_dir) / f"fatal_rank{os.environ.get('RANK', '0')}.log", "w")  # open until exit
    faulthandler.enable(file=log, all_threads=True)


def finish_distributed_script() -> None:
    """End a torchrun worker once its results are written: destroy the process group, flush, and leave without
    interpreter finalisation. Gloo's native worker threads can still be torn down at finalisation, where a
    rare race aborts the process ("terminate called without an active exception") after all work is done."""
    import os
    import sys

    torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_torchrun(script: Any, output_dir: Any, *args: str, processes: int = 2) -> None:
    """``torchrun --standalone --nproc_per_node <processes> <script> <output_dir> <args>`` on one thread a process;
    asserts it succeeded, with each rank's fatal-signal stacks in the message when it did not.

    A run whose worker died of a signal (a native crash in the collective library, never a Python error or a
    failed check) is started once more from scratch; a second failure fails the test with both runs' logs."""
    launcher = ["--standalone", "--nproc_per_node", str(processes)]
    _run_launcher([_venv_command("torchrun"), *launcher, str(script), str(output_dir), *args], output_dir)


def run_accelerate_launch(script: Any, output_dir: Any, *args: str, processes: int = 2) -> None:
    """``accelerate launch --multi_gpu --num_processes <processes> <script> <output_dir> <args>`` on a free port,
    one thread a process, checked and retried as :func:`run_torchrun`.

    ``--multi_gpu`` is accelerate's torch.distributed launcher (what it runs for every multi-process launch on one
    machine); the script's ``Accelerator(cpu=True)`` keeps it on CPU with gloo. ``--cpu --num_processes N`` would
    not start N processes: accelerate starts several CPU processes only through ``mpirun`` (``--mpirun_hostfile``)."""
    launcher = ["launch", "--multi_gpu", "--num_processes", str(processes), "--num_machines", "1"]
    launcher += ["--main_process_port", "0", "--mixed_precision", "no", "--dynamo_backend", "no"]
    cmd = [_venv_command("accelerate"), *launcher, str(script), str(output_dir), *args]
    _run_launcher(cmd, output_dir)


def _venv_command(name: str) -> str:
    import shutil
    import sys
    from pathlib import Path

    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"{name} is not installed beside {sys.executable}"
    return found


def _run_launcher(cmd: list[str], output_dir: Any) -> None:
    import os
    import shutil
    import subprocess
    from pathlib import Path

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    reports = []
    for _attempt in range(2):
        shutil.rmtree(output_dir, ignore_errors=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        if proc.returncode == 0:
            return
        stacks = "\n".join(
            f"--- {log.name}:\n{log.read_text()[-2000:]}" for log in sorted(Path(output_dir).glob("fatal_rank*.log"))
        )
        reports.append(f"{proc.stderr[-3000:]}\n{stacks}")
        if not any(f"exitcode  : -{signal}" in proc.stderr for signal in (6, 7, 11)):  # SIGABRT, SIGBUS, SIGSEGV
            break
    raise AssertionError("\n=== next run ===\n".join(reports))
