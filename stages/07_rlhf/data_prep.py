"""Data prep of RLHF (paper §3.8): prompts only, scored on-policy by a reward model.

Production, each step counted in ``manifest.json``: the preference datasets of Table 13 (Arena Human
Preference, HelpSteer3, H-RLHF; ``data_prep.preference_sources``) → the validity filter (missing, empty and
degenerate responses dropped and counted per reason) → Table 13 (``table13.md``/``.json``: original →
valid, and the reward model's mean chosen/rejected score and tokens when ``RUFUS_RM_URL`` serves it)
→ the training prompts of ``data.train_sources`` (RA: H-RLHF's 75,815 valid prompts; the responses and
labels serve only that table) → exact overlap with the held-out prompts and the 8-gram screen against
``data.benchmarks``. The held-out ``rlhf_rm_score`` set is Arena-Hard v2's prompts (``data.arena_hard``),
scored by the reward model every ``production.eval_interval`` steps (RA Fig. 8b).

Embedded: the ``rlhf_chat`` tiny family (``data_prep.tiny_tasks.chat``: short requests about everyday
topics) and a Bradley–Terry reward model trained here, offline, on pairs labelled by a hidden rule
(``data_prep.tiny_tasks.preference_pairs``), standing in for Skywork-Reward-V2. Rows carry the reward
model's folder and the length penalty; the held-out ``rlhf_rule_score`` is the hidden rule itself.

``production_steps`` renders the reward model's server for the plan (``data.rm_server`` on
``production.extra_nodes.reward_model``) and a wait on ``RUFUS_RM_URL`` before training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from data_prep import preference_sources, preference_table
from data_prep.io import write_jsonl
from data_prep.manifest import Manifest
from data_prep.rl_stage import benchmark_items, prepare_prompts, screen_against_evals
from data_prep.schema import PromptRow
from data_prep.tiny_tasks import chat, preference_pairs, register_family, register_metric
from data_prep.tiny_tasks.rl_prep import rows_to_jsonl
from infra.layering import ConfigError

REWARD = "rlhf_rm"
FAMILY = chat.FAMILY

register_family(FAMILY, chat.generate)
register_metric(chat.RULE_METRIC, FAMILY, reward=chat.RULE_REWARD)  # descriptions: eval.registry
register_metric(chat.RM_METRIC, FAMILY, reward=REWARD)
register_metric("rlhf_answer_words", FAMILY, reward="answer_words")  # final-answer length (a guardrail)


class LengthPenalty(BaseModel):
    """Linear in the final answer's tokens (RM tokenizer), applied only when the raw score is positive."""

    model_config = ConfigDict(extra="forbid")
    coef: float = Field(ge=0.0, description="Score units taken off at budget_tokens (0: off).")
    budget_tokens: int = Field(ge=1, description="Answer length at which the penalty reaches coef.")


class RMServer(BaseModel):
    """How the plan serves the reward model (SGLang ``--is-embedding``, native ``/classify``)."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field("Skywork/Skywork-Reward-V2-Qwen3-8B", description="Hub id (the cluster's model_dir).")
    port: int = Field(30000, ge=1, le=65535)
    tp: int = Field(1, ge=1, description="Tensor parallel size of one replica.")
    dp: int = Field(8, ge=1, description="Replicas on the node (tp × dp GPUs).")


class TinyRewardModel(BaseModel):
    """Embedded: the pairs and training of the stand-in reward model."""

    model_config = ConfigDict(extra="forbid")
    train_pairs: int = Field(3000, ge=1)
    heldout_pairs: int = Field(400, ge=1)
    training: dict[str, Any] = Field(default_factory=dict, description="RewardModelTraining fields.")


class Params(BaseModel):
    """The ``data`` section of 07_rlhf/launch.yaml."""

    model_config = ConfigDict(extra="forbid")
    sources: list[preference_sources.PreferenceSource] = Field(
        default_factory=list, description="Table 13's datasets (production)."
    )
    train_sources: list[str] = Field(default_factory=list, description="Datasets whose prompts are trained.")
    arena_hard: str | None = Field(None, description="Arena-Hard v2 prompts (local file) for rlhf_rm_score.")
    benchmarks: dict[str, str] = Field(default_factory=dict, description="Benchmark name -> local file.")
    length_penalty: LengthPenalty
    heldout_per_metric: int = Field(200, ge=1)
    train_prompts: int | None = Field(None, ge=1, description="Embedded: tiny chat prompts to draw.")
    reward_model: TinyRewardModel = Field(default_factory=TinyRewardModel)
    rm_server: RMServer = Field(default_factory=RMServer)


def prepare(ctx: Any) -> dict[str, Any]:
    """Write train.jsonl, heldout/<metric>.jsonl and manifest.json into ``ctx.out_dir``."""
    from infra.embedded import reward_model_train
    from rewards import preference_rule

    code = [Path(__file__), Path(chat.__file__), Path(preference_pairs.__file__)]
    code += [Path(preference_rule.__file__), Path(reward_model_train.__file__)]
    code += [Path(preference_sources.__file__), Path(preference_table.__file__)]

    def production(params: Params, heldout: dict[str, Path], manifest: Manifest) -> list[PromptRow]:
        return _production_rows(params, heldout, manifest, ctx.out_dir)

    return prepare_prompts(ctx, f"rl_prompts:{ctx.stage.id}", Params, code, _embedded_rows, production)


def _with_reward(rows: list[PromptRow], **meta: Any) -> list[PromptRow]:
    return [r.model_copy(update={"metadata": {**r.metadata, **meta}}) for r in rows]


def _embedded_rows(
    params: Params, seed: int, heldout: dict[str, Path], manifest: Manifest
) -> list[PromptRow]:
    rm_dir, summary = preference_pairs.reward_model_dir(params.reward_model.model_dump())
    manifest.add_source(
        {
            "name": "data_prep.tiny_tasks.chat",
            "license": "generated",
            "note": "tiny chat prompts; a Bradley-Terry reward model on pairs labelled by a hidden rule",
            "reward_model": str(rm_dir),
            "reward_model_training": summary,
        }  # fmt: skip
    )
    manifest.step("reward_model", summary["pairs"], heldout_accuracy=summary["heldout_accuracy"])
    rm = {"reward_model_path": str(rm_dir)}
    validation = heldout[chat.RM_METRIC].parent.parent / "validation" / heldout[chat.RM_METRIC].name
    for path in (heldout[chat.RM_METRIC], *([validation] if validation.is_file() else [])):
        rows = [PromptRow.model_validate_json(x) for x in path.read_text().splitlines() if x.strip()]
        manifest.add_output(path, write_jsonl(path, rows_to_jsonl(_with_reward(rows, **rm))))
    tasks = chat.generate(params.train_prompts or 1, seed, "train")
    manifest.step("generated", len(tasks), rule="data_prep.tiny_tasks.chat train split")
    rows = screen_against_evals([t.prompt_row() for t in tasks], heldout, {}, manifest)
    return _with_reward(rows, reward=REWARD, length_penalty=params.length_penalty.model_dump(), **rm)


def _production_rows(
    params: Params, heldout: dict[str, Path], manifest: Manifest, out_dir: Path
) -> list[PromptRow]:
    from rewards.reward_model import reward_model_from_env

    names = [s.dataset for s in params.sources]
    if unknown := sorted(set(params.train_sources) - set(names)):
        raise ConfigError(f"data.train_sources: {unknown} not among data.sources ({', '.join(names)})")
    loaded = {}
    for i, source in enumerate(params.sources):
        key = f"data.sources[{i}]"
        pairs, counts = preference_sources.load_preference_source(source, key=key, manifest=manifest)
        loaded[source.dataset] = (counts, pairs)
    rm = reward_model_from_env()  # Table 13's score and token columns need the served reward model
    table = preference_table.build_table13(
        {name: (counts.original, pairs) for name, (counts, pairs) in loaded.items()},
        score=rm.score if rm else None,
        count_tokens=rm.count_tokens if rm else None,
    )
    drops = {name: dict(counts.dropped) for name, (counts, _) in loaded.items()}
    for path in preference_table.write_table13(table, out_dir, drops):
        manifest.add_output(path)
    manifest.set("table13", {"scored_by": rm.name if rm else None, "rows": [r.model_dump() for r in table]})
    if params.arena_hard:
        _write_arena_hard(Path(params.arena_hard), heldout[chat.RM_METRIC], manifest)
    pairs = [p for name in params.train_sources for p in loaded[name][1]]
    rows = preference_sources.to_prompt_rows(pairs)
    manifest.step("train_prompts", len(rows), sources=params.train_sources)
    rows = screen_against_evals(rows, heldout, benchmark_items(params.benchmarks), manifest)
    penalty = params.length_penalty.model_dump()
    return _with_reward(rows, reward=REWARD, family=FAMILY, length_penalty=penalty)


def _write_arena_hard(path: Path, out: Path, manifest: Manifest) -> None:
    """Arena-Hard v2's prompts (both categories) as the held-out ``rlhf_rm_score`` set, scored by the RM."""
    from eval.loaders import load

    result = load("arena_hard_v2_hp", path)
    meta = {"reward": REWARD, "family": "arena_hard_v2", "metric": chat.RM_METRIC}
    rows = [
        PromptRow(id=f"arena-hard-v2-{item.id}", prompt=item.messages, label=None, metadata=meta | item.meta)
        for item in result.items
    ]  # fmt: skip
    manifest.step("arena_hard_heldout", len(rows), dropped=result.dropped, reasons=result.reasons)
    manifest.add_output(out, write_jsonl(out, rows_to_jsonl(rows)))


def production_steps(stage_id: str, config: Any, cluster: Any) -> list[tuple[str, list[str], str]]:
    """The plan's steps before training: serve the reward model on its node, wait for it from the head.

    Rendered when ``production.extra_nodes.reward_model`` is set; otherwise the reward model is an input (a
    server already up, named by ``RUFUS_RM_URL`` and ``RUFUS_RM_TOKENIZER`` on the head node).
    """
    from infra.production.cluster import http_wait

    if not config.production.extra_nodes.get("reward_model"):
        return []
    rm = RMServer.model_validate(config.data.get("rm_server") or {})
    local = cluster.base_hf(rm.model)
    serve = [
        "python3", "-m", "sglang.launch_server", "--model-path", local, "--is-embedding",
        "--tp-size", str(rm.tp), "--dp-size", str(rm.dp), "--host", "0.0.0.0", "--port", str(rm.port),
    ]  # fmt: skip
    where = (
        "nodes: the reward-model node (production.extra_nodes.reward_model), outside the Ray cluster; then "
        f"on the head: export RUFUS_RM_URL=http://<reward-model node>:{rm.port} RUFUS_RM_TOKENIZER={local}"
    )
    wait = http_wait("${RUFUS_RM_URL}/health")
    return [("rm_server", serve, where), ("rm_wait", wait, "head")]


__all__ = ["FAMILY", "REWARD", "LengthPenalty", "Params", "RMServer", "prepare", "production_steps"]
