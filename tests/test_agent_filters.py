"""Agent-episode pass-rate filters: the correctness/difficulty rules and the three episode runners.

The rules are checked with runners given as plain result tables (their input, not a double). The runners
are real: gold replay runs the sandboxed server and verifier; the endpoint and checkpoint runners run the
agent loop against a ``/generate`` server. Doubles sit only at the model: :class:`GoldPlayer` is the
backend behind that server (a random-weight model cannot be steered into tool calls), so for the
endpoint runner the server plus this backend stands in for a remote SGLang server at its HTTP boundary
(same wire format); one checkpoint-runner test samples the real random-weight ``micro`` model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from agents_scripted import micro_tokenizer, tid

from data_prep.agent_filters import (
    AgentEndpoint,
    CheckpointRunner,
    EndpointRunner,
    GoldReplayRunner,
    PassCount,
    awm_tasks,
    filter_tasks,
    record,
)
from data_prep.awm_generate import generate
from data_prep.manifest import Manifest
from infra.agents.awm.release import ReleaseError
from infra.agents.contract import AgentTask
from infra.agents.local_server import GenerateServer, micro_model_dir
from infra.config_rl import RolloutConfig
from infra.embedded.generation import Generation
from infra.sandbox import check_isolation
from rewards.contract import RewardResult

PASS, FAIL = RewardResult(score=1.0), RewardResult(score=0.0, failure="incomplete")
ABORT = RewardResult(score=0.0, aborted=True, failure="environment")


def _task(i: int) -> AgentTask:
    return AgentTask(id=f"t{i}", messages=[{"role": "user", "content": f"task {i}"}])


def table_runner(table: dict[str, list[RewardResult]], calls: list[list[str]]):  # noqa: ANN201
    def run(tasks: list[AgentTask], n: int) -> list[list[RewardResult]]:
        calls.append([t.id for t in tasks])
        return [table[t.id][:n] for t in tasks]

    return run


def test_rules_keep_learnable_tasks_and_name_every_drop() -> None:
    tasks = [_task(i) for i in range(7)]
    policy = {
        "t0": [PASS, FAIL, FAIL, PASS],  # sometimes: kept without asking the teacher
        "t1": [PASS, PASS, PASS, PASS],  # always: too easy
        "t2": [PASS, ABORT, PASS, PASS],  # always among the scored ones
        "t3": [FAIL, FAIL, FAIL, FAIL],  # never; the teacher solves it: kept
        "t4": [FAIL, FAIL, ABORT, FAIL],  # never; nor the teacher: dropped
        "t5": [ABORT, ABORT, ABORT, ABORT],  # nothing scored
        "t6": [FAIL, FAIL, FAIL, FAIL],  # never; the teacher only aborted: undecided
    }
    teacher = {"t3": [FAIL, PASS], "t4": [FAIL, FAIL], "t6": [ABORT, ABORT]}
    p_calls: list[list[str]] = []
    t_calls: list[list[str]] = []
    report = filter_tasks(
        tasks, table_runner(policy, p_calls), 4, teacher=table_runner(teacher, t_calls), teacher_n=2
    )
    assert [t.id for t in report.kept] == ["t0", "t3"]
    assert report.dropped == {"always_passed": ["t1", "t2"], "never_passed": ["t4"], "aborted": ["t5", "t6"]}
    assert p_calls == [[t.id for t in tasks]] and t_calls == [["t3", "t4", "t6"]]
    assert report.policy["t2"] == PassCount(3, 3, 1) and report.teacher["t3"] == PassCount(1, 2, 0)
    assert report.counts() == {
        "kept": 2,
        "dropped_never_passed": 1,
        "dropped_always_passed": 2,
        "aborted": 2,
        "aborted_episodes": 1 + 1 + 4 + 2,  # policy t2, t4, t5; teacher t6
    }
    assert report.histogram() == {"0/0": 1, "0/3": 1, "0/4": 2, "2/4": 1, "3/3": 1, "4/4": 1}
    manifest = Manifest("t")
    record(report, manifest, "agent_pass_rate", samples=4)
    (step,) = manifest.data["steps"]
    assert step["step"] == "agent_pass_rate" and step["count"] == 2 and step["dropped_always_passed"] == 2
    assert step["teacher_pass_histogram"] == {"0/2": 1, "1/2": 1, "0/0": 1} and step["samples"] == 4


def test_rules_can_be_turned_off_and_bad_runner_output_is_named() -> None:
    tasks = [_task(i) for i in range(3)]
    policy = {"t0": [PASS, PASS], "t1": [FAIL, FAIL], "t2": [PASS, FAIL]}
    calls: list[list[str]] = []
    only_hard = filter_tasks(tasks, table_runner(policy, calls), 2, difficulty=False)
    assert [t.id for t in only_hard.kept] == ["t0", "t2"] and only_hard.dropped == {"never_passed": ["t1"]}
    only_easy = filter_tasks(tasks, table_runner(policy, calls), 2, correctness=False)
    assert [t.id for t in only_easy.kept] == ["t1", "t2"]
    with pytest.raises(ValueError, match="policy runner returned 1 groups for 3 tasks"):
        filter_tasks(tasks, lambda ts, n: [[PASS]], 2)
    with pytest.raises(ValueError, match="task id 't0' appears more than once"):
        filter_tasks([_task(0), _task(0)], table_runner(policy, calls), 2)


# ---- real runners on a generated release ---------------------------------------------------------------
@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not check_isolation().ok:
        if os.geteuid() != 0:
            pytest.skip("sandbox isolation needs root")
        pytest.fail("sandbox isolation unavailable: " + "; ".join(check_isolation().problems))
    out = tmp_path_factory.mktemp("awm")
    generate(out, seed=1, tasks=4, domains=["team_calendar"])
    return out


def _spec(release: Path) -> str:
    return f"awm:release={release},workers=1,max_context_tokens=16384,max_new_tokens=512"


def _break_gold(release: Path, task_idx: int) -> Path:
    """Return a copy of the release whose gold for ``task_idx`` does nothing (the teacher then fails it)."""
    import shutil

    copy = release.parent / f"{release.name}-broken{task_idx}"
    if not copy.exists():
        shutil.copytree(release, copy)
        path = copy / "gold_actions.jsonl"
        recs = [json.loads(line) for line in path.read_text().splitlines()]
        recs[task_idx].update(actions=[], final_answer="")
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return copy


def test_gold_replay_teacher_passes_gold_and_fails_a_gold_that_does_nothing(release: Path) -> None:
    tasks = awm_tasks(_spec(release))
    assert [t.metadata["task_idx"] for t in tasks] == [0, 1, 2, 3]
    results = GoldReplayRunner(release)(tasks, 4)
    assert [[r.score for r in group] for group in results] == [[1.0]] * 4  # one deterministic episode
    broken = GoldReplayRunner(_break_gold(release, 1))(tasks, 1)
    assert [g[0].passed for g in broken] == [True, False, True, True] and not broken[1][0].aborted
    (tmp := release.parent / "nogold").mkdir(exist_ok=True)
    with pytest.raises(ReleaseError, match="gold_actions.jsonl: missing"):
        GoldReplayRunner(tmp)


class GoldPlayer:
    """Backend that plays the gold actions of the tasks in ``solve`` and gives up on the others.

    Stateless (it reads the task and the number of tool results so far from the prompt), so concurrent
    episodes can share it.
    """

    def __init__(self, tok: Any, release: Path, solve: set[int]) -> None:
        self.tok, self.solve = tok, solve
        tasks = json.loads((release / "gen_tasks.jsonl").read_text().splitlines()[0])["tasks"]
        gold = [json.loads(line) for line in (release / "gold_actions.jsonl").read_text().splitlines()]
        self.gold = {tasks[g["task_idx"]]: g for g in gold}

    def __call__(self, ids: list[int], **kw: Any) -> Generation:
        text = self.tok.decode(ids)
        last_user = text.rsplit("<|user|>", 1)[-1]
        task = next(t for t in self.gold if t in last_user)
        rec, done = self.gold[task], last_user.count("<tool_response>")
        if rec["task_idx"] not in self.solve:
            out, end = "I cannot do that.", "<|endoftext|>"
        elif done < len(rec["actions"]):
            action = rec["actions"][done]
            args = "".join(
                f"<arg_key>{k}</arg_key><arg_value>{v if isinstance(v, str) else json.dumps(v)}</arg_value>"
                for k, v in action["arguments"].items()
            )
            out, end = f"<tool_call>{action['tool']}{args}</tool_call>", "<|observation|>"
        else:
            out, end = rec["final_answer"] or "Done.", "<|endoftext|>"
        toks = self.tok.encode(out, add_special_tokens=False) + [tid(self.tok, end)]
        return Generation(toks, [-0.1] * len(toks), "stop")


def test_endpoint_runner_and_gold_teacher_filter_a_release(release: Path) -> None:
    tok = micro_tokenizer()
    spec = _spec(release)
    tasks = awm_tasks(spec)
    backend = GoldPlayer(tok, release, solve={0, 1})
    with GenerateServer(backend, tok, max_context_tokens=32768) as server:
        endpoint = AgentEndpoint(base_url=server.url + "/", tokenizer="unused", concurrency=2)
        policy = EndpointRunner(endpoint, spec, seed=3, tokenizer=tok)
        teacher = GoldReplayRunner(_break_gold(release, 3))
        report = filter_tasks(tasks, policy, 2, teacher=teacher)
        assert len(server.requests) == 2 * (2 + 3 + 1 + 1)  # model turns: gold calls + answer, or give up
    assert report.policy == {
        "awm-team_calendar-0": PassCount(2, 2, 0),
        "awm-team_calendar-1": PassCount(2, 2, 0),
        "awm-team_calendar-2": PassCount(0, 2, 0),
        "awm-team_calendar-3": PassCount(0, 2, 0),
    }
    assert [t.id for t in report.kept] == ["awm-team_calendar-2"]  # never by the policy, solved by gold
    assert report.dropped == {
        "always_passed": ["awm-team_calendar-0", "awm-team_calendar-1"],
        "never_passed": ["awm-team_calendar-3"],
    }


def test_checkpoint_runner_rolls_out_a_local_checkpoint(release: Path) -> None:
    spec = _spec(release)
    tasks = awm_tasks(spec)[:2]
    model_dir = micro_model_dir()
    scripted = CheckpointRunner(
        model_dir,
        spec,
        seed=0,
        backend=GoldPlayer(micro_tokenizer(), release, solve={0}),
        concurrency=2,
        max_context_tokens=16384,
    )
    assert [[r.passed for r in g] for g in scripted(tasks, 2)] == [[True, True], [False, False]]
    real = CheckpointRunner(
        model_dir, spec, seed=0, max_new_tokens=8, max_context_tokens=16384, concurrency=1
    )
    (group,) = real(tasks[:1], 1)  # the random-weight micro model itself: scored (it fails), not aborted
    assert len(group) == 1 and not group[0].aborted and not group[0].passed
    assert {p.dtype for p in real.policy().model.parameters()} == {torch.float32}
    bf16 = CheckpointRunner(model_dir, spec, seed=0, dtype="bfloat16")  # rl.rollout.sampler_dtype
    assert {p.dtype for p in bf16.policy().model.parameters()} == {torch.bfloat16}
    rollout = RolloutConfig(
        prompts_per_step=2, samples_per_prompt=4, max_response_tokens=8, max_context_tokens=4096,
        temperature=0.7, top_p=0.9, num_rollouts=1, sampler_dtype="bfloat16", drop_finished_rows=True,
        eager_decode=True,
    )  # fmt: skip
    staged = CheckpointRunner.from_rollout(model_dir, spec, rollout, seed=5, concurrency=3)
    sampled = (staged.max_new_tokens, staged.max_context_tokens, staged.temperature, staged.top_p)
    assert sampled == (8, 4096, 0.7, 0.9)
    assert (staged.dtype, staged.drop_finished, staged.eager_decode) == ("bfloat16", True, True)
    assert (staged.seed, staged.concurrency) == (5, 3)
