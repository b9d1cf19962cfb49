"""Stage 08 task synthesis: taxonomy, the spec → instance → proposal → filters → Harbor pipeline, the
leakage / hacking / curriculum filters, and the ``knowledge_work`` tiny generators.

Test doubles, at boundaries we cannot run here: the teacher LLM is a scripted chat-completions server on
127.0.0.1 (``fake_chat.send_json``), reached by the real ``ChatClient`` over HTTP; the base policy of the
curriculum filter is a scorer returning fixed scores. Everything else is real: the generators, SQLite
systems of record (served over MCP in the sandbox where it is available), the reward's code-criteria
grader (``rewards.knowledge_work``, the filters' default), the Harbor loader and the manifest.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fake_chat import send_json
from pydantic import ValidationError

from data_prep import kw_taxonomy as tax
from data_prep.kw_filters import (
    CurriculumParams,
    HackingParams,
    curriculum_filter,
    database_cells,
    degenerate_scores,
    find_leaks,
    hacking_filter,
    leakage_filter,
    materialize,
)
from data_prep.kw_synthesis import (
    KwSynthesisParams,
    Proposal,
    proposal_problem,
    read_task,
    synthesise,
)
from data_prep.kw_taxonomy import SystemOfRecord, combinations, sample_spec
from data_prep.manifest import Manifest
from data_prep.rl_stage import Endpoint
from data_prep.tiny_tasks import knowledge_work as kw
from data_prep.tiny_tasks.rl_prep import decontaminate, drop_heldout_overlap, prompt_text
from infra.agents.harbor.task import structural_problems
from rewards.knowledge_work import Criterion, KWLabel, grade_code_criteria


def _code(cid: str, weight: float, **check) -> Criterion:
    return Criterion(id=cid, requirement=f"criterion {cid}", weight=weight, kind="code", check=check)


def _graded(task, deliverables, tmp_path: Path) -> float:
    ws = tmp_path / f"ws-{task.name}-{len(list(tmp_path.iterdir()))}"
    materialize(ws, {**task.files, **deliverables})
    return grade_code_criteria(task.rubric, ws)


def _with_files(task, **files):
    instance = dataclasses.replace(task.instance, files={**task.files, **files})
    return dataclasses.replace(task, name=task.name + "-planted", instance=instance)


@pytest.fixture(scope="module")
def train():
    return kw.kw_tasks(6, 0, "train")


# ---- taxonomy --------------------------------------------------------------------------------------------
def test_taxonomy_counts_follow_the_paper_and_say_what_is_open() -> None:
    counts = tax.taxonomy_counts()
    assert counts["domains"] == {"paper": 4, "filled": 4, "open": 0}
    assert counts["practice_areas"]["paper"] == 19 and counts["environment_types"]["paper"] == 88
    assert counts["practice_areas"]["filled"] + counts["practice_areas"]["open"] == 19
    assert counts["environment_types"]["filled"] + counts["environment_types"]["open"] == 88
    assert set(tax.DOMAINS) == {"finance", "legal", "consulting", "operations"}
    assert len(tax.SYSTEMS_OF_RECORD) == 6  # CRM, ERP/GL, WMS/TMS, MES, GRC/ticketing, property/work-order
    assert {tax.domain_of(t) for t in tax.ENVIRONMENT_TYPES} == set(tax.DOMAINS)  # every domain is covered
    assert {t.system for t in tax.ENVIRONMENT_TYPES} == set(tax.SYSTEMS_OF_RECORD)
    assert set(kw.ENV_TYPES) <= {t.key for t in tax.ENVIRONMENT_TYPES}
    # contract_dates_memo: 1 format x 36 complexity pairs x 15 legal stakeholder pairs x 5 x 4 x 6 stages x 2
    assert combinations("contract_dates_memo") == 1 * 36 * 15 * 5 * 4 * 6 * 2
    assert tax.practice_area_combinations("accounting_close") == combinations(
        "invoice_ledger_reconciliation"
    ) + combinations("accrual_rollforward")
    with pytest.raises(KeyError, match="known: invoice_ledger_reconciliation"):
        combinations("no_such_type")


def test_sampling_is_deterministic_and_stays_on_the_axes() -> None:
    for env in tax.ENVIRONMENT_TYPES:
        a, b = sample_spec(env.key, random.Random(7)), sample_spec(env.key, random.Random(7))
        assert a == b and a.spec_id == b.spec_id
        assert a.deliverable_format in env.deliverables and a.stage in tax.STAGES[a.domain]
        assert set(a.complexity_sources) <= set(tax.COMPLEXITY_SOURCES) and 1 <= len(a.stakeholders) <= 2
        assert all(a.dimensions[k] in v for k, v in env.dimensions.items())
    specs = {sample_spec("ticket_tracker_update", random.Random(s)).spec_id for s in range(30)}
    assert len(specs) > 20  # different seeds explore the space


# ---- the tiny generators, graded by the reward's code criteria ---------------------------------------------
def test_reference_deliverables_score_one_and_do_nothing_scores_zero(tmp_path: Path) -> None:
    tasks = kw.kw_tasks(6, 0, "train") + kw.kw_tasks(6, 0, "heldout")
    assert Counter(t.instance.spec.env_type for t in tasks) == {e: 4 for e in kw.ENV_TYPES}
    for task in tasks:
        assert _graded(task, task.reference, tmp_path) == 1.0, task.name
        assert _graded(task, {}, tmp_path) == 0.0, task.name
        assert len(task.instruction.split()) <= kw.MAX_WORDS
        assert any(c.weight < 0 for c in task.rubric)  # every tiny rubric has a "must not"


def test_the_default_grader_is_the_rewards_code_criteria(train, tmp_path: Path, monkeypatch) -> None:
    """Workbook formulas are computed (one workbook: a child process); judge criteria are unmet, no call."""
    recon, tracker = train[0], train[2]
    wb = recon.deliverables[0]
    computed = {wb: {"Recon": {**recon.reference[wb]["Recon"], "B3": "=B1-B2"}}}
    assert _graded(recon, computed, tmp_path) == 1.0
    wrong = {wb: {"Recon": {**recon.reference[wb]["Recon"], "B3": "=B2-B1"}}}
    assert _graded(recon, wrong, tmp_path) == pytest.approx(4 / 6)  # the difference (weight 2 of 6) is lost
    monkeypatch.delenv("RUFUS_JUDGE_BASE_URL", raising=False)  # a judge call would abort, not score
    tone = Criterion(id="tone", requirement="Reads like an ops lead wrote it.", weight=3.0, kind="judge")
    exists = [Criterion(id="e", requirement="exists", weight=1.0, kind="code",
                        check={"type": "file_exists", "file": tracker.deliverables[0]}), tone]  # fmt: skip
    scores = degenerate_scores(dataclasses.replace(tracker, rubric=exists))
    assert scores == {"do_nothing": 0.25, "empty": 0.25, "instruction_copy": 0.25, "number_dump": 0.25,
                      "keyword_template": 0.25}  # fmt: skip
    first_row = tracker.reference[tracker.deliverables[0]].splitlines()[1]
    quoted = first_row.split(",")
    quoted[2] = f'"{quoted[2].upper()}"'  # a quoted, upper-case status is the same status
    fresh = tracker.reference[tracker.deliverables[0]].replace(first_row, ",".join(quoted))
    assert _graded(tracker, {tracker.deliverables[0]: fresh}, tmp_path) == 1.0
    memo = train[1]  # its rubric holds dates: the label is JSON and the reward's own label format
    label = KWLabel.model_validate(json.loads(json.dumps(kw.tiny_task(memo).label)))
    assert label.rubric == memo.rubric and label.deliverables == list(memo.deliverables)


def test_splits_share_no_entity_and_generation_is_deterministic() -> None:
    def entities(split: str) -> set[str]:
        names = {n for pool in kw.POOLS.values() for k in ("vendors", "parties", "people") for n in pool[k]}
        found: set[str] = set()
        for task in kw.kw_tasks(12, 5, split):
            text = " ".join([task.instruction, *map(str, task.files.values()),
                             *map(str, database_cells(task.database))])  # fmt: skip
            found |= set(re.findall(r"\b(?:INV|C|T)-\d+\b", text)) | {n for n in names if n in text}
        return found

    train, held = entities("train"), entities("heldout")
    assert len(train) > 20 and len(held) > 20 and not train & held
    a, b = kw.generate(6, 3, "train"), kw.generate(6, 3, "train")
    assert [(t.id, t.prompt, t.label, t.metadata) for t in a] == [
        (t.id, t.prompt, t.label, t.metadata) for t in b
    ]
    ta, tb = kw.kw_tasks(3, 3, "train"), kw.kw_tasks(3, 3, "train")
    assert [t.instance.system.database for t in ta] == [t.instance.system.database for t in tb]
    assert [t.files for t in ta] == [t.files for t in tb]
    assert [t.prompt for t in kw.generate(6, 4, "train")] != [t.prompt for t in a]
    row = a[0]
    assert row.metadata["family"] == kw.FAMILY and row.answer == kw.DONE and row.prompt[0]["role"] == "user"
    assert [Criterion.model_validate(c) for c in row.label["rubric"]]
    with pytest.raises(ValueError, match="split"):
        kw.generate(1, 0, "test")


def test_train_tasks_survive_the_stage_screens_against_the_heldout_split() -> None:
    train_rows, held = kw.generate(30, 0, "train"), kw.generate(30, 0, "heldout")
    held_rows = [t.prompt_row().model_dump() for t in held]
    kept, dropped = drop_heldout_overlap(train_rows, held_rows)
    assert dropped == 0 and len(kept) == 30
    _, report = decontaminate(train_rows, {kw.METRIC: [(r["id"], prompt_text(r)) for r in held_rows]})
    assert report["removed"] == 0
    assert len({t.prompt[0]["content"] for t in train_rows}) > 15  # instance names vary the prompts


def test_harbor_folders_are_written_readable_and_keep_the_ground_truth_out_of_the_environment(
    tmp_path: Path,
) -> None:
    paths = kw.write_tasks(tmp_path / "tasks", 3, 0)
    tasks = kw.kw_tasks(3, 0)
    for path, task in zip(paths, tasks, strict=True):
        harbor, rubric, truth = read_task(path)
        assert structural_problems(harbor) == [] and harbor.environment.files_only
        assert harbor.instruction == task.instruction and rubric == task.rubric and truth == task.ground_truth
        assert harbor.environment.network_mode == "no-network" and harbor.environment.workdir == "/app"
        server = harbor.config["environment"]["mcp_servers"][0]
        assert server["name"] == task.instance.system.name and "infra.agents.awm.mcp_server" in server["args"]
        service = path / "environment" / "services" / server["name"]
        assert (service / "server.py").read_text() == task.instance.system.scenario.full_code
        assert (service / "pristine.db").read_bytes() == task.database
        assert not [p for p in (path / "environment").rglob("*") if "ground_truth" in p.name]
        assert not [p for p in (path / "environment").rglob("*") if p.name == "rubric.json"]
        ws = tmp_path / f"graded-{path.name}"
        materialize(ws, {p.relative_to(path / "environment" / "files").as_posix(): p.read_bytes()
                         for p in (path / "environment" / "files").rglob("*") if p.is_file()})  # fmt: skip
        materialize(ws, {p.relative_to(path / "solution" / "files").as_posix(): p.read_bytes()
                         for p in (path / "solution" / "files").rglob("*") if p.is_file()})  # fmt: skip
        assert grade_code_criteria(rubric, ws) == 1.0
    with pytest.raises(FileExistsError):
        kw.write_tasks(tmp_path / "tasks", 1, 9)  # other task folders are already there


def test_system_of_record_is_served_over_mcp_by_the_awm_server(sandbox_ok) -> None:
    from infra.agents.awm.mcp_client import McpScenarioServer

    task = kw.kw_tasks(1, 0)[0]
    system = task.instance.system
    server = McpScenarioServer(system.scenario)
    try:
        ops = {e["operation_id"] for g in system.tool_spec()["api_groups"] for e in g["endpoints"]}
        assert {s["name"] for s in server.tool_specs} == ops
        result = server.call_tool("list_gl_entries", {})
        rows = json.loads(result["content"][0]["text"])
        assert [r["ref"] for r in rows] == [r["ref"] for r in system.rows["gl_entries"]]
    finally:
        server.close()


# ---- filters -----------------------------------------------------------------------------------------------
def test_leakage_filter_catches_planted_leaks_and_keeps_clean_tasks(train) -> None:
    recon, memo = train[0], train[1]
    diff = recon.ground_truth.answers["difference"]
    end = next(iter(memo.ground_truth.lookups.values()))
    extra = {**recon.instance.system.rows}
    total = recon.ground_truth.answers["total_invoiced"]
    row = {"ref": "TOTAL", "vendor": "-", "posted_on": "-", "amount": total, "account": "-"}
    extra["gl_entries"] = [*extra["gl_entries"], row]
    system = dataclasses.replace(recon.instance.system, rows=extra)
    in_db = dataclasses.replace(
        recon, name="in-db", instance=dataclasses.replace(recon.instance, system=system)
    )
    planted = [
        _with_files(recon, **{"draft.md": f"Variance so far: {diff:,.2f}\n"}),
        _with_files(recon, **{"grading.md": recon.rubric[4].requirement + "\n"}),
        _with_files(memo, **{"request.md": f"Last year's memo said it ends {end}.\n"}),
        in_db,
    ]
    result = leakage_filter([*train, *planted])
    assert result.kept == train
    assert result.dropped.counts == {"answer_in_workspace": 1, "rubric_text_in_workspace": 1,
                                     "lookup_in_workspace": 1, "answer_in_system_of_record": 1}  # fmt: skip
    assert find_leaks(planted[0])[0] == ("answer_in_workspace", f"difference={diff!r}")


def test_hacking_filter_drops_hackable_rubrics_and_keeps_sound_ones(train) -> None:
    recon = train[0]
    invoices = next(text for rel, text in recon.files.items() if rel.endswith("_invoices.csv"))
    amounts = [line.split(",")[-1] for line in invoices.splitlines()[1:]]
    wb = recon.deliverables[0]
    dumpable = Proposal(instruction="Summarise the invoices in summary.md.", deliverables=["summary.md"],
                        rubric=[_code(f"a{i}", 1.0, type="contains", file="summary.md", text=a)
                                for i, a in enumerate(amounts)])  # fmt: skip
    wordy = [Criterion(id="w", requirement="The workbook states the unreconciled difference.", weight=1.0,
                       kind="code", check={"type": "contains", "file": wb,
                                           "text": "unreconciled difference"})]  # fmt: skip
    exists = [_code("e", 1.0, type="file_exists", file=wb), *recon.rubric[1:3]]
    hackable = [
        dataclasses.replace(recon, name="dump", instruction=dumpable.instruction,
                            deliverables=("summary.md",), rubric=dumpable.rubric),
        dataclasses.replace(recon, name="words", rubric=wordy + recon.rubric[1:2]),
        dataclasses.replace(recon, name="exists", rubric=exists),
    ]  # fmt: skip
    assert degenerate_scores(hackable[0])["number_dump"] == 1.0
    result = hacking_filter([*train, *hackable])
    assert result.kept == train
    assert result.dropped.counts == {"hackable_number_dump": 1, "hackable_keyword_template": 1,
                                     "hackable_empty": 1}  # fmt: skip
    seen = []

    def grade(rubric, workspace: Path) -> float:  # the injectable grader is the one used
        seen.append(sorted(p.name for p in workspace.iterdir()))
        return 0.9

    assert hacking_filter(train[:1], grade, HackingParams(max_degenerate_score=0.95)).kept == train[:1]
    assert hacking_filter(train[:1], grade).kept == [] and sorted(recon.files) in seen


def test_curriculum_band_keeps_the_middle_and_ignores_aborted_attempts(train) -> None:
    scores = {train[0].name: [0.0, 0.0, 0.02, 0.0], train[1].name: [1.0, 0.9, 1.0, 1.0],
              train[2].name: [0.5, 0.25, None, 0.75], train[3].name: [None, None, None, 0.5],
              train[4].name: [0.05, 0.05, 0.05, 0.05]}  # fmt: skip
    result = curriculum_filter(train[:5], lambda task, k: scores[task.name][:k])
    assert result.kept == [train[2], train[4]]
    assert result.dropped.counts == {"too_hard": 1, "too_easy": 1, "unscored": 1}
    assert result.notes["means"][train[2].name] == 0.5
    wide = curriculum_filter(
        train[:2], lambda task, k: scores[task.name][:k], CurriculumParams(low=0, high=1)
    )
    assert wide.kept == train[:2]
    with pytest.raises(ValidationError):
        CurriculumParams(low=0.9, high=0.1)


def test_a_proposal_must_stay_grounded_and_check_its_deliverables(train) -> None:
    recon = train[0]
    diff = recon.ground_truth.answers["difference"]
    check = {"type": "cell_value", "file": "r.xlsx", "sheet": "R", "cell": "B1", "approx": diff}
    good = Proposal(instruction="Do it.", deliverables=["r.xlsx"], rubric=[_code("a", 1.0, **check)])
    assert proposal_problem(good, recon.instance, 60) is None
    invented = good.model_copy(
        update={"rubric": [_code("a", 1.0, type="contains", file="r.xlsx", text="42.17")]}
    )
    assert proposal_problem(invented, recon.instance, 60)[0] == "ungrounded_check"
    elsewhere = good.model_copy(update={"deliverables": ["other.xlsx"]})
    assert proposal_problem(elsewhere, recon.instance, 60)[0] == "check_outside_deliverables"
    with pytest.raises(ValidationError, match="relative path"):
        Proposal(instruction="x", deliverables=["/etc/cron.d/x"], rubric=good.rubric)
    with pytest.raises(ValidationError, match="duplicate criterion ids"):  # the reward's label rules
        Proposal(instruction="x", deliverables=["r.xlsx"], rubric=good.rubric * 2)
    with pytest.raises(ValueError, match="relative path"):
        materialize(Path("/tmp"), {"../escape.md": "x"})
    assert proposal_problem(good.model_copy(update={"instruction": "word " * 61}), recon.instance, 60)[0] == (
        "instruction_too_long"
    )


# ---- the pipeline with a loopback teacher -----------------------------------------------------------------
def _teacher_reply(user: str, seen: Counter) -> str:
    env = re.search(r"^Environment type: (\w+)", user, re.M).group(1)
    truth = json.loads(re.search(r"^Private ground truth: (.*)$", user, re.M).group(1))
    seen[env] += 1
    if env == "contract_dates_memo":
        return "Here is a task: {not json"  # every time: dropped after one retry
    if env == "ticket_tracker_update":
        if seen[env] == 1:
            return json.dumps({"instruction": "Update it."})  # schema error, then a good reply
        ticket = next(iter(truth["lookups"])).split(".")[0]
        exists = {"type": "file_exists", "file": "tracker.csv"}
        rubric = [
            {
                "id": "exists",
                "requirement": "tracker.csv exists.",
                "weight": 0.2,
                "kind": "code",
                "check": exists,
            },
            {
                "id": "state",
                "requirement": f"tracker.csv shows {ticket}'s status.",
                "weight": 1.0,
                "kind": "judge",
            },
        ]
        return json.dumps({"instruction": "Bring tracker.csv up to date from the ticketing system.",
                           "deliverables": ["tracker.csv"], "rubric": rubric})  # fmt: skip
    cell = {"type": "cell_value", "file": "recon.xlsx", "sheet": "Summary"}
    rubric = [{"id": key, "requirement": f"Summary!B{i} holds the {key} of {value}.", "weight": 1.0,
               "kind": "code", "check": {**cell, "cell": f"B{i}", "approx": value}}
              for i, (key, value) in enumerate(truth["answers"].items(), 1)]  # fmt: skip
    reply = {"instruction": "Reconcile the invoices to the ledger in recon.xlsx, sheet Summary.",
             "deliverables": ["recon.xlsx"], "rubric": rubric}  # fmt: skip
    return "```json\n" + json.dumps(reply) + "\n```"


@pytest.fixture()
def teacher():
    seen: Counter = Counter()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server API
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.server.requests.append(body)
            text = _teacher_reply(body["messages"][-1]["content"], seen)
            send_json(self, {"choices": [{"message": {"content": text}}]})

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.requests = []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()


def test_pipeline_proposes_filters_and_writes_tasks(teacher, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{teacher.server_address[1]}/v1"
    params = KwSynthesisParams(teacher=Endpoint(base_url=url, model="teacher"), workers=1)
    manifest = Manifest("kw_synthesis", code_files=[Path(kw.__file__)])
    scorer = lambda task, k: [1.0] * k if task.proposer == "teacher" and "ticket" in task.name else [0.5] * k  # noqa: E731
    tasks = synthesise(params, 0, tmp_path / "out", manifest, base_scorer=scorer)
    steps = {s["step"]: s for s in manifest.data["steps"]}
    assert steps["kw_instances"]["count"] == 3 and steps["kw_generator_tasks"]["count"] == 3
    propose = steps["kw_propose"]
    assert (propose["attempted"], propose["kept"], propose["retried"]) == (3, 2, 2)
    assert propose["dropped"]["by_reason"] == {"reply_not_json": 1}
    assert len(teacher.requests) == 5  # 1 (good) + 2 (schema error, then good) + 2 (bad twice)
    prompt = teacher.requests[0]["messages"][-1]["content"]
    assert "Private ground truth:" in prompt and "response_format" in teacher.requests[0]
    assert steps["kw_leakage"]["count"] == 5 and steps["kw_hacking"]["count"] == 5
    assert steps["kw_curriculum"]["dropped"]["by_reason"] == {"too_easy": 1}
    assert sorted(t.proposer for t in tasks) == ["generator"] * 3 + ["teacher"]
    index = [json.loads(line) for line in (tmp_path / "out" / "index.jsonl").read_text().splitlines()]
    assert [r["name"] for r in index] == [t.name for t in tasks]
    teacher_task = next(t for t in tasks if t.proposer == "teacher")
    harbor, rubric, truth = read_task(tmp_path / "out" / teacher_task.name)
    assert (
        rubric == teacher_task.rubric and truth == teacher_task.ground_truth and harbor.solution_dir is None
    )
    assert manifest.write(tmp_path / "manifest.json")["outputs"]["index.jsonl"]["sha256"]


def test_pipeline_without_a_teacher_records_the_step_as_skipped(tmp_path: Path) -> None:
    manifest = Manifest("kw_synthesis", code_files=[Path(kw.__file__)])
    params = KwSynthesisParams(env_types=["contract_dates_memo"], instances_per_type=2, split="heldout")
    tasks = synthesise(params, 1, tmp_path / "out", manifest)
    steps = {s["step"]: s for s in manifest.data["steps"]}
    assert steps["kw_propose"]["skipped"] and "teacher" in steps["kw_propose"]["reason"]
    assert steps["kw_curriculum"]["skipped"]
    assert len(tasks) == 2 and all(t.instance.split == "heldout" for t in tasks)
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir()) == sorted(t.name for t in tasks)
    with pytest.raises(ValidationError, match="no instance generator"):
        KwSynthesisParams(env_types=["downtime_report"])


def test_system_of_record_database_holds_the_rows() -> None:
    task = kw.kw_tasks(3, 2)[2]
    system: SystemOfRecord = task.instance.system
    cells = database_cells(system.database)
    for row in system.rows["tickets"]:
        assert row["ticket"] in cells and row["owner"] in cells
    assert system.scenario.spec_operation_ids()[0] == "list_tickets"
