"""The SDK's native few-row product (``mfsdk::few_rows_linear``, csrc/few_rows.cpp)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from microformers.errors import ConfigError
from microformers_sdk import layers, native
from microformers_sdk.testing import (
    assert_close,
    needs_native_ops,
    one_thread,  # noqa: F401  (an autouse fixture, found by name)
)


@needs_native_ops()
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("out_features,in_features", [(96, 40), (7, 13), (300, 576), (33, 35), (2100, 40)])
def test_matches_f_linear_and_each_row_the_same_in_any_batch(out_features: int, in_features: int, threads: int) -> None:
    """Every row count up to FEW_ROWS_MAX, inner sizes with and without a tail past the 8-, 16- and 32-wide chunks;
    from two rows on, a row's output is bit for bit the same in any batch, in any position (one summation
    order per output), except that on a CPU with the 16-lane products batches of WIDE_FROM_ROWS rows or more sum
    in many_rows_linear's order, the same in each of them; a row alone is summed in the single-row order, equal up
    to rounding."""
    torch.manual_seed(out_features)
    weight, bias = torch.randn(out_features, in_features), torch.randn(out_features)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        count = native.FEW_ROWS_MAX
        x = torch.randn(count, in_features)
        paired = torch.cat([native.few_rows_linear(x[[i, (i + 1) % count]], weight, bias)[:1] for i in range(count)])
        wide = native.many_rows_linear(x, weight, bias) if native.wide_products_available() else None
        for rows in range(1, count + 1):
            out = native.few_rows_linear(x[:rows], weight, bias)
            assert out is not None, "CI builds the op (g++ and ninja are installed)"
            # atol 1e-4: sums of up to 576 products of N(0, 1) values (|out| ~ 24) in another order than MKL's
            assert_close(out, F.linear(x[:rows], weight, bias), rtol=1e-5, atol=1e-4)
            if rows == 1:  # four accumulators instead of one: another order of the same sum
                assert_close(out, paired[:1], rtol=1e-5, atol=1e-4)
            elif wide is not None and rows >= native.WIDE_FROM_ROWS:  # exact: the 16-lane order, as for a prompt
                assert torch.equal(out, wide[:rows])
            else:  # exact: few_rows.cpp sums each output in one fixed order, whatever the rows, grouping and threads
                assert torch.equal(out, paired[:rows])
        assert torch.equal(native.few_rows_linear(x.flip(0), weight, bias), (paired if wide is None else wide).flip(0))
        unbiased = native.few_rows_linear(x[:3], weight, None)
        assert_close(unbiased, F.linear(x[:3], weight), rtol=1e-5, atol=1e-4)
        assert_close(paired[:3] - unbiased, bias.expand(3, -1))
    finally:
        torch.set_num_threads(previous)


needs_wide_products = pytest.mark.skipif(
    not native.wide_products_available(),
    reason="the 16-lane product needs the native ops and a CPU with AVX-512 that torch uses (not this one)",
)


@needs_wide_products
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("out_features,in_features", [(1536, 576), (13, 35), (100, 16), (7, 9)])
def test_many_rows_match_f_linear_and_each_row_the_same_in_any_batch(
    out_features: int, in_features: int, threads: int
) -> None:
    """Prompts of more than FEW_ROWS_MAX rows on an AVX-512 CPU: F.linear's result up to rounding, inner sizes
    with and without a tail past 16; every output summed in one order, so a row's output is bit for bit the
    same in any number of rows, in any position, with any number of threads."""
    torch.manual_seed(out_features)
    weight, bias = torch.randn(out_features, in_features), torch.randn(out_features)
    x = torch.randn(native.FEW_ROWS_MAX + 75, in_features)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        full = native.many_rows_linear(x, weight, bias)
        assert full is not None
        # atol 1e-4: sums of up to 576 products of N(0, 1) values (|out| ~ 24) in another order than MKL's
        assert_close(full, F.linear(x, weight, bias), rtol=1e-5, atol=1e-4)
        for rows in (1, 2, 3, 5, native.FEW_ROWS_MAX + 1):
            part = native.many_rows_linear(x[-rows:], weight, bias)
            assert part is not None and torch.equal(part, full[-rows:])  # exact: one summation order per output
        assert torch.equal(native.many_rows_linear(x.flip(0), weight, bias), full.flip(0))
        unbiased = native.many_rows_linear(x, weight, None)
        assert unbiased is not None
        assert_close(full - unbiased, bias.expand(x.shape[0], -1))
    finally:
        torch.set_num_threads(previous)


@needs_wide_products
def test_row_linear_takes_the_16_lane_product_for_more_than_few_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []
    real = native.many_rows_linear

    def counted(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
        calls.append(tuple(x.shape))
        return real(x, weight, bias)

    monkeypatch.setattr(layers, "many_rows_linear", counted)
    monkeypatch.setattr(native, "_NATIVE_PROMPT_PRODUCTS", True)  # as on an AMD CPU
    weight = torch.randn(40, 24)
    with torch.no_grad():
        prompt = torch.randn(2, native.FEW_ROWS_MAX, 24)
        assert_close(layers.row_linear(prompt, weight), F.linear(prompt, weight), rtol=1e-5, atol=1e-5)
        layers.row_linear(torch.randn(native.FEW_ROWS_MAX, 24), weight)  # few rows: the 8-lane product
    assert calls == [(2, native.FEW_ROWS_MAX, 24)]


@needs_wide_products
def test_row_linear_leaves_prompts_to_torch_where_its_blas_is_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where MKL runs its AVX-512 code (Intel's CPUs), more than FEW_ROWS_MAX rows go to F.linear; fewer still take
    the native product (WIDE_FROM_ROWS and more rows in the 16-lane order)."""
    monkeypatch.setattr(native, "_NATIVE_PROMPT_PRODUCTS", False)
    monkeypatch.setattr(layers, "many_rows_linear", lambda *_: pytest.fail("a prompt took the 16-lane product"))
    weight = torch.randn(40, 24)
    with torch.no_grad():
        prompt = torch.randn(native.FEW_ROWS_MAX + 1, 24)
        # exact: row_linear hands the prompt to F.linear itself (same kernel, same shapes)
        assert torch.equal(layers.row_linear(prompt, weight), F.linear(prompt, weight))
        rows = prompt[: native.FEW_ROWS_MAX]
        # exact: few_rows_linear sums WIDE_FROM_ROWS rows or more in many_rows_linear's order
        assert torch.equal(layers.row_linear(rows, weight), native.many_rows_linear(rows, weight, None))


@pytest.mark.parametrize(
    "vendor,mkl,setting,expected",
    [
        ("AuthenticAMD", True, None, True),
        ("GenuineIntel", True, None, False),
        ("GenuineIntel", False, None, True),
        ("GenuineIntel", True, "native", True),
        ("AuthenticAMD", True, "torch", False),
    ],
)
def test_prompt_products_follow_the_cpu_vendor_or_the_environment(
    monkeypatch: pytest.MonkeyPatch, vendor: str, mkl: bool, setting: str | None, expected: bool
) -> None:
    monkeypatch.setattr(native, "_cpuinfo_field", lambda name: vendor if name == "vendor_id" else "")
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: mkl)
    if setting is None:
        monkeypatch.delenv("MICROFORMERS_PROMPT_PRODUCTS", raising=False)
    else:
        monkeypatch.setenv("MICROFORMERS_PROMPT_PRODUCTS", setting)
    assert native._native_prompt_products() is expected


@pytest.mark.parametrize("vendor,rows", [("GenuineIntel", 8), ("AuthenticAMD", 48)])
def test_the_16_lane_products_start_at_the_row_count_measured_for_the_cpu_vendor(
    monkeypatch: pytest.MonkeyPatch, vendor: str, rows: int
) -> None:
    monkeypatch.setattr(native, "_cpuinfo_field", lambda name: vendor if name == "vendor_id" else "")
    assert native._wide_from_rows() == rows


@needs_wide_products
def test_a_negative_wide_products_row_count_is_refused() -> None:
    with pytest.raises(RuntimeError, match="from_rows must be >= 0"):
        torch.ops.mfsdk.use_wide_products(-1)
    x, weight = torch.randn(native.WIDE_FROM_ROWS, 40), torch.randn(24, 40)
    # exact: the threshold is unchanged, so these rows still sum in many_rows_linear's order
    assert torch.equal(native.few_rows_linear(x, weight, None), native.many_rows_linear(x, weight, None))


def test_a_wrong_prompt_products_setting_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MICROFORMERS_PROMPT_PRODUCTS", "fast")
    with pytest.raises(ConfigError, match="MICROFORMERS_PROMPT_PRODUCTS='fast'.*'auto'"):
        native._native_prompt_products()


def test_cpuinfo_fields_are_read_by_name() -> None:
    flags = native.cpu_flags()
    vendor = native._cpuinfo_field("vendor_id")
    if Path("/proc/cpuinfo").exists() and "x86" in native.platform.machine().lower():
        assert vendor and "sse2" in flags  # an x86-64 Linux names its vendor and has SSE2
    assert native._cpuinfo_field("no such field") == ""


def test_the_16_lane_product_is_off_by_the_environment_or_without_avx512(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MICROFORMERS_WIDE_PRODUCTS", "0")
    assert native._wide_isa() is False
    monkeypatch.delenv("MICROFORMERS_WIDE_PRODUCTS")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")  # ATEN_CPU_CAPABILITY=avx2
    assert native._wide_isa() is False
    monkeypatch.setattr(native, "_WIDE_ISA", False)
    assert native.many_rows_linear(torch.randn(200, 8), torch.randn(4, 8), None) is None


def test_row_linear_uses_it_for_few_float_rows_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []
    real = native.few_rows_linear

    def counted(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
        calls.append(tuple(x.shape))
        return real(x, weight, bias)

    monkeypatch.setattr(layers, "few_rows_linear", counted)
    weight = torch.randn(64, 24)
    with torch.no_grad():
        strided = torch.randn(24, 3).t()  # not contiguous: copied first
        assert_close(layers.row_linear(strided, weight), F.linear(strided, weight))
        layers.row_linear(torch.randn(2, 5, 24), weight)
        layers.row_linear(torch.randn(native.FEW_ROWS_MAX + 1, 24), weight)  # a GEMM
        layers.row_linear(torch.randn(2, 24, dtype=torch.float64), weight.double())  # not float32
    layers.row_linear(torch.randn(2, 24), weight.requires_grad_())  # autograd on
    assert calls == [(3, 24), (2, 5, 24)]


def test_turned_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MICROFORMERS_NATIVE", "0")
    monkeypatch.setattr(native, "_built", {})
    assert native.few_rows_linear(torch.randn(1, 8), torch.randn(4, 8), None) is None


def test_empty_sizes_give_f_linear_shapes() -> None:
    with torch.no_grad():
        for x, weight in ((torch.randn(2, 0), torch.randn(3, 0)), (torch.randn(2, 4), torch.randn(0, 4))):
            assert torch.equal(
                layers.row_linear(x, weight), F.linear(x, weight)
            )  # exact: empty, or sums of nothing (0)


# From test_outputs_native_packed_full_mutants.py: ``microformers_sdk.native`` and ``microformers_sdk.packed``
# behaviour the full mutation run found unasserted. (docs/reliability.md, issue #19; ``microformers_sdk.outputs``
# has no code for mutmut to mutate.)


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
    built: list[tuple[str, list[Path]]] = []

    def no_compiler(name: str, sources: list[Path]) -> Exception | None:
        built.append((name, sources))
        return OSError("no C++ compiler")

    monkeypatch.delenv("MICROFORMERS_NATIVE", raising=False)
    monkeypatch.setattr(native, "_built", {})
    monkeypatch.setattr(native, "torch", SimpleNamespace(ops=SimpleNamespace()))  # no op registered yet
    monkeypatch.setattr(native, "build_ops", no_compiler)
    with caplog.at_level(logging.DEBUG, logger="microformers"):
        for _ in range(2):
            assert native.few_rows_linear(torch.randn(2, 8), torch.randn(4, 8), None) is None
    csrc = Path(native.__file__).with_name("csrc")
    assert built == [("microformers_sdk_ops", [csrc / "few_rows.cpp", csrc / "decoder_step.cpp", csrc / "layers.cpp"])]
    assert all(source.is_file() for source in built[0][1])
    assert [record.getMessage() for record in caplog.records] == [
        "microformers-sdk: native few-row products unavailable (no C++ compiler); using torch's"
    ]


@needs_native_ops()
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(3, 5, 576), (300, 13), (1, 8), (2, 0, 40)])
def test_rms_norm_is_the_formula_and_each_row_the_same_in_any_batch(shape: tuple[int, ...], threads: int) -> None:
    """Rows of any width (with and without a tail past 8 values), any count, one or two threads: the RMSNorm formula
    up to rounding, and a row's result bit for bit the same whatever rows come with it."""
    torch.manual_seed(shape[-1])
    x, weight = torch.randn(shape) * 3, torch.randn(shape[-1])
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = native.rms_norm(x, weight, 1e-5)
        assert out is not None and out.shape == x.shape
        xd = x.double()
        want = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-5) * weight.double()
        assert_close(out, want.float(), rtol=1e-5, atol=1e-6)
        rows = x.reshape(-1, shape[-1])
        if rows.shape[0]:
            alone = torch.cat([native.rms_norm(rows[i : i + 1], weight, 1e-5) for i in range(rows.shape[0])])
            assert torch.equal(out.reshape(-1, shape[-1]), alone)  # exact: each row is summed alone, in one order
    finally:
        torch.set_num_threads(previous)


@needs_native_ops()
def test_rms_norm_names_a_weight_of_the_wrong_size() -> None:
    with pytest.raises(RuntimeError, match="rms_norm: weight must have 8 values"):
        native.rms_norm(torch.randn(2, 8), torch.randn(7), 1e-6)


@needs_native_ops()
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(3, 5, 1536), (70, 13), (1, 8), (2, 0, 40)])
def test_silu_product_in_one_pass_is_the_formula_and_each_row_the_same_in_any_batch(
    shape: tuple[int, ...], threads: int
) -> None:
    """``silu(gate) * up`` written into ``gate``: rows of any width (with and without a tail past 8 and 16 values),
    any count, one or two threads; within float32 rounding of the formula in float64, and a row's values bit for
    bit the same whatever rows come with it."""
    torch.manual_seed(shape[-1])
    gate, up = torch.randn(shape) * 6, torch.randn(shape)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        written = gate.clone()
        out = native.silu_mul_(written, up)
        assert out is not None and out.data_ptr() == written.data_ptr()  # in place
        want = F.silu(gate.double()) * up.double()
        assert_close(out, want.float(), rtol=2e-6, atol=1e-6)
        rows, ups = gate.reshape(-1, shape[-1]), up.reshape(-1, shape[-1])
        if rows.shape[0]:
            alone = torch.cat([native.silu_mul_(rows[i : i + 1].clone(), ups[i : i + 1]) for i in range(rows.shape[0])])
            assert torch.equal(out.reshape(-1, shape[-1]), alone)  # exact: the same operations on each row's values
    finally:
        torch.set_num_threads(previous)


@needs_native_ops()
def test_silu_product_takes_the_same_values_in_16_and_8_lanes() -> None:
    """Rows of 16 values go through the 16-lane loop where the CPU has AVX-512, rows of 8 through the decoder step's
    own 8-lane one: the same operations per value, so the same bits (extremes and a NaN included)."""
    torch.manual_seed(0)
    gate, up = torch.randn(64, 16) * 30, torch.randn(64, 16)
    gate[0, :6] = torch.tensor([float("nan"), 100.0, -100.0, 88.5, -88.5, 0.0])
    wide = native.silu_mul_(gate.clone(), up)
    narrow = native.silu_mul_(gate.clone().reshape(-1, 8), up.reshape(-1, 8))
    assert wide is not None and narrow is not None
    assert torch.equal(wide.nan_to_num(7.0), narrow.reshape(64, 16).nan_to_num(7.0))  # exact: the same operations
    assert wide[0, 0].isnan() and wide[0, 5] == 0


@needs_native_ops()
def test_silu_product_refuses_gate_and_up_of_different_shapes() -> None:
    assert native.silu_mul_(torch.randn(2, 8), torch.randn(2, 9)) is None
    with pytest.raises(RuntimeError, match="silu_mul_: contiguous float32 gate and up of one shape"):
        torch.ops.mfsdk.silu_mul_(torch.randn(2, 8), torch.randn(2, 9))


def _rotate_by_formula(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


@needs_native_ops()
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("batch,heads,tokens,head_dim,tables", [(1, 9, 70, 64, 1), (2, 3, 5, 10, 2), (2, 4, 1, 128, 1)])
def test_rotary_in_one_pass_is_the_formula_to_the_bit(
    batch: int, heads: int, tokens: int, head_dim: int, tables: int, threads: int
) -> None:
    """Queries laid out as a model's projections give them (tokens before heads) and contiguous ones, tables shared
    by the batch or one per row, head sizes with and without a tail past a vector, one or two threads: the values
    of ``x * cos + rotate_half(x) * sin``, in x's layout."""
    torch.manual_seed(head_dim)
    x = torch.randn(batch, tokens, heads, head_dim).transpose(1, 2)  # [B, H, T, D] over [B, T, H, D] memory
    angles = torch.randn(tables, 1, tokens, head_dim) * 3
    cos, sin = angles.cos(), angles.sin()
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for layout in (x, x.contiguous()):
            out = native.rotate_half_split(layout, cos, sin)
            assert out is not None and out.stride() == layout.stride()
            # exact: the same IEEE products and sums in the same order as the formula (no fused multiply-add)
            assert torch.equal(out, _rotate_by_formula(layout, cos, sin))
    finally:
        torch.set_num_threads(previous)


@needs_native_ops()
def test_rotary_in_one_pass_declines_tables_it_does_not_take() -> None:
    x = torch.randn(1, 2, 3, 8)
    cos = torch.randn(1, 1, 3, 8)
    assert native.rotate_half_split(x, cos.double(), cos.double()) is None  # float64 tables
    assert native.rotate_half_split(x, cos.expand(1, 2, 3, 8), cos.expand(1, 2, 3, 8)) is None  # one per head
    assert native.rotate_half_split(x[..., :6], cos[..., :6], cos[..., :6]) is not None  # (a partial rotary's slice)
    with pytest.raises(RuntimeError, match="rotate_half_split: cos and sin must be contiguous float32"):
        torch.ops.mfsdk.rotate_half_split(x, cos.reshape(1, 3, 8)[:, :2], cos.reshape(1, 3, 8)[:, :2])


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
    out, err = capfd.readouterr()
    # no compiler log on the terminal: at most the one line that says a first build is under way (printed where a
    # build can run at all: native ops on, a compiler and ninja present)
    notice = (
        "microformers: building native kernels (microformers_test_broken_ops) for this CPU (avx2), once; this takes "
        "up to a minute..."
    )
    assert out == "" and err.splitlines() == ([notice] if native.unavailable_reason() is None else [])


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
