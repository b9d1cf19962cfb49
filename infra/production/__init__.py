"""Production backend: renders and validates slime + Megatron + SGLang commands for 8×H200 nodes."""
