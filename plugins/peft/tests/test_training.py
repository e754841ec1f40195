"""Training an adapter with ``microformers.Trainer``: only adapter weights move, checkpoints hold the adapter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from microformers import LoraConfig
from microformers_sdk.testing import assert_similar_generation

pytest.importorskip("microformers_trainer", reason="microformers-trainer provides the Trainer")

VOCAB = 40


def _model() -> Any:
    from microformers_llama import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)  # fmt: skip
    model = LlamaForCausalLM(config)
    model.add_adapter(LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    return model


def _rows(n: int) -> list[dict[str, list[int]]]:
    generator = torch.Generator().manual_seed(0)
    rows = [torch.randint(1, VOCAB, (8,), generator=generator).tolist() for _ in range(n)]
    return [{"input_ids": r, "labels": list(r)} for r in rows]


def _trainer(model: Any, out: Path, max_steps: int) -> Any:
    from microformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=4, learning_rate=1e-2,
                             max_steps=max_steps, save_strategy="steps", save_steps=2, logging_steps=1,
                             disable_tqdm=True, report_to="none", seed=0)  # fmt: skip
    return Trainer(model=model, args=args, train_dataset=_rows(16))


def test_only_the_adapter_trains_and_checkpoints_hold_it(tmp_path: Path) -> None:
    model = _model()
    base_before = {k: v.clone() for k, v in model.state_dict().items() if "lora_" not in k}
    lora_before = {k: v.clone() for k, v in model.state_dict().items() if "lora_" in k}
    _trainer(model, tmp_path / "out", max_steps=4).train()
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in base_before.items()), "a base weight changed"  # exact: frozen
    assert any(not torch.equal(after[k], v) for k, v in lora_before.items()), "the adapter did not train"
    checkpoint = tmp_path / "out" / "checkpoint-2"
    assert (checkpoint / "adapter_model.safetensors").is_file() and (checkpoint / "adapter_config.json").is_file()
    assert not list(checkpoint.glob("model*.safetensors")), "a checkpoint holds the full model"


def test_resuming_from_an_adapter_checkpoint_ends_with_the_same_adapter(tmp_path: Path) -> None:
    whole = _model()
    _trainer(whole, tmp_path / "whole", max_steps=4).train()
    resumed = _model()
    _trainer(resumed, tmp_path / "resumed", max_steps=4).train(
        resume_from_checkpoint=str(tmp_path / "whole" / "checkpoint-2")
    )
    expected, got = whole.state_dict(), resumed.state_dict()
    lora = [k for k in expected if "lora_" in k]
    # exact: resuming loads the saved adapter, optimizer and RNG state, then runs the same batches through the
    # same kernels, shapes and thread count as the uninterrupted run
    assert lora and all(torch.equal(got[k], expected[k]) for k in lora)


@pytest.mark.parametrize("method", ["int8", "int4"])
def test_lora_on_a_quantized_base_trains_saves_and_generates(tmp_path: Path, method: str) -> None:
    """The CPU form of QLoRA: frozen int8/int4 base weights, a float adapter trained on top."""
    pytest.importorskip("microformers_quant", reason="microformers-quant provides int8/int4")
    from microformers import AutoModelForCausalLM
    from microformers_llama import LlamaConfig
    from microformers_peft.config import AdapterError

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "base")
    quantization = {"quant_method": method}
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "base", quantization_config=quantization)
    model.add_adapter(LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    frozen = {k: v.clone() for k, v in model.state_dict().items() if "lora_" not in k}
    trainable, total = model._adapter_manager.get_nb_trainable_parameters()
    assert total > 2 * 64 * 64 * 7 > trainable  # the quantized weights count among all parameters
    ids = torch.randint(0, 64, (4, 12), generator=torch.Generator().manual_seed(1))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    losses = []
    for _ in range(6):
        optimizer.zero_grad()
        loss = model(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.1
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in frozen.items()), "the quantized base changed"  # exact: frozen
    model.eval()
    with pytest.raises(AdapterError, match="no floating-point weight"):
        model.merge_adapter()
    model.save_pretrained(tmp_path / "adapter")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "base", quantization_config=quantization)
    reloaded.load_adapter(tmp_path / "adapter")
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, model(ids).logits, atol=1e-5, rtol=0)
        settings = {"max_new_tokens": 6, "do_sample": False, "output_scores": True, "return_dict_in_generate": True}
        got, want = reloaded.generate(ids[:1], **settings), model.generate(ids[:1], **settings)
    # the logits agree within 1e-5 above: the tokens too, up to a near tie
    assert_similar_generation(got.sequences, want.sequences, want.scores, prompt_length=ids.shape[1])
