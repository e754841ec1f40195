#!/usr/bin/env bash
# The numerics-heavy part of the suite under other CPUs' code paths, on this machine:
#   default-isa  ATEN_CPU_CAPABILITY=default: torch's (and so our) kernels as on a CPU without AVX2
#   avx2-isa     ATEN_CPU_CAPABILITY=avx2: as on a CPU without AVX-512
#   no-native    no native ops (MICROFORMERS_NATIVE=0, MICROFORMERS_QUANT_KERNELS=torch) and no C++
#                compiler on PATH: tests that need one skip with the reason
#   threads-1    every model on one intra-op thread
#   threads-2    every model on two intra-op threads
# Usage: scripts/test-portability.sh [LEG ...]   (all legs by default). Run after `make install-test`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
TESTS=(sdk/tests plugins/llama/tests plugins/gemma/tests plugins/phi3/tests plugins/mixtral/tests
  plugins/qwen2_moe/tests plugins/gpt2/tests plugins/bert/tests plugins/distilbert/tests plugins/roberta/tests
  plugins/wav2vec2/tests plugins/generation/tests plugins/pipelines/tests plugins/quant/tests plugins/peft/tests
  plugins/gguf/tests plugins/starcoder2/tests plugins/stablelm/tests plugins/falcon/tests plugins/bloom/tests
  tests/parity)
legs=("$@")
[ ${#legs[@]} -gt 0 ] || legs=(default-isa avx2-isa no-native threads-1 threads-2)

# A PATH with everything of the usual one but C and C++ compilers.
no_compiler_path() {
  local dir
  dir=$(mktemp -d)
  for bin in /usr/local/bin /usr/bin /bin; do
    [ -d "$bin" ] || continue
    for tool in "$bin"/*; do
      name=$(basename "$tool")
      case "$name" in
        cc | c++ | gcc* | g++* | clang* | cpp* | *-gcc* | *-g++* | *-c++* | *-cc) continue ;;
      esac
      [ -e "$dir/$name" ] || ln -s "$tool" "$dir/$name"
    done
  done
  echo "$PWD/.venv/bin:$dir"
}

failed=()
for leg in "${legs[@]}"; do
  env=()
  unset_vars=()
  case "$leg" in
    default-isa) env=(ATEN_CPU_CAPABILITY=default) ;;
    avx2-isa) env=(ATEN_CPU_CAPABILITY=avx2) ;;
    no-native) env=(MICROFORMERS_NATIVE=0 MICROFORMERS_QUANT_KERNELS=torch "PATH=$(no_compiler_path)"); unset_vars=(-u CXX -u CC) ;;
    threads-1) env=(OMP_NUM_THREADS=1 MICROFORMERS_TEST_THREADS=1) ;;
    threads-2) env=(OMP_NUM_THREADS=2 MICROFORMERS_TEST_THREADS=2) ;;
    *) echo "unknown leg '$leg' (default-isa, avx2-isa, no-native, threads-1, threads-2)" >&2; exit 2 ;;
  esac
  # inductor's cache per leg: with the shared one, the default-isa leg once failed to compile a kernel against
  # a precompiled header left by other runs ("'at::vec' has not been declared"); with a fresh cache it compiles
  inductor_cache=$(mktemp -d)
  env+=("TORCHINDUCTOR_CACHE_DIR=$inductor_cache")
  echo "== portability leg: $leg (${env[*]})"
  if ! env "${unset_vars[@]}" "${env[@]}" "$PY" -m pytest -q -n 2 --dist loadfile "${TESTS[@]}"; then
    failed+=("$leg")
  fi
  rm -rf "$inductor_cache"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "portability legs failed: ${failed[*]}" >&2
  exit 1
fi
echo "portability legs passed: ${legs[*]}"
