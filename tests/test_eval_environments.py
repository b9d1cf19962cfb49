"""Held-out rows are played in the environment that wrote them, and a metric nobody could play is not a 0.

An agent stage's guardrails include rows of other agent environments (stage 06 keeps stage 05's terminal
tasks and stage 04's AWM tasks): played in the stage's own world they all aborted and were reported as
0.0. The environments, the micro model and the evaluation are real; the aborting row is a terminal task
whose task folder does not exist (a real infrastructure failure of the real environment).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "embedded"))
from embedded_jobs import micro_base, toy_job  # noqa: E402

from data_prep.schema import PromptRow  # noqa: E402
from infra.embedded import evaluate as eval_mod  # noqa: E402
from infra.embedded.evaluate import row_environment  # noqa: E402
from infra.environments import SINGLE_TURN, build_environment  # noqa: E402


def _agent_row(spec: str, **meta: object) -> PromptRow:
    """A task row as ``infra.environments.agent.task_row`` writes it, for agent environment ``spec``."""
    options = {"env": spec, "concurrency": 4, "ray_actors": 0}
    metadata = {"environment": "agent", "environment_options": options, **meta}
    return PromptRow(id=f"{spec}-0", prompt=[{"role": "user", "content": "do it"}], metadata=metadata)


def test_the_stage_environment_plays_only_the_rows_it_serves():
    stage = build_environment(
        "agent", {"env": "calculator:turns=2", "concurrency": 8}, reward="agent_calculator"
    )
    own = stage.task_rows(1, seed=0)[0]
    assert own.metadata["environment_options"]["env"] == "calculator:turns=2"
    assert row_environment(own, stage, "agent_calculator") is stage
    # the same environment with other spec options: the stage's settings hold
    assert row_environment(_agent_row("calculator"), stage, "agent_calculator") is stage

    other = row_environment(_agent_row("awm_tiny"), stage, "agent_calculator")
    assert other is not stage and other.name == "agent" and other.options.env == "awm_tiny"

    plain = PromptRow(id="q", prompt=[{"role": "user", "content": "2+2?"}], metadata={})
    assert row_environment(plain, stage, "math").name == SINGLE_TURN
    single = build_environment(SINGLE_TURN, reward="math")
    assert row_environment(plain, single, "math") is single
    assert row_environment(_agent_row("awm_tiny"), single, "math").options.env == "awm_tiny"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return micro_base(tmp_path_factory.mktemp("evalenv"))


def test_a_metric_whose_every_episode_aborts_is_left_out_not_scored_zero(tmp_path, base, caplog):
    job = toy_job("toy_rl", tmp_path / "run", base)
    gone = tmp_path / "no-such-task"
    row = _agent_row(
        "harbor_tiny",
        env="harbor_tiny",
        task="gone",
        task_dir=str(gone),
        task_id="harbor-gone",
        limits={"max_tool_calls": 1, "max_iterations": 1, "max_new_tokens": 8},
        reward="harbor_tests",
    )
    (job.heldout_dir / "terminal_task_success.jsonl").write_text(row.model_dump_json() + "\n")
    job.stage.config.eval.guardrails = ["terminal_task_success"]
    with caplog.at_level(logging.WARNING, logger=eval_mod.__name__):
        scores = eval_mod.evaluate_stage(job, base)
    assert set(scores) == {"toy_a"}  # the target is scored; the unplayable guardrail is missing, not 0.0
    details = json.loads((job.logs_dir / "eval_details_input.json").read_text())["details"]
    unplayed = details["terminal_task_success"]
    assert unplayed["prompts"] == 0 and unplayed["aborted"] == 2  # 1 row x samples_per_prompt 2
    assert sum(unplayed["aborted_by"].values()) == 2
    assert "terminal_task_success.jsonl: every episode aborted" in caplog.text
    assert details["toy_a"]["prompts"] > 0 and "aborted_by" not in details["toy_a"]
