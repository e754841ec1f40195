#!/usr/bin/env bash
# Mutation testing (mutmut 3) over the kernel, the SDK and the generation plugin. Not part of CI's default run.
#
#   scripts/mutation.sh                      # the default sample of modules (see DEFAULT_MODULES)
#   scripts/mutation.sh microformers/plugins.py microformers_sdk/cache.py   # chosen modules
#   MUTATION_CHILDREN=2 scripts/mutation.sh  # parallel workers (default 1: be kind to shared machines)
#   MUTATION_TESTS="tests/kernel/test_config.py" scripts/mutation.sh microformers/configuration.py
#                                            # judging tests (workspace paths); narrow = seconds per mutant
#   MUTATION_TIMEOUT_CONSTANT=30 MUTATION_TIMEOUT_MULTIPLIER=15   # mutmut's time limit per mutant is
#       (tests' clean duration + constant) * multiplier seconds of wall clock; every mutant's worker also
#       imports the package and collects its tests, which the clean duration does not count, so on a
#       loaded machine the default constant (1 s) turns slow-but-passing runs into false "timeouts".
#   MUTATION_NICE=0                          # scheduling niceness of the run (default 10); at 10 on a machine
#                                            # busy with other work at 0 each mutant waits minutes for CPU
#   TORCH_EXTENSIONS_DIR=...                # native-op build cache (default: private to the workspace)
#   MUTATION_COVERED_ONLY=false              # also mutate lines the judging tests never run (they show as
#                                            # "no tests"); default true (mutmut's mutate_only_covered_lines)
#   MUTATION_EXTRA_TESTS="tests/integration/test_remote_code.py plugins/gpt2/tests"
#                                            # more test files/folders (repository paths) copied into the workspace
#                                            # under tests/extra/<path>; name them in MUTATION_TESTS as such
#   MUTATION_SAMPLE=70 MUTATION_SEED=19      # run a uniform random sample of the module's mutants (Python's
#                                            # random.Random(seed).sample over the sorted names; list written to
#                                            # .mutation/<name>-sample.txt) instead of every mutant
#   MUTATION_ONLY="microformers_generation.logits_process.xǁMinLengthLogitsProcessorǁ__init____mutmut_18 ..."
#                                            # run only these mutants (names as `mutmut results` prints them,
#                                            # separated by spaces or newlines: "$(cat list.txt)" works)
#   MUTATION_PRELOAD="microformers microformers_sdk"   # also import these in the fork server (saves their import
#                                            # per mutant); only for modules whose code under test does not run
#                                            # at import time (never for plugins.py, whose Registry() is built then)
#
# It never touches the working tree: the three packages and their tests are copied into a workspace
# (.mutation/work, git-ignored) laid out as mutmut expects (src/<package>, tests), and mutmut mutates
# the copy. Tools live in .mutation/venv, which sees the project's .venv through a .pth line.
# Results: .mutation/work/mutants (mutmut's state); the summary is printed at the end and written to
# .mutation/<name>-summary.txt. Inspect one survivor with: (cd .mutation/<name> && ../venv/bin/mutmut show MUTANT)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STATE="$ROOT/.mutation"
NAME="${MUTATION_NAME:-work}"  # a separate workspace per name, so two runs can proceed side by side
WORK="$STATE/$NAME"
VENV="$STATE/venv"
# The SDK's native op is built from the workspace's own copy of its source: a private extension cache keeps
# workspaces and the project's own test runs from rebuilding it for one another (and from waiting on a lock
# file that a worker killed mid-build leaves behind in the shared cache).
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$WORK/torch_extensions}"
# One OpenMP thread: a worker forked from a server whose OpenMP pool has started waits forever at the pool's barrier
# (seen in LayerNorm under the BERT tests, which set no thread count of their own).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
DEFAULT_MODULES=(
    microformers/configuration.py
    microformers/plugins.py
    microformers/weights.py
    microformers_sdk/cache.py
    microformers_sdk/masks.py
)
MODULES=("$@")
# The tests that judge the mutants (folders of the workspace): MUTATION_TESTS="tests/sdk" is much faster
TESTS="${MUTATION_TESTS:-tests/kernel tests/sdk tests/generation}"
[ ${#MODULES[@]} -eq 0 ] && MODULES=("${DEFAULT_MODULES[@]}")

if [ ! -x "$VENV/bin/mutmut" ]; then
    python_bin="$(readlink -f "$ROOT/.venv/bin/python")"
    "$python_bin" -m venv "$VENV"
    site_dir="$("$ROOT/.venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
    own_site="$("$VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
    echo "import site; site.addsitedir('$site_dir')" > "$own_site/zz_project_venv.pth"
    "$VENV/bin/pip" install -q "mutmut==3.8.1"
fi

rm -rf "$WORK"
mkdir -p "$WORK/src" "$WORK/tests" "$STATE/tree"
# The committed state (HEAD) by default, so half-done edits in a shared working tree do not skew the score;
# MUTATION_TREE=worktree mutates the working tree as it is.
TREE="$STATE/$NAME-tree"
rm -rf "$TREE" && mkdir -p "$TREE"
SUBTREES=(kernel/src/microformers sdk/src/microformers_sdk plugins/generation/src/microformers_generation
          kernel/tests sdk/tests plugins/generation/tests conftest.py tests/generation_stand_ins.py)
read -r -a EXTRA <<< "${MUTATION_EXTRA_TESTS:-}"
SUBTREES+=("${EXTRA[@]}")
if [ "${MUTATION_TREE:-head}" = worktree ]; then
    (cd "$ROOT" && cp -r --parents "${SUBTREES[@]}" "$TREE/")
else
    git -C "$ROOT" archive HEAD "${SUBTREES[@]}" | tar -x -C "$TREE"
fi
cp -r "$TREE/kernel/src/microformers" "$TREE/sdk/src/microformers_sdk" \
    "$TREE/plugins/generation/src/microformers_generation" "$WORK/src/"
cp -r "$TREE/kernel/tests" "$WORK/tests/kernel"
cp -r "$TREE/sdk/tests" "$WORK/tests/sdk"
cp -r "$TREE/plugins/generation/tests" "$WORK/tests/generation"
cp "$TREE/conftest.py" "$WORK/"
cp "$TREE/tests/generation_stand_ins.py" "$WORK/tests/"  # imported by the generation tests' conftest
for extra in "${EXTRA[@]}"; do
    mkdir -p "$WORK/tests/extra/$(dirname "$extra")"
    cp -r "$TREE/$extra" "$WORK/tests/extra/$extra"
done
find "$WORK" -name __pycache__ -prune -exec rm -rf {} +
ln -s "$ROOT/.test-plugins" "$WORK/.test-plugins"
ln -s "$ROOT/tests/plugins" "$WORK/tests/plugins"

# Tests that already fail (or fail to import) on the unmutated code would make every mutant look killed;
# find them once and deselect them (listed in .mutation/deselected.txt).
(cd "$WORK" && PYTHONPATH=src PYTHONDONTWRITEBYTECODE=1 nice -n "${MUTATION_NICE:-10}" "$VENV/bin/python" -m pytest -q -p no:randomly \
    -o addopts="--import-mode=importlib -p no:cacheprovider" -p no:warnings -rfE \
    --continue-on-collection-errors $TESTS > "$STATE/$NAME-baseline.txt" 2>&1 || true)
grep -E '^(FAILED|ERROR) ' "$STATE/$NAME-baseline.txt" | awk '{print $2}' | sed 's/ - .*//' | sort -u > "$STATE/$NAME-deselected.txt" || true
deselect=""
while read -r node; do
    [ -z "$node" ] && continue
    case "$node" in *::*) deselect+="\"--deselect\", \"$node\", ";; *) deselect+="\"--ignore\", \"$node\", ";; esac
done < "$STATE/$NAME-deselected.txt"
echo "baseline: $(tail -1 "$STATE/$NAME-baseline.txt"); deselected $(wc -l < "$STATE/$NAME-deselected.txt") failing tests/files"

selection=""
for t in $TESTS; do selection+="\"$t\", "; done
paths=""
for m in "${MODULES[@]}"; do paths+="\"src/$m\", "; done
cat > "$WORK/pyproject.toml" <<EOF
[tool.pytest.ini_options]
addopts = "--import-mode=importlib -p no:cacheprovider"
pythonpath = ["tests", ".test-plugins"]
norecursedirs = ["tests/plugins"]
filterwarnings = ["ignore::DeprecationWarning:jinja2.*"]
markers = ["slow: real-model tests"]

[tool.mutmut]
source_paths = ["src"]
only_mutate = [${paths}]
pytest_add_cli_args_test_selection = [${selection}]
pytest_add_cli_args = [${deselect}]
also_copy = ["conftest.py", ".test-plugins", "tests"]
process_isolation = "forkserver"
# Workers are forked from a server that has imported only third-party modules (torch, ...): collecting the
# tests there would run plugin discovery once, before any mutant is switched on, and every mutant of the
# discovery code would survive for that reason alone.
forkserver_warmup = "import"
preload_modules_file = "preload.txt"
mutate_only_covered_lines = ${MUTATION_COVERED_ONLY:-true}
timeout_constant = ${MUTATION_TIMEOUT_CONSTANT:-20.0}
timeout_multiplier = ${MUTATION_TIMEOUT_MULTIPLIER:-15.0}
EOF

cd "$WORK"
printf '%s\n' torch numpy safetensors safetensors.torch jinja2 pluggy attrs packaging huggingface_hub tokenizers \
    transformers pytest ${MUTATION_PRELOAD:-} > preload.txt
export PYTHONDONTWRITEBYTECODE=1
read -r -d "" -a chosen <<< "${MUTATION_ONLY:-}" || true  # names separated by spaces or newlines
if [ -n "${MUTATION_SAMPLE:-}" ]; then
    # Generate the mutants only (the first steps of mutmut's `run`), list them, and draw the sample.
    nice -n "${MUTATION_NICE:-10}" "$VENV/bin/python" - <<'EOF'
import os
import mutmut.__main__ as mm
mm.set_mutant_under_test("mutant_generation")
os.makedirs("mutants", exist_ok=True)
mm.copy_src_dir()
mm.copy_also_copy_files()
mm.setup_source_paths()
mm.store_lines_covered_by_tests()
mm.create_mutants(1)
EOF
    "$VENV/bin/mutmut" results --all true > "$STATE/$NAME-all.txt" 2>&1 || true
    "$VENV/bin/python" - "$STATE/$NAME-all.txt" "$MUTATION_SAMPLE" "${MUTATION_SEED:-19}" > "$STATE/$NAME-sample.txt" <<'EOF'
import random, re, sys
names = sorted(m.group(1) for line in open(sys.argv[1]) if (m := re.match(r"\s*(\S+__mutmut_\d+): ", line)))
k = min(int(sys.argv[2]), len(names))
print("\n".join(sorted(random.Random(int(sys.argv[3])).sample(names, k))))
EOF
    mapfile -t chosen < "$STATE/$NAME-sample.txt"
    [ ${#chosen[@]} -gt 0 ] || { echo "no mutants to sample (see $STATE/$NAME-all.txt)" >&2; exit 1; }
    echo "sample: ${#chosen[@]} of $(grep -c __mutmut_ "$STATE/$NAME-all.txt") mutants (seed ${MUTATION_SEED:-19})"
fi
nice -n "${MUTATION_NICE:-10}" "$VENV/bin/mutmut" run --max-children "${MUTATION_CHILDREN:-1}" "${chosen[@]}" || true
"$VENV/bin/mutmut" results --all true > "$STATE/$NAME-results.txt" 2>&1 || true
"$VENV/bin/python" - "$STATE" "$NAME" <<'EOF'
import collections, pathlib, re, sys
state = pathlib.Path(sys.argv[1])
name = sys.argv[2]
counts = collections.Counter()
per_module = collections.defaultdict(collections.Counter)
for line in (state / f"{name}-results.txt").read_text().splitlines():
    m = re.match(r"\s*([\w.]+)__mutmut_\d+: (.+)", line)
    if not m:
        continue
    module = m.group(1).rsplit(".x", 1)[0].rsplit(".xǁ", 1)[0]
    status = m.group(2).strip()
    if status == "not checked":  # outside the sample
        continue
    counts[status] += 1
    per_module[module.split("ǁ")[0]][status] += 1
lines = []
for module, c in sorted(per_module.items()):
    total = sum(c.values())
    lines.append(f"{module}: {c['killed']}/{total} killed " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
total = sum(counts.values())
lines.append(f"TOTAL: {counts['killed']}/{total} killed ({100 * counts['killed'] / max(total, 1):.1f}%) " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
(state / f"{name}-summary.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
