#!/usr/bin/env bash
# Makes (or completes) a virtual environment with PyTorch 2.x from PyPI for the speed baselines
# tools/bench_torch.py / tools/compare_torch.py and the data-parallel baseline tools/bench_ddp.py /
# tools/compare_ddp.py, and Hugging Face tokenizers / transformers for the tests that compare with
# them (test_bpe_trainer, test_hf_bert: skipped without); not needed to build or train frugal.
#
#   tools/setup_torch_venv.sh [VENV_DIR]      (default: .venv-torch in the repository root)
#
# Uses Debian's /usr/bin/python3 (3.11 on Debian 12; apt-get install python3-venv) and pinned
# versions. PyPI's Linux torch wheel is built with CUDA: even its CPU library links the CUDA
# runtime, so `import torch` needs the NVIDIA libraries it links (2.8 GB installed, torch itself
# 1.2 GB) although nothing here uses a GPU. Everything is installed with --no-deps to leave out
# what CPU training never loads (triton, cuda-bindings, cuSOLVER, NVTX, the CCCL headers; `pip
# check` lists them as missing, which is expected). TORCH_WHEEL=path installs an already
# downloaded torch 2.15.0 wheel instead of fetching it (540 MB). Safe to re-run.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$repo/.venv-torch}
torch=${TORCH_WHEEL:-torch==2.15.0}

packages=(
  "$torch"
  # the shared libraries torch's own libraries link (torch 2.15.0's pins, CUDA 13)
  nvidia-cuda-runtime==13.2.86 nvidia-cuda-cupti==13.2.86 nvidia-cuda-nvrtc==13.2.86
  nvidia-cublas==13.4.1.3 nvidia-cufft==12.2.0.57 nvidia-cufile==1.17.1.22
  nvidia-cusparse==12.7.10.12 nvidia-nvjitlink==13.5.37 nvidia-cusparselt-cu13==0.8.1
  nvidia-nccl-cu13==2.30.7 nvidia-nvshmem-cu13==3.7.2 nvidia-cudnn-cu13==9.26.0.51
  # torch's pure-Python requirements, and numpy, without which importing torch warns
  filelock==4.2.12 typing-extensions==4.16.0 sympy==1.14.0 mpmath==1.3.0 networkx==3.6.1
  jinja2==3.1.6 markupsafe==3.0.4 fsspec==2026.9.0 numpy==2.4.6
  # Hugging Face tokenizers and transformers, for the tests that compare frugal's tokenizers and
  # exports with them (they skip without), and their requirements
  tokenizers==0.23.3 transformers==5.24.0 huggingface_hub==2.4.0 hf-xet==1.8.0 safetensors==0.8.0
  regex==2026.11.19 packaging==26.4 PyYAML==6.0.4 tqdm==4.70.1 httpx2==2.16.2 httpcore2==2.16.2
  h11==0.16.0 anyio==4.16.0 idna==3.20 truststore==0.10.5 typer==0.29.2 click==8.5.1 rich==15.0.0
  markdown-it-py==4.3.0 mdurl==0.1.2 Pygments==2.21.0 shellingham==1.5.4 annotated-doc==0.0.7
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
)

if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${packages[@]}"
"$venv/bin/python" - <<'EOF'
import sys

import torch
import torch.distributed as dist

assert dist.is_available() and dist.is_gloo_available(), "this torch has no gloo backend"
x = torch.randn(64, 64)
assert torch.allclose(x @ torch.eye(64), x)
import tokenizers
import transformers

print(f"torch {torch.__version__} ready (CPU, gloo), tokenizers {tokenizers.__version__}, "
      f"transformers {transformers.__version__} in {sys.prefix}")
EOF
