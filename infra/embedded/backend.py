"""The ``embedded`` backend: trains, evaluates and checks stages locally (CPU, or one GPU when present)."""

from __future__ import annotations

import json
from pathlib import Path

from infra.backends import StageJob, TrainResult
from infra.embedded.evaluate import evaluate_stage
from infra.embedded.models import materialize
from infra.recipe import BaseModelSpec

_TRAINERS = {
    "sft": lambda job: __import__("infra.embedded.sft", fromlist=["train_sft"]).train_sft(job),
    "rl": lambda job: __import__("infra.embedded.rl", fromlist=["train_rl"]).train_rl(job),
}


def check_loads(checkpoint: Path) -> None:
    """Raise ``ValueError`` naming what is wrong unless ``checkpoint`` loads (config, tokenizer, weights)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    checkpoint = Path(checkpoint)
    if not (checkpoint / "config.json").is_file():
        raise ValueError(f"{checkpoint}: not an HF folder (config.json missing)")
    try:
        config = AutoConfig.from_pretrained(checkpoint)
    except Exception as exc:  # noqa: BLE001 - re-raised with the folder named
        raise ValueError(f"{checkpoint}/config.json does not load: {exc}") from exc
    try:
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{checkpoint}: tokenizer does not load: {exc}") from exc
    if not tokenizer.chat_template:
        raise ValueError(f"{checkpoint}: tokenizer has no chat template")
    if not any(checkpoint.glob("*.safetensors")) and not any(checkpoint.glob("*.bin")):
        raise ValueError(f"{checkpoint}: no weight files (*.safetensors / *.bin)")
    try:
        model = AutoModelForCausalLM.from_pretrained(checkpoint)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{checkpoint}: weights do not load: {exc}") from exc
    rows = model.get_input_embeddings().weight.shape[0]
    if rows < len(tokenizer):
        raise ValueError(
            f"{checkpoint}: {len(tokenizer)} tokens but only {rows} embedding rows ({config.model_type})"
        )


class EmbeddedBackend:
    """Backend of the ``embedded`` profile (see ``infra.backends.Backend``)."""

    name = "embedded"

    def materialize_base(self, spec: BaseModelSpec, dest: Path, seed: int) -> Path:
        """Write the base model ``spec.model`` as an HF folder at ``dest`` (idempotent) and return it."""
        return materialize(spec.model, Path(dest), seed, spec.revision)

    def train(self, job: StageJob) -> TrainResult:
        """Train the stage (SFT or RL by ``kind``), resuming from checkpoints; idempotent once exported."""
        job.logs_dir.mkdir(parents=True, exist_ok=True)
        result = _TRAINERS[job.stage.config.kind](job)
        (job.logs_dir / "train_result.json").write_text(
            json.dumps({"selected_step": result.selected_step, "summary": result.summary}, indent=1) + "\n"
        )
        return result

    def evaluate(self, job: StageJob, checkpoint: Path) -> dict[str, float]:
        """Score ``checkpoint`` on every target and guardrail held-out set of the stage."""
        return evaluate_stage(job, Path(checkpoint))

    def check_loads(self, checkpoint: Path) -> None:
        """Raise unless ``checkpoint`` loads (config, tokenizer with chat template, weights)."""
        check_loads(Path(checkpoint))
