"""``microformers export onnx MODEL OUTPUT_DIR``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def export_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """Register ``export``'s formats (today: ``onnx``) and return the runner."""
    formats = parser.add_subparsers(dest="format", metavar="FORMAT")
    onnx = formats.add_parser("onnx", help="an ONNX graph, validated with ONNX Runtime")
    onnx.add_argument("model", metavar="MODEL", help="a model folder, Hub id or alias")
    onnx.add_argument("output_dir", metavar="OUTPUT_DIR", help="where model.onnx, config and tokenizer files go")
    onnx.add_argument("--task", default=None, help="what the graph computes (default: from config.architectures): "
                      "feature-extraction, text-classification, token-classification, question-answering, fill-mask, "
                      "text-generation, text-generation-with-past, text2text-generation, image-classification, "
                      "automatic-speech-recognition")  # fmt: skip
    onnx.add_argument("--opset", type=int, default=None, help="ONNX opset (default: 18)")
    onnx.add_argument(
        "--dtype", choices=("fp32", "fp16"), default="fp32", help="weights and activations (default: fp32)"
    )
    onnx.add_argument(
        "--quantize", choices=("int8",), default=None, help="int8 weights (ONNX Runtime dynamic quantization)"
    )
    onnx.add_argument("--atol", type=float, default=1e-4, help="validation: absolute tolerance against PyTorch (1e-4)")
    onnx.add_argument(
        "--rtol",
        type=float,
        default=1e-4,
        help="validation: relative tolerance, times the output's largest |value| (1e-4)",
    )
    onnx.add_argument("--no-validate", dest="validate", action="store_false", help="skip the ONNX Runtime check")
    onnx.add_argument("--exporter", choices=("auto", "dynamo", "torchscript"), default="auto",
                      help="torch.onnx exporter (default: auto, the dynamo one, else TorchScript)")  # fmt: skip

    def run(args: argparse.Namespace) -> int:
        if args.format != "onnx":
            parser.print_help()
            return 2
        from .export import DEFAULT_OPSET, export_onnx

        options: dict[str, Any] = {
            "task": args.task,
            "opset": DEFAULT_OPSET if args.opset is None else args.opset,
            "dtype": args.dtype,
            "quantize": args.quantize,
            "atol": args.atol,
            "rtol": args.rtol,
            "validate": args.validate,
            "exporter": args.exporter,
        }
        result = export_onnx(args.model, args.output_dir, **options)
        print(result.summary())
        return 0

    return run
