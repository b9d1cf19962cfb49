# Rufus-Air production image: the pinned slime image plus this repository (hooks, data prep, rewards).
#
# Base: slimerl/slime at slime 624b824a (docker/version.txt nightly-dev-20260810a): SGLang v0.5.15.post1
# (cu129, patched), Megatron-LM 1dcf0daf at /root/Megatron-LM (+ slime patches), TransformerEngine 2.16.1,
# flash-attn 2.8.3 + FA3, slime at /root/slime. Pin the digest of the tag you pull for reproducibility.
#
# The paper's pinned stack (RA Table 15) differs: Megatron-LM 3714d81, SGLang 24c9100, PyTorch 2.9.1
# (cu129), TransformerEngine 2.10.0, FlashAttention 2.7.4.post1, Apex 10417ac, mbridge 89eb108,
# Strands Agents 1.50.2. This image keeps the slime snapshot's own versions instead (its torch, TE,
# flash-attn, SGLang, Megatron); mbridge is gone because this slime loads HF folders natively.
ARG SLIME_IMAGE=slimerl/slime:nightly-dev-20260810a-cu129
FROM ${SLIME_IMAGE}

WORKDIR /workspace/rufus-recipes
COPY . /workspace/rufus-recipes
# --no-deps for the package itself, then only the extras' pure-Python deps: the image's torch,
# transformers and CUDA stack must stay exactly as slime pinned them.
RUN pip install --no-cache-dir --no-deps -e . \
 && pip install --no-cache-dir "pydantic>=2.6" "pyyaml>=6" "typer>=0.12" "rich>=13" \
      "math-verify>=0.7" "reasoning-gym>=0.1.19" "datasets>=2.19" "pyahocorasick>=2.0" "datasketch>=1.6" "xxhash>=3" \
      "strands-agents>=1.50" "mcp>=1.10" \
 && python -c "import torch, infra.production.slime_hooks; print('torch', torch.__version__)"

ENV PYTHONPATH=/root/Megatron-LM/:/workspace/rufus-recipes
