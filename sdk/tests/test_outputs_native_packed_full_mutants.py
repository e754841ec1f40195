"""``microformers_sdk.native`` and ``microformers_sdk.packed`` behaviour the full mutation run found unasserted.

(docs/reliability.md, issue #19; ``microformers_sdk.outputs`` has no code for mutmut to mutate.)
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from microformers.errors import InputError
from microformers_sdk import PackedLinear, native, pack_linear_weights
from microformers_sdk.packed import refuse_packed
from microformers_sdk.testing import (
    assert_close,
    needs_native_ops,
    one_thread,  # noqa: F401  (an autouse fixture, found by name)
)

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")


class _Nested(nn.Module):
    """Linear layers below the top level, one of them behind a forward pre-hook (left unpacked)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 6, bias=False))])
        self.head = nn.Linear(6, 3)
        self.head.register_forward_pre_hook(lambda *_: None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks[0](x))


@needs_onednn
def test_nested_layers_are_packed_in_place_and_compute_the_same() -> None:
    torch.manual_seed(0)
    model = _Nested()
    x = torch.randn(5, 6)
    with torch.no_grad():
        expected = model(x)
    assert pack_linear_weights(model) == 2
    first, second = model.blocks[0][0], model.blocks[0][2]
    assert type(first) is PackedLinear and type(second) is PackedLinear and type(model.head) is nn.Linear
    assert (first.name, second.name) == ("blocks.0.0", "blocks.0.2")
    assert set(dict(model.named_children())) == {"blocks", "head"}  # nothing added at the top level
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-5)
    assert "packed for 8 rows" in repr(first) and "in_features=6, out_features=8" in repr(first)


@needs_onednn
def test_gradient_refusal_depends_on_what_needs_a_gradient() -> None:
    torch.manual_seed(0)
    plain = nn.Linear(6, 4, bias=False)
    unbiased = PackedLinear(plain, "unbiased")
    x = torch.randn(3, 6)
    torch.testing.assert_close(unbiased(x), F.linear(x, plain.weight.detach()), rtol=1e-5, atol=1e-5)  # grad on
    with pytest.raises(InputError, match=r"'unbiased' was packed for inference"):
        unbiased(x.clone().requires_grad_())
    biased_linear = nn.Linear(6, 4)
    biased = PackedLinear(biased_linear, "biased")
    message = (
        "layer 'biased' was packed for inference (pack_linear_weights) and has no gradient; load the "
        "model again to train it, or run under torch.no_grad()"
    )
    with pytest.raises(InputError, match=re.escape(message)):
        biased(x)  # a trainable bias would need one
    with torch.no_grad():
        expected = F.linear(x, biased_linear.weight, biased_linear.bias)
        torch.testing.assert_close(biased(x), expected, rtol=1e-5, atol=1e-5)
    biased.bias.requires_grad_(False)
    torch.testing.assert_close(biased(x), expected, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_refusal_messages_name_the_layer_and_the_way_out() -> None:
    layer = PackedLinear(nn.Linear(4, 4), "proj_X")
    with torch.no_grad(), pytest.raises(InputError) as wrong_dtype:
        layer(torch.randn(2, 4, dtype=torch.float64))
    assert str(wrong_dtype.value) == "layer 'proj_X' is packed for float32 inputs, got torch.float64"
    model = nn.Module()
    model.proj_X = layer
    with pytest.raises(InputError) as saved:
        model.state_dict()
    assert str(saved.value) == (
        "layer 'proj_X' was packed for inference (pack_linear_weights): its weight is in oneDNN's layout and "
        "cannot be saved or read back; load the model again to save or train it"
    )
    with pytest.raises(InputError) as converted:
        model.to(torch.bfloat16)
    assert str(converted.value) == (
        "layer 'proj_X' was packed for float32 on the CPU (pack_linear_weights); load the model again with the "
        "dtype and device you need instead of converting it to torch.bfloat16 on cpu"
    )
    with torch.no_grad(), pytest.raises(InputError, match=r"^layer '' is packed for float32 inputs"):
        PackedLinear(nn.Linear(4, 4))(torch.randn(1, 4).half())  # built by hand without a name: an empty one
    with pytest.raises(InputError) as unpackable:
        PackedLinear(nn.Linear(4, 4).to(torch.float16), "half")
    assert str(unpackable.value) == (
        "pack_linear_weights: layer 'half' is torch.float16 on cpu; packing needs float32 weights on the CPU "
        "(load with dtype=torch.float32)"
    )


@needs_onednn
def test_float32_cpu_conversions_of_a_packed_model_are_allowed() -> None:
    torch.manual_seed(0)
    model = _Nested()
    x = torch.randn(2, 6)
    pack_linear_weights(model)
    with torch.no_grad():
        expected = model(x)
        assert model.float() is model and model.to("cpu") is model and model.to(torch.float32) is model
        torch.testing.assert_close(model(x), expected)
    assert model.blocks[0][0].bias.dtype == torch.float32


def test_without_onednn_packing_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    model = _Nested()
    with pytest.raises(InputError) as refused:
        pack_linear_weights(model)
    assert str(refused.value) == (
        "pack_linear_weights needs PyTorch built with oneDNN (mkldnn), which this build lacks"
    )
    assert type(model.head) is nn.Linear


@needs_onednn
def test_refuse_packed_names_the_action_the_count_and_the_first_layer() -> None:
    model = _Nested()
    refuse_packed(model, "compile_decode_step")  # nothing packed: nothing refused
    pack_linear_weights(model)
    with pytest.raises(InputError) as refused:
        refuse_packed(model, "compile_decode_step")
    assert str(refused.value) == (
        "compile_decode_step: 2 layers (first 'blocks.0.0') were packed for eager inference by "
        "pack_linear_weights, which torch.compile cannot lower; decode eagerly, or load the model again "
        "without packing to compile it"
    )


def _no_build(name: str, source: Path) -> Exception | None:
    raise AssertionError(f"built {name} from {source} again")


@needs_native_ops()
def test_an_op_already_registered_is_used_without_building(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    x, weight, bias = torch.randn(3, 40), torch.randn(24, 40), torch.randn(24)
    assert native.few_rows_linear(x, weight, bias) is not None, "CI builds the op (g++ and ninja are installed)"
    monkeypatch.setattr(native, "build_ops", _no_build)
    for setting in (None, "1"):  # unset or anything but "0": on
        if setting is None:
            monkeypatch.delenv("MICROFORMERS_NATIVE", raising=False)
        else:
            monkeypatch.setenv("MICROFORMERS_NATIVE", setting)
        monkeypatch.setattr(native, "_built", {})  # a fresh decision, as in another process that loaded it
        out = native.few_rows_linear(x, weight, bias)
        assert out is not None
        assert_close(out, F.linear(x, weight, bias), rtol=1e-5, atol=1e-4)  # |out| ~ 6, summed in another order


def test_a_failed_build_is_logged_once_and_torch_is_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    built: list[tuple[str, Path]] = []

    def no_compiler(name: str, source: Path) -> Exception | None:
        built.append((name, source))
        return OSError("no C++ compiler")

    monkeypatch.delenv("MICROFORMERS_NATIVE", raising=False)
    monkeypatch.setattr(native, "_built", {})
    monkeypatch.setattr(native, "torch", SimpleNamespace(ops=SimpleNamespace()))  # no op registered yet
    monkeypatch.setattr(native, "build_ops", no_compiler)
    with caplog.at_level(logging.DEBUG, logger="microformers"):
        for _ in range(2):
            assert native.few_rows_linear(torch.randn(2, 8), torch.randn(4, 8), None) is None
    assert built == [("microformers_sdk_ops", Path(native.__file__).with_name("csrc") / "few_rows.cpp")]
    assert built[0][1].is_file()
    assert [record.getMessage() for record in caplog.records] == [
        "microformers-sdk: native few-row products unavailable (no C++ compiler); using torch's"
    ]


@needs_native_ops()
def test_a_row_narrower_than_one_vector_is_the_plain_float32_sum() -> None:
    """Below 8 inputs every output is x0*w0 + x1*w1 + ... in float32, each product rounded on its own (no fused
    multiply-add contracted in by the compiler), the same on every machine."""
    torch.manual_seed(0)
    x, weight = torch.randn(4, 7), torch.randn(6, 7)
    out = native.few_rows_linear(x, weight, None)
    assert out is not None, "CI builds the op (g++ and ninja are installed)"
    expected = torch.zeros(4, 6)
    for k in range(7):
        expected = expected + x[:, k : k + 1] * weight[:, k]
    assert torch.equal(out, expected)  # exact: the documented order (few_rows.cpp, built with -ffp-contract=off)


def test_build_ops_returns_the_build_error_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "native_isa", lambda: ("avx2", "as on an AVX2 CPU"))  # so any machine compiles it
    source = tmp_path / "broken.cpp"
    source.write_text("this is not C++\n")
    error = native.build_ops("microformers_test_broken_ops", source)
    assert isinstance(error, Exception) and "microformers_test_broken_ops" in str(error)
    assert capfd.readouterr() == ("", "")  # no build log on the terminal


def test_concurrent_first_calls_decide_once(monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[str] = []
    results: list[torch.Tensor | None] = []

    def second_caller() -> None:
        results.append(native.few_rows_linear(torch.randn(1, 8), torch.randn(4, 8), None))

    other = threading.Thread(target=second_caller)

    def slow_failing_build(name: str, source: Path) -> Exception | None:
        builds.append(name)
        if len(builds) == 1:  # another thread asks while this one builds: it waits for this decision
            other.start()
            other.join(timeout=0.5)
        return OSError("no C++ compiler")

    monkeypatch.delenv("MICROFORMERS_NATIVE", raising=False)
    monkeypatch.setattr(native, "_built", {})
    monkeypatch.setattr(native, "torch", SimpleNamespace(ops=SimpleNamespace()))  # no op registered yet
    monkeypatch.setattr(native, "build_ops", slow_failing_build)
    assert native.few_rows_linear(torch.randn(2, 8), torch.randn(4, 8), None) is None
    other.join()
    assert results == [None] and builds == ["microformers_sdk_ops"]
