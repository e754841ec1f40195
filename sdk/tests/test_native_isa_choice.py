"""Which machines get the native few-row op: x86-64 Linux CPUs with AVX2, FMA and F16C, and only a binary built
for that named instruction set. Every other machine (an older x86, ARM, macOS, torch told to use its DEFAULT
kernels) gets None with a reason, nothing is compiled, and ``row_linear`` falls back to torch's products.

The CPU, platform and torch's capability are simulated, so these run (and pass) on any machine."""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import torch.utils.cpp_extension

from microformers_sdk import layers, native
from microformers_sdk.testing import assert_close, needs_native_ops

AVX2_FLAGS = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c"})
SOURCE = Path(native.__file__).with_name("csrc") / "few_rows.cpp"


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments of every ``torch.utils.cpp_extension.load`` call (none of which compiles)."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(torch.utils.cpp_extension, "load", lambda **kwargs: calls.append(kwargs))
    return calls


@pytest.fixture
def x86_linux(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An x86-64 Linux machine whose torch runs its AVX2 kernels, native ops not turned off, no op loaded yet."""
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(native, "cpu_flags", lambda: AVX2_FLAGS)
    monkeypatch.delenv("MICROFORMERS_NATIVE", raising=False)
    monkeypatch.setattr(native, "_built", {})  # a fresh decision
    # as in a process that has not loaded the op (an earlier test may have registered it in this one)
    monkeypatch.setattr(native, "torch", SimpleNamespace(ops=SimpleNamespace(), backends=torch.backends))
    return monkeypatch


def test_a_cpu_without_avx2_builds_nothing_and_row_linear_uses_torch(
    x86_linux: pytest.MonkeyPatch, loads: list[dict[str, Any]]
) -> None:
    x86_linux.setattr(native, "cpu_flags", lambda: frozenset({"sse4_2"}))
    assert native.native_isa() == (None, "this CPU lacks avx2, f16c, fma")
    assert native.unavailable_reason() == "this CPU lacks avx2, f16c, fma"
    error = native.build_ops("microformers_sdk_ops", SOURCE)
    assert isinstance(error, native.NativeUnavailable) and str(error) == "this CPU lacks avx2, f16c, fma"
    torch.manual_seed(0)
    weight, bias = torch.randn(96, 40), torch.randn(96)
    assert native.few_rows_linear(torch.randn(2, 40), weight, bias) is None
    assert native._built == {"few_rows": False}
    assert loads == []  # no compiler run for a binary this CPU cannot execute
    with torch.no_grad():
        for shape in ((40,), (1, 40), (3, 40), (2, 5, 40)):
            x = torch.randn(*shape)
            # torch's own products (the one-row split or F.linear): the same maths, possibly summed in another order
            assert_close(layers.row_linear(x, weight, bias), F.linear(x, weight, bias))
    assert loads == []


def test_a_cpu_missing_only_f16c_is_refused_by_name(x86_linux: pytest.MonkeyPatch, loads: list[dict[str, Any]]) -> None:
    x86_linux.setattr(native, "cpu_flags", lambda: AVX2_FLAGS - {"f16c"})
    error = native.build_ops("microformers_sdk_ops", SOURCE)
    assert isinstance(error, native.NativeUnavailable) and str(error) == "this CPU lacks f16c"
    assert loads == []


@pytest.mark.parametrize(
    "where,attribute,value",
    [("arm", "machine", "aarch64"), ("macos", "platform", "darwin")],
)
def test_arm_and_macos_get_no_native_op_and_a_reason(
    x86_linux: pytest.MonkeyPatch, loads: list[dict[str, Any]], where: str, attribute: str, value: str
) -> None:
    if attribute == "machine":
        x86_linux.setattr(platform, "machine", lambda: value)
    else:
        x86_linux.setattr(sys, "platform", value)
    isa, why = native.native_isa()
    assert isa is None and why.startswith("native ops are built for x86-64 Linux only") and value in why, where
    assert native.unavailable_reason() == why
    assert isinstance(native.build_ops("microformers_sdk_ops", SOURCE), native.NativeUnavailable)
    assert native.few_rows_linear(torch.randn(1, 8), torch.randn(4, 8), None) is None
    assert loads == []
    marker = needs_native_ops()  # what the native ops' own tests are marked with: skipped here, saying why
    assert marker.mark.args == (True,) and marker.mark.kwargs["reason"] == f"native ops unavailable: {why}"


def test_torch_default_kernels_turn_it_off_even_on_an_avx2_cpu(
    x86_linux: pytest.MonkeyPatch, loads: list[dict[str, Any]]
) -> None:
    """``ATEN_CPU_CAPABILITY=default`` makes torch report "DEFAULT": the native op follows torch's choice."""
    x86_linux.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert native.native_isa() == (None, "torch runs its DEFAULT kernels here (ATEN_CPU_CAPABILITY)")
    assert native.unavailable_reason() == "torch runs its DEFAULT kernels here (ATEN_CPU_CAPABILITY)"
    assert isinstance(native.build_ops("microformers_sdk_ops", SOURCE), native.NativeUnavailable)
    assert native.few_rows_linear(torch.randn(1, 8), torch.randn(4, 8), None) is None
    assert loads == []


@pytest.mark.parametrize("capability", ["AVX2", "AVX512"])
def test_avx2_and_avx512_capabilities_choose_the_avx2_build(x86_linux: pytest.MonkeyPatch, capability: str) -> None:
    x86_linux.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    assert native.native_isa() == ("avx2", "this CPU has avx2, f16c, fma")


def test_the_build_targets_avx2_by_name_and_never_the_build_machine(
    x86_linux: pytest.MonkeyPatch, loads: list[dict[str, Any]]
) -> None:
    assert native.build_ops("microformers_sdk_ops", SOURCE) is None
    assert len(loads) == 1
    kwargs = loads[0]
    assert kwargs["name"] == "microformers_sdk_ops_avx2"  # a cached binary names the instruction set it needs
    assert kwargs["sources"] == [str(SOURCE)]
    flags = kwargs["extra_cflags"]
    assert {"-mavx2", "-mfma", "-mf16c"} <= set(flags)
    assert not any(flag.startswith(("-march", "-mtune", "-mcpu")) for flag in flags)  # never -march=native
    assert "-ffp-contract=off" in flags  # no fused multiply-adds the source did not write: one rounding order
    assert "-fopenmp" in flags and kwargs["extra_ldflags"] == ["-fopenmp"]
    assert kwargs["is_python_module"] is False


def test_a_failed_load_is_returned_not_raised(x86_linux: pytest.MonkeyPatch) -> None:
    def no_compiler(**kwargs: Any) -> None:
        raise OSError(f"cannot build {kwargs['name']}")

    x86_linux.setattr(torch.utils.cpp_extension, "load", no_compiler)
    error = native.build_ops("microformers_sdk_ops", SOURCE)
    assert isinstance(error, OSError) and str(error) == "cannot build microformers_sdk_ops_avx2"


def test_the_first_build_says_so_on_stderr_and_a_cached_one_is_silent(
    x86_linux: pytest.MonkeyPatch, loads: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x86_linux.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    x86_linux.setattr(native, "unavailable_reason", lambda: None)  # a compiler and ninja, whatever this machine has
    assert native.cached_library("microformers_sdk_ops") is None
    assert native.build_ops("microformers_sdk_ops", SOURCE) is None
    err = capsys.readouterr().err
    assert "building native kernels (microformers_sdk_ops) for this CPU (avx2), once" in err
    assert "built microformers_sdk_ops in" in err
    assert loads[-1]["verbose"] is False  # torch's compiler output only with the microformers logger at DEBUG
    built = tmp_path / "microformers_sdk_ops_avx2" / "microformers_sdk_ops_avx2.so"
    built.parent.mkdir()
    built.write_bytes(b"")
    assert native.cached_library("microformers_sdk_ops") == built
    assert native.build_ops("microformers_sdk_ops", SOURCE) is None
    assert capsys.readouterr().err == ""
    assert native.extension_report("microformers_sdk_ops", loaded=False) == (
        f"microformers_sdk_ops: built ({built}); used once a model needs it"
    )


def test_the_report_says_why_native_ops_are_not_used(x86_linux: pytest.MonkeyPatch) -> None:
    x86_linux.setenv("MICROFORMERS_NATIVE", "0")
    assert native.extension_report("microformers_sdk_ops", loaded=None) == (
        "microformers_sdk_ops: not used (MICROFORMERS_NATIVE=0 turns the native ops off); torch's own kernels run "
        "instead"
    )
