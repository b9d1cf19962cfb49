"""Tiny task generators: deterministic, short, held-out disjoint, and every reference solution passes."""

from __future__ import annotations

import json

import pytest

from data_prep import tiny_tasks as tt
from data_prep.tiny_tasks.code import run_reference
from data_prep.tiny_tasks.rl_prep import reference_self_check, write_stage_heldout
from infra.layering import ConfigError


@pytest.mark.parametrize("family", list(tt.GENERATORS))
def test_deterministic_and_reference_passes(family, request):
    a, b = tt.generate(family, 24, 7), tt.generate(family, 24, 7)
    assert [t.prompt_row().model_dump() for t in a] == [t.prompt_row().model_dump() for t in b]
    assert (
        tt.generate(family, 24, 8)[0].prompt != a[0].prompt
        or tt.generate(family, 24, 8)[1].prompt != a[1].prompt
    )
    if family == "code":
        assert all(run_reference(t) for t in a)
    elif family == tt.awm.FAMILY:  # an agent task's reference is its gold actions, replayed in the sandbox
        request.getfixturevalue("sandbox_ok")
        from data_prep.agent_filters import GoldReplayRunner
        from infra.agents.slime_generate import task_from_parts

        tasks = [task_from_parts(t.prompt, t.label, t.metadata, t.id) for t in a]
        results = GoldReplayRunner(tt.awm.tiny_release())(tasks, 1)
        assert all(r[0].score == 1.0 and not r[0].aborted for r in results)
    elif family == tt.harbor.FAMILY:  # its reference commands, run in the sandbox, must pass the task's tests
        request.getfixturevalue("sandbox_ok")
        assert len(tt.harbor.gold_conversations(a)) == len(a)
    elif family == tt.search.FAMILY:  # its gold plan, run through the real search tools, ends on the answer
        assert len(tt.search.gold_conversations(a)) == len(a)
    else:
        kept, failures = reference_self_check(a)
        assert len(kept) == len(a), failures


def test_wrong_answers_score_zero():
    for family in ("math", "puzzle", "science"):
        tasks = tt.generate(family, 6, 1)
        for task in tasks:
            task.answer = "\\boxed{qqq}"
        kept, _ = reference_self_check(tasks)
        assert kept == [], family
    tasks = [
        t
        for t in tt.generate("if_multi_constraint", 40, 1)
        if any(r["check"] == "keywords:existence" for r in t.label)
    ]
    for task in tasks:
        task.answer = "nothing here"
    assert tasks and reference_self_check(tasks)[0] == []


def test_lengths_fit_the_micro_budgets():
    from infra.embedded.chat_format import install_glm_markup, render_prompt_ids
    from infra.embedded.tokenizer_build import build_micro_tokenizer

    tok = build_micro_tokenizer(0)
    install_glm_markup(tok)
    budgets = {"math": 40, "puzzle": 40, "science": 40, "if_multi_constraint": 48, "if_multiturn": 48}
    for family, budget in budgets.items():
        for task in tt.generate(family, 60, 3):
            assert len(tok(task.response(), add_special_tokens=False)["input_ids"]) + 1 <= budget, (
                task.response()
            )
            assert len(render_prompt_ids(tok, task.prompt)) <= 100, task.prompt


def test_sft_rendering_supervises_only_the_reference():
    task = tt.generate("math", 1, 0)[0]
    sample = task.sft_sample()
    assert [m.role for m in sample.messages] == ["user", "assistant"]
    assert [m.loss for m in sample.messages] == [0, 1]
    assert sample.messages[-1].reasoning == task.reasoning and sample.messages[-1].content.startswith(
        "\\boxed{"
    )


def test_write_heldout_every_metric(tmp_path):
    for metric in tt.METRIC_FAMILIES:
        path = tt.write_heldout(metric, 12, 0, tmp_path)
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        assert len(rows) == 12 and all(r["metadata"]["metric"] == metric for r in rows)
        again = tt.write_heldout(metric, 12, 0, tmp_path / "again")
        assert again.read_bytes() == path.read_bytes()
    fmt = [json.loads(line) for line in (tmp_path / "sft_format.jsonl").read_text().splitlines()]
    assert {r["metadata"]["reward"] for r in fmt} == {"sft_format"}
    assert len({r["metadata"]["family"] for r in fmt}) == 6
    with pytest.raises(KeyError, match="unknown embedded metric"):
        tt.write_heldout("bleu", 1, 0, tmp_path)
    # A stage's config naming such a metric is a config error on its key (one line from the CLI), and
    # nothing is written before it is raised.
    with pytest.raises(ConfigError, match=r"eval.targets/eval.guardrails: .*'bleu'"):
        write_stage_heldout(["math_acc", "bleu"], 1, 0, tmp_path / "stage")
    assert not (tmp_path / "stage").exists()


def test_science_heldout_pairs_never_in_train():
    train = {(t.metadata["fact"], t.metadata["template"]) for t in tt.generate("science", 200, 0)}
    held = {(t.metadata["fact"], t.metadata["template"]) for t in tt.generate("science", 60, 0, "heldout")}
    assert train and held and not train & held
