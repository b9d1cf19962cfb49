"""GLM-4.5-Air (106B total / 12B active MoE) model arguments for Megatron, as slime's model file sets them.

The list reproduces slime's ``scripts/models/glm4.5-106B-A12B.sh`` at the pinned commit flag for flag
(one dense layer then 45 MoE layers, 128 experts, top-8 sigmoid routing with expert bias). It is kept as
data here, not sourced from the image, so the rendered command is complete and checkable without the
container; :func:`infra.production.validate.validate_model_args` compares it to the HF ``config.json``
shape keys slime cross-checks at start-up.
"""

from __future__ import annotations

N_DENSE_LAYERS = 1
N_MOE_LAYERS = 45
NUM_LAYERS = N_DENSE_LAYERS + N_MOE_LAYERS
NUM_ATTENTION_HEADS = 96
NUM_QUERY_GROUPS = 8
NUM_EXPERTS = 128
#: Per-expert FFN width of the routed and the shared expert (``moe_intermediate_size``).
MOE_FFN_HIDDEN = 1408
SHARED_EXPERT_HIDDEN = 1408
VOCAB_SIZE = 151552
#: Context length of GLM-4.5-Air (HF ``max_position_embeddings``).
MODEL_CONTEXT = 131072

#: Stop token ids of slime's GLM-4.5 runs: <|endoftext|>, <|user|>, <|observation|>.
GLM_STOP_TOKEN_IDS = (151329, 151336, 151338)
#: SGLang parser names for GLM-4.5 in the pinned SGLang.
GLM_TOOL_CALL_PARSER = "glm45"
GLM_REASONING_PARSER = "glm45"


def glm45_air_model_args() -> list[str]:
    """Return the Megatron model flags of GLM-4.5-Air (slime ``scripts/models/glm4.5-106B-A12B.sh``)."""
    return [
        "--disable-bias-linear",
        "--group-query-attention",
        "--num-attention-heads",
        str(NUM_ATTENTION_HEADS),
        "--num-query-groups",
        str(NUM_QUERY_GROUPS),
        "--kv-channels",
        "128",
        "--num-layers",
        str(NUM_LAYERS),
        "--hidden-size",
        "4096",
        "--ffn-hidden-size",
        "10944",
        "--add-qkv-bias",
        "--normalization",
        "RMSNorm",
        "--position-embedding-type",
        "rope",
        "--rotary-percent",
        "0.5",
        "--swiglu",
        "--untie-embeddings-and-output-weights",
        "--vocab-size",
        str(VOCAB_SIZE),
        "--rotary-base",
        "1000000",
        "--moe-ffn-hidden-size",
        str(MOE_FFN_HIDDEN),
        "--moe-shared-expert-intermediate-size",
        str(SHARED_EXPERT_HIDDEN),
        "--moe-router-pre-softmax",
        "--moe-router-score-function",
        "sigmoid",
        "--moe-router-enable-expert-bias",
        "--moe-router-bias-update-rate",
        "0",
        "--moe-router-load-balancing-type",
        "seq_aux_loss",
        "--moe-token-dispatcher-type",
        "alltoall",
        "--moe-router-topk",
        "8",
        "--moe-layer-freq",
        f"[0]*{N_DENSE_LAYERS}+[1]*{N_MOE_LAYERS}",
        "--num-experts",
        str(NUM_EXPERTS),
        "--moe-grouped-gemm",
        "--moe-router-dtype",
        "fp32",
        "--moe-permute-fusion",
        "--moe-aux-loss-coeff",
        "0",
    ]


#: HF config.json keys slime's ``_hf_validate_args`` compares with the flags above.
HF_SHAPE = {
    "hidden_size": 4096,
    "num_attention_heads": NUM_ATTENTION_HEADS,
    "num_hidden_layers": NUM_LAYERS,
    "intermediate_size": 10944,
    "moe_intermediate_size": MOE_FFN_HIDDEN,
    "n_routed_experts": NUM_EXPERTS,
    "num_experts_per_tok": 8,
    "num_key_value_heads": NUM_QUERY_GROUPS,
    "vocab_size": VOCAB_SIZE,
    "tie_word_embeddings": False,
    "rope_theta": 1000000,
}
