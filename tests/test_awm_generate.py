"""The offline AWM-format generator: release files, tool counts, a self-check that catches bad verifiers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from data_prep.awm_domains import DOMAINS
from data_prep.awm_generate import generate
from infra.agents.awm.release import RELEASE_STEMS, load_release
from infra.agents.awm.selfcheck import self_check
from infra.sandbox import check_isolation


def test_every_domain_writes_the_release_format_with_5_to_35_tools(tmp_path: Path) -> None:
    names = generate(tmp_path, seed=3, tasks=10)
    assert len(names) == len(DOMAINS) >= 4
    for stem in (*RELEASE_STEMS, "gold_actions"):
        assert (tmp_path / f"{stem}.jsonl").is_file()
    scenarios = load_release(tmp_path)
    for s in scenarios.values():
        assert 5 <= len(s.spec_operation_ids()) <= 35 and len(s.verified_tasks()) == 10
        assert s.database()[:15] == b"SQLite format 3"
    generate(tmp_path / "again", seed=3, tasks=10)
    assert (tmp_path / "gen_envs.jsonl").read_bytes() == (tmp_path / "again" / "gen_envs.jsonl").read_bytes()


def test_self_check_passes_gold_and_catches_a_verifier_that_passes_doing_nothing(tmp_path: Path) -> None:
    if not check_isolation().ok:
        if os.geteuid() != 0:
            pytest.skip("sandbox isolation needs root")
        pytest.fail("sandbox isolation unavailable: " + "; ".join(check_isolation().problems))
    generate(tmp_path, seed=1, tasks=4, domains=["team_calendar"])
    assert self_check(tmp_path) == []
    path = tmp_path / "gen_verifier.pure_code.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[2]["verification"]["code"] = (
        "def verify_task_completion(initial_db_path, final_db_path, final_answer=None):\n"
        "    return {'result': 'complete'}\n"
    )
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert self_check(tmp_path) == ["team_calendar/2: doing nothing passes the verifier"]


def test_a_scenario_does_not_repeat_a_task_while_its_table_allows_another(tmp_path: Path) -> None:
    # Episodes start from the seed database, so a repeated text is one task twice: a split would put a
    # copy of a held-out task in training. Look-ups that count rows of a small vocabulary can run out of
    # distinct questions (a table with no numeric column); every other kind has rows and values to spare.
    generate(tmp_path, seed=0, tasks=24, split_tables=True, lean=True)
    for name, s in load_release(tmp_path).items():
        texts = [t.text for t in s.verified_tasks() if not t.text.startswith("How many")]
        assert len(texts) == len(set(texts)) >= 18, name
