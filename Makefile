.PHONY: install install-test test test-portability chat lint bench mutation dist

install:
	scripts/install.sh

install-test:
	scripts/install.sh --test

# The test command (README and .ci/run): install everything, then run the whole suite.
test: install-test
	.venv/bin/python -m pytest -q -n 2 --dist loadfile

# The numerics-heavy part of the suite under other CPUs' code paths (scripts/test-portability.sh):
# no AVX2, no AVX-512, no native ops and no compiler, 1 and 2 threads. LEGS="no-native" picks legs.
test-portability: install-test
	scripts/test-portability.sh $(LEGS)

# The main job: chat with the embedded default model (SmolLM2-135M-Instruct).
chat: install
	.venv/bin/microformers chat

lint:
	.venv/bin/ruff check .

bench: install-test
	.venv/bin/python bench/run_all.py

# Mutation testing of the kernel, SDK and generation plugin (slow; not part of `make test` or CI's default run).
# MODULES="microformers/plugins.py ..." picks modules; docs/reliability.md has the scores.
mutation: install-test
	scripts/mutation.sh $(MODULES)

# Every distribution's wheel and sdist in dist/, with a PEP 503 index in dist/simple/ (scripts/dist.py).
dist: install
	.venv/bin/python -m pip install --disable-pip-version-check -q build
	.venv/bin/python scripts/dist.py
