"""IF RL production synthesis (``data_prep.if_synthesis*``) against a scripted OpenAI-compatible server.

The HTTP server on 127.0.0.1 is a test double at the remote-API boundary: no teacher or assistant LLM is
reachable here. It speaks the chat-completions wire format and answers from a script keyed on the
request (which system prompt, which base task or topic, which model), and records every request so the
assistant rotation can be checked. Everything else is real: ``ChatClient`` over HTTP, strict reply
parsing, the bubblewrap sandbox running teacher checkers, ``validate_rubrics`` and the stage's
``prepare()`` with its manifest.
"""

from __future__ import annotations

import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fake_chat import send_json

from data_prep import if_synthesis_constraints as mc
from data_prep import if_synthesis_multiturn as mt
from data_prep.if_synthesis import SynthesisParams, synthesise
from data_prep.manifest import Manifest
from data_prep.rl_stage import Endpoint
from infra import recipe
from infra.prep import PrepContext
from rewards.contract import RewardRequest, get_reward
from rewards.if_constraints import check_constraint
from rewards.instruction_following import validate_rubrics

ROOT = Path(__file__).resolve().parent.parent
EASY_IDS = [
    "keywords:existence",
    "punctuation:no_comma",
    "change_case:all_lowercase",
    "startend:end_checker",
    "detectable_format:title",
]
GOOD_CHECKER = "def check(response: str) -> bool:\n    return len(response.split()) >= 3\n"
CHECKERS = {
    "badchecker": "def check(response: str) -> bool:\n    return 'zebra' in response\n",
    "syntax": "def check(response: str) -> bool\n    return True\n",
}


@pytest.fixture(scope="module", autouse=True)
def _sandbox():
    from infra.sandbox.isolation import check_isolation

    if not check_isolation().ok:
        pytest.skip("sandbox isolation unavailable on this machine: " + "; ".join(check_isolation().problems))


def reference_for(spec: list[dict]) -> str:
    """Return an answer meeting the pool constraints in ``spec`` (only the EASY_IDS ones)."""
    kw = {c["id"]: c["kwargs"] for c in spec}
    words = ["here", "is", "a", "short", "answer", *kw.get("keywords:existence", {}).get("keywords", [])]
    text = " ".join(words)
    if "startend:end_checker" in kw:
        text += " " + kw["startend:end_checker"]["end_phrase"]
    if "detectable_format:title" in kw:
        text = "<<notes>>\n" + text
    return text.lower() if "change_case:all_lowercase" in kw else text


def _field(text: str, prefix: str) -> str:
    return next(line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix))


def _multi_constraint_reply(user: str) -> str:
    task = _field(user, "Base task: ")
    if "notjson" in task:
        return "Sure! Here is the instruction: {not json"
    if "schema" in task:
        return json.dumps({"instruction": "Write it."})
    spec = json.loads(_field(user, mc.POOL_SPEC_PREFIX))
    n_new = int(_field(user, "New constraints to add, each with a checker: "))
    checker = next((src for key, src in CHECKERS.items() if key in task), GOOD_CHECKER)
    reply = {
        "instruction": f"{task} Follow all the rules.",
        "new_constraints": [{"description": "At least three words.", "checker": checker}] * n_new,
        "reference": reference_for(spec),
    }
    return "```json\n" + json.dumps(reply) + "\n```"


def _teacher_reply(messages: list[dict]) -> str:
    system, user = messages[0]["content"], messages[-1]["content"]
    if system == mc.SYSTEM:
        return _multi_constraint_reply(user)
    if system == mt.PLAN_SYSTEM:
        topic = _field(user, "Topic: ")
        if "notjson" in topic:
            return "I plan to be tricky."
        wants_system = "Give the assistant a system prompt" in user
        return json.dumps(
            {
                "plan": "Ask for no commas, then push for a list with commas.",
                "system_prompt": "Never use commas." if wants_system else None,
                "user_turn": f"Tell me about {topic}, without commas.",
            }
        )
    if system == mt.TURN_SYSTEM:
        return json.dumps({"user_turn": "Now list three things, commas are fine, right?"})
    if system == mt.RUBRIC_SYSTEM:
        judge = {"kind": "judge", "requirement": "Does the reply keep the no-comma rule from turn 1?"}
        if "nojudgetext" in user:
            judge = {"kind": "judge"}
        code = {"kind": "code_src", "description": "No commas.", "source": "def check(response):\n"}
        code["source"] += "    return ',' not in response\n"
        reply = {"expects_refusal": "refuse" in user, "rubrics": [code, judge], "reference": "no commas here"}
        return json.dumps(reply)
    raise AssertionError(f"unscripted teacher request: {system[:80]!r}")


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append(body)
        msgs = body["messages"]
        if body["model"] == "teacher":
            text = _teacher_reply(msgs)
        elif any("verbose" in m["content"] for m in msgs):
            text = "word " * 600
        else:
            text = f"answer from {body['model']}"
        send_json(self, {"choices": [{"message": {"content": text}}] * body.get("n", 1)})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def llm():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.seen = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def _ep(url: str, model: str) -> Endpoint:
    return Endpoint(base_url=url, model=model)


def test_multi_constraint_keeps_checked_rows_and_counts_drops(llm):
    _, url = llm
    queries = ["Plan a picnic.", "Explain tides.", "badchecker task", "syntax task", "notjson task"]
    queries += ["schema task", "Describe a lighthouse.", "Summarise a film."]
    step = mc.synthesise_multi_constraint(
        _ep(url, "teacher"), 8, seed=3, constraints_per_prompt=(2, 6), new_constraints=(1, 1),
        queries=queries, constraint_ids=EASY_IDS, workers=3,
    )  # fmt: skip
    assert [r.id for r in step.rows] == [f"ifmc-syn-3-{i}" for i in (0, 1, 6, 7)]
    assert step.drops.as_dict()["by_reason"] == {
        "checker_syntax_error": 1,
        "reference_fails_checker": 1,
        "reply_not_json": 1,
        "reply_schema": 1,
    }
    reward = get_reward("if_rubrics")
    for row in step.rows:
        rubrics = validate_rubrics(row.label)
        assert 2 <= len(rubrics) <= 6 and row.prompt[-1]["role"] == "user"
        assert [r["kind"] for r in rubrics] == ["code"] * (len(rubrics) - 1) + ["code_src"]
        assert rubrics[-1]["source"] == GOOD_CHECKER.strip()
        assert {r["check"] for r in rubrics[:-1]} <= set(EASY_IDS)
        # the pool rubrics and the teacher's checker (in the sandbox) accept the reference, and reject "x"
        spec = [{"id": r["check"], "kwargs": r["kwargs"]} for r in rubrics[:-1]]
        good = RewardRequest(
            prompt=row.prompt, response="<think>t</think>\n" + reference_for(spec), label=rubrics
        )
        assert reward(good).score == 1.0
        bad = reward(RewardRequest(prompt=row.prompt, response="<think>t</think>\nx", label=rubrics))
        assert bad.score == 0.0 and not bad.aborted
    # the same seed draws the same constraints
    again = mc.synthesise_multi_constraint(
        _ep(url, "teacher"), 2, seed=3, constraints_per_prompt=(2, 6), new_constraints=(1, 1),
        queries=queries, constraint_ids=EASY_IDS,
    )  # fmt: skip
    assert [r.label for r in again.rows] == [r.label for r in step.rows[:2]]


def test_pool_draws_respect_conflicts():
    rng = random.Random(0)
    for _ in range(200):
        ids = mc.pick_constraints(rng, 6)
        assert len(ids) == len(set(ids)) and not any(mc.conflicts(a, b) for a in ids for b in ids if a != b)
        assert "combination:repeat_prompt" not in ids
        words = list(mc.WORDS)
        for cid in ids:  # the drawn kwargs are exactly the ones the pool checker takes
            assert isinstance(check_constraint(cid, "Some answer.", mc.sample_kwargs(cid, rng, words)), bool)
    assert mc.conflicts("change_case:english_capital", "change_case:all_lowercase")


def test_multi_turn_rotates_assistants_and_honours_system_fraction(llm):
    server, url = llm
    assistants = [_ep(url, "assist-a"), _ep(url, "assist-b"), _ep(url, "assist-c")]
    topics = ["gardening", "travel", "cooking", "music", "chess", "sailing"]
    step = mt.synthesise_multi_turn(
        _ep(url, "teacher"), assistants, 6, seed=1, mean_turns=6, max_turns=8,
        system_prompt_fraction=0.5, topics=topics, workers=3,
    )  # fmt: skip
    assert len(step.rows) == 6 and step.drops.total == 0
    expected = ["assist-a", "assist-b", "assist-c"] * 2
    assert [r.metadata["assistant"] for r in step.rows] == expected
    for row, model in zip(step.rows, expected, strict=True):
        said = [m["content"] for m in row.prompt if m["role"] == "assistant"]
        assert said and all(s == f"answer from {model}" for s in said)
        assert row.prompt[-1]["role"] == "user" and validate_rubrics(row.label)
        turns = [m for m in row.prompt if m["role"] != "system"]
        assert 4 <= len(turns) + 1 == row.metadata["turns"] <= 8
        assert [m["role"] for m in turns] == ["user", "assistant"] * (len(turns) // 2) + ["user"]
        assert [r["kind"] for r in row.label] == ["code_src", "judge"]
    with_system = [r for r in step.rows if r.prompt[0]["role"] == "system"]
    assert len(with_system) == 3 and all(r.metadata["system_prompt"] for r in with_system)
    assert all(r.prompt[0]["content"] == "Never use commas." for r in with_system)
    asked = {b["model"] for b in server.seen}
    assert asked == {"teacher", "assist-a", "assist-b", "assist-c"}
    # the assistant runs under the system prompt the teacher wrote
    sys_models = {
        b["model"] for b in server.seen if b["messages"][0]["role"] == "system" and b["model"] != "teacher"
    }
    assert sys_models and sys_models <= {"assist-a", "assist-b", "assist-c"}
    # teacher calls ask the server to decode the reply's JSON schema; assistants answer freely
    schemas = {b["response_format"]["json_schema"]["name"] for b in server.seen if b["model"] == "teacher"}
    assert schemas == {"PlanReply", "TurnReply", "RubricReply"}
    assert not any("response_format" in b for b in server.seen if b["model"] != "teacher")


def test_reply_schema_can_be_left_to_the_prompt(llm):
    server, url = llm
    mc.synthesise_multi_constraint(
        _ep(url, "teacher"), 1, seed=0, constraints_per_prompt=(2, 2), new_constraints=(1, 1),
        queries=["Plan a picnic."], constraint_ids=EASY_IDS,
    )  # fmt: skip
    fmt = server.seen[-1]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"]["additionalProperties"] is False
    assert set(fmt["json_schema"]["schema"]["required"]) >= {"instruction", "reference"}
    mc.synthesise_multi_constraint(
        _ep(url, "teacher"), 1, seed=0, constraints_per_prompt=(2, 2), new_constraints=(1, 1),
        queries=["Plan a picnic."], constraint_ids=EASY_IDS, json_schema=False,
    )  # fmt: skip
    assert "response_format" not in server.seen[-1]


def test_turn_counts_average_to_the_mean():
    rng = random.Random(0)
    draws = [mt.sample_user_turns(rng, 6.0, 12) for _ in range(4000)]
    assert min(draws) == 2 and max(draws) <= 6 and abs(2 * sum(draws) / len(draws) - 6.0) < 0.1
    with pytest.raises(ValueError, match="mean_turns"):
        mt.sample_user_turns(rng, 9.0, 8)


def test_synthesise_counts_refusals_overlong_and_malformed(llm, tmp_path):
    _, url = llm
    topics = [
        "refuse one",
        "refuse two",
        "normal a",
        "normal b",
        "normal c",
        "verbose d",
        "nojudgetext",
        "notjson",
    ]
    queries = tmp_path / "queries.jsonl"
    queries.write_text("\n".join(json.dumps({"query": t}) for t in topics) + '\n{"query": ""}\n')
    params = SynthesisParams(
        teacher=_ep(url, "teacher"),
        assistants=[_ep(url, "assist-a"), _ep(url, "assist-b")],
        multi_turn=8,
        refusal_fraction=0.25,
        max_chars=2000,
        system_prompt_fraction=0.0,
        mean_turns=4,
        queries=[str(queries)],
    )
    manifest = Manifest("t")
    rows = synthesise(params, (2, 6), 0, manifest)
    steps = {s["step"]: s for s in manifest.data["steps"]}
    turn = steps["synthesis_multi_turn"]
    assert turn["attempted"] == 8 and turn["count"] == 6
    assert turn["dropped"]["by_reason"] == {"reply_not_json": 1, "reply_schema": 1}
    sanity = steps["sanity"]
    assert sanity["dropped_overlong"] == 1 and sanity["dropped_refusal_downsampled"] == 1
    assert sanity["refusals_kept"] == 1 and sanity["count"] == len(rows) == 4
    assert sum(r.metadata["expects_refusal"] for r in rows) == 1
    assert not any(r.prompt[0]["role"] == "system" for r in rows)
    assert steps["synthesis_multi_constraint"]["attempted"] == 0
    source = manifest.data["sources"][0]
    assert source["queries_loaded"] == 8 and source["queries_malformed"]["by_reason"] == {
        "query_missing_or_empty": 1
    }


def test_params_reject_bad_settings():
    ep = {"base_url": "http://x/v1", "model": "m"}
    with pytest.raises(ValueError, match="assistants"):
        SynthesisParams(teacher=ep, multi_turn=3)
    with pytest.raises(ValueError, match="constraint_ids"):
        SynthesisParams(teacher=ep, constraint_ids=["combination:repeat_prompt"])
    with pytest.raises(ValueError, match="extra"):
        SynthesisParams(teacher=ep, bogus=1)


def test_stage_prepare_runs_synthesis_in_production(llm, tmp_path):
    _, url = llm
    loaded = {
        "id": "local-0",
        "prompt": [{"role": "user", "content": "Write about whales in lowercase only."}],
        "label": [{"kind": "code", "check": "change_case:all_lowercase", "kwargs": {}}],
    }
    src = tmp_path / "rows.jsonl"
    src.write_text(json.dumps(loaded) + "\nnot json\n")
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        "\n".join(json.dumps({"query": q}) for q in ["Plan a picnic.", "Explain tides."]) + "\n"
    )
    synthesis = {
        "teacher": {"base_url": url, "model": "teacher"},
        "assistants": [{"base_url": url, "model": "assist-a"}, {"base_url": url, "model": "assist-b"}],
        "multi_constraint": 3,
        "multi_turn": 2,
        "constraint_ids": EASY_IDS,
        "new_constraints": [1, 1],
        "queries": [str(queries)],
    }
    sets = {
        "data.synthesis": synthesis,
        "data.heldout_per_metric": 4,
        "data.sources": [{"name": "local", "kind": "multi_constraint", "local_files": [str(src)]}],
    }
    stage = recipe.resolve_stage(ROOT / "stages" / "03_if_rl", "production", sets=sets)
    ctx = PrepContext(stage=stage, out_dir=tmp_path / "out", seed=0, profile="production")
    summary = stage.module("data_prep").prepare(ctx)
    rows = [json.loads(x) for x in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]
    assert summary["train"] == len(rows) == 6
    assert summary["families"] == {"if_multi_constraint": 4, "if_multiturn": 2}
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    order = [s["step"] for s in manifest["steps"]]
    assert order[:6] == [
        "loaded",
        "synthesis_multi_constraint",
        "synthesis_multi_turn",
        "sanity",
        "joined",
        "heldout_overlap",
    ]
    steps = {s["step"]: s for s in manifest["steps"]}
    assert steps["loaded"]["count"] == 1 and steps["joined"]["count"] == 6 and steps["quality"]["skipped"]
    assert manifest["args"]["synthesis"]["assistants"][1]["model"] == "assist-b"
    assert {s["name"] for s in manifest["sources"]} == {"local", "if_synthesis"}
    assert all(r["metadata"]["reward"] == "if_rubrics" and validate_rubrics(r["label"]) for r in rows)
