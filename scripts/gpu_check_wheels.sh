#!/usr/bin/env bash
# Wheels `make gpu-check` needs on the lent GPU machine (Python 3.12, torch 2.11 + CUDA 13, no internet;
# see /work/.library/device/README.md and ../shared/STACK-NOTES.md): the versions pyproject.toml pins
# for what the machine lacks or holds in another version. Run once here, in the repository root:
#   echo /.whl/ >> .git/info/exclude && scripts/gpu_check_wheels.sh
# then each device call carries `.whl` and starts with
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site:$PWD OMP_NUM_THREADS=8 HF_HUB_OFFLINE=1 WANDB_MODE=disabled PYTHONUNBUFFERED=1
set -euo pipefail
dest=${1:-.whl}
mkdir -p "$dest"
download() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d "$dest" "$@"
}
download trl==1.16.0 transformers==5.23.0 datasets==5.2.0 peft==0.21.2 dill multiprocess soundfile cffi pycparser
# DeepSpeed ships only an sdist: a pure-Python wheel built here (its ops compile on the GPU machine, which
# has nvcc and ninja), and what it needs that the machine lacks.
DS_BUILD_OPS=0 python3 -m pip wheel -q --no-deps --no-build-isolation -w "$dest" deepspeed==0.18.3
download hjson pydantic pydantic-core annotated-types typing-inspection
du -sh "$dest"
