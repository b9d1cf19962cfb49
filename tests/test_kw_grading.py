"""Knowledge-work grading: deliverables rendered to text, code criteria, weighted scores, the judge path.

The deliverables are the committed fixtures of ``tests/fixtures/knowledge_work`` (``make_fixtures.py``).
The judge is a loopback HTTP double of an OpenAI-compatible endpoint (the remote judge cannot be reached
from here); grading still runs through the ``rubric`` package's ``PerCriterionOneShotGrader``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import openpyxl
import pytest
from fake_chat import send_json

from rewards.contract import RewardRequest, get_reward
from rewards.deliverables import (
    UNEVALUATED,
    DeliverableError,
    RendererUnavailable,
    deliverable_text,
    load_deliverable,
    render,
)
from rewards.knowledge_work import (
    KWLabel,
    date_pattern,
    grade_code_criteria,
    kw_rubric_reward,
    weighted_score,
)

FIX = Path(__file__).parent / "fixtures" / "knowledge_work"
FORMATS = ["model.xlsx", "memo.docx", "deck.pptx", "report.pdf", "notes.md", "ledger.csv"]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A copy of the fixtures, as the environment would copy a final workspace out of the sandbox."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    for name in [*FORMATS, "corrupt.docx"]:
        shutil.copy(FIX / name, ws / name)
    return ws


@pytest.fixture(scope="module")
def model() -> object:
    return render(FIX / "model.xlsx")


def code(cid: str, weight: float, **check: object) -> dict:
    return {"id": cid, "requirement": f"criterion {cid}", "weight": weight, "kind": "code", "check": check}


def grade(ws: Path, rubric: list[dict], deliverables: list[str] | None = None, response: str = "Done."):
    label = {"rubric": rubric, "deliverables": deliverables or []}
    prompt = [{"role": "user", "content": "Prepare the lease memo for Harbour Road."}]
    return kw_rubric_reward(
        RewardRequest(prompt=prompt, response=response, label=label, metadata={"workspace": str(ws)})
    )


# ---- deliverables -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "memo.docx",
            [
                "# Lease Renewal Memo",
                "Unit 4B at 12 Harbour Road expires on 30 June 2025",
                "| Acme Freight |",
            ],
        ),
        ("deck.pptx", ["# Q1 2025 Operations Review", "On-time delivery rose to 96.2%"]),
        ("report.pdf", ["Audit Findings - Contoso Manufacturing", "approved on 2025-02-14"]),
        ("notes.md", ["Client: **Fabrikam Ltd**"]),
        ("ledger.csv", ["5000 Cost of sales,2025-03,450.50"]),
    ],
)
def test_each_format_renders_to_text(name: str, expected: list[str]) -> None:
    text = deliverable_text(FIX / name)
    for piece in expected:
        assert piece in text


def test_openpyxl_formulas_are_graded_by_value(model) -> None:
    cached = openpyxl.load_workbook(FIX / "model.xlsx", data_only=True)["Model"]
    assert cached["B4"].value is None  # openpyxl wrote the formula without a result: we must compute it
    cells = model.cells
    assert cells["Model"]["B4"] == 749.5 and cells["Model"]["B5"] == 62.5 and cells["Model"]["B6"] == 1650.5
    assert cells["Model"]["B7"] == "healthy" and cells["Model"]["B8"] == 749.5
    assert cells["Model"]["B10"] == dt.datetime(2025, 4, 30)  # date + 30 in a date-formatted cell
    assert cells["Summary"]["B2"] == 1499 and cells["Summary"]["B3"] == 825.25  # cross-sheet references
    assert "| Margin | 749.5 |" in model.text and "| Status | healthy |" in model.text
    assert f"| Forecast | =FOOBAR(B2) {UNEVALUATED} |" in model.text
    assert "NaN" not in model.text


def test_unevaluable_formulas_render_as_marked_text(tmp_path: Path) -> None:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(["a", "b"])
    ws.append([1, "=SUM(A2:"])  # does not parse: would make the engine reject the whole book
    ws.append(["=B3+1", "=A3+1"])  # circular
    ws.append(["=1/0", "=A2*4"])
    path = tmp_path / "book.xlsx"
    wb.save(path)
    doc = render(path)
    assert doc.cells["Sheet"]["B2"] == f"=SUM(A2: {UNEVALUATED}"
    assert doc.cells["Sheet"]["A3"] == f"=B3+1 {UNEVALUATED}"
    assert doc.cells["Sheet"]["A4"] == "#DIV/0!" and doc.cells["Sheet"]["B4"] == 4
    assert any("unparsable formulas: Sheet!B2" in n for n in doc.notes)
    slow = render(path, timeout=0.01)  # the engine overruns: every formula is marked, nothing raises
    assert slow.cells["Sheet"]["B4"] == f"=A2*4 {UNEVALUATED}" and "timed out" in slow.notes[0]


def test_unreadable_files_are_structured_failures(workspace: Path) -> None:
    with pytest.raises(DeliverableError, match=r"^corrupt\.docx: cannot be read as \.docx"):
        deliverable_text(workspace / "corrupt.docx")
    (workspace / "tool.exe").write_bytes(b"MZ")
    (workspace / "escape.md").symlink_to(FIX / "notes.md")  # a symlink out of the workspace
    (workspace / "sub").mkdir()
    (workspace / "sub" / "fake.pdf").write_text("not a pdf")
    errors = {
        name: load_deliverable(workspace, name).error
        for name in ["corrupt.docx", "tool.exe", "escape.md", "missing.xlsx", "sub/fake.pdf"]
    }
    assert errors["corrupt.docx"].startswith("corrupt.docx: cannot be read")
    assert errors["tool.exe"] == "tool.exe: unsupported deliverable type '.exe'"
    assert errors["escape.md"] == "escape.md: resolves outside the workspace"
    assert errors["missing.xlsx"] == "missing.xlsx: file not found"
    assert errors["sub/fake.pdf"].startswith("sub/fake.pdf: cannot be read as .pdf")


# ---- code criteria and scores -------------------------------------------------------------------------
def test_code_criteria_in_every_format_and_the_weighted_score(workspace: Path) -> None:
    rubric = [
        code("margin", 3, type="cell_value", file="model.xlsx", sheet="model", cell="$B$4", equals=749.5),
        code(
            "avg",
            1,
            type="cell_value",
            file="model.xlsx",
            sheet="Summary",
            cell="B3",
            approx=825.3,
            tolerance=0.1,
        ),
        code("pct", 2, type="cell_value", file="model.xlsx", cell="B5", equals=60),
        code("unit", 2, type="contains", file="memo.docx", text="UNIT 4B at 12   harbour road"),
        code("expiry", 1, type="date_in", file="memo.docx", date="2025-06-30"),
        code("closure", 1, type="date_in", file="deck.pptx", date="2025-05-15"),
        code("writedown", 1, type="regex", file="report.pdf", pattern=r"write-down of \$82,000"),
        code("review", 1, type="date_in", file="notes.md", date="2025-03-03"),
        code("ledger", 1, type="contains", file="ledger.csv", text="5000 cost of sales"),
        code("summary", 2, type="file_exists", file="summary.docx"),
        code("no_termination", -2, type="contains", file="memo.docx", text="terminate the lease"),
        code("stale_date", -1, type="date_in", file="report.pdf", date="2025-02-14"),
    ]
    res = grade(workspace, rubric)
    met = {k.removeprefix("criterion_"): v for k, v in res.components.items() if k.startswith("criterion_")}
    assert met == {
        "margin": 1, "avg": 1, "pct": 0, "unit": 1, "expiry": 1, "closure": 1, "writedown": 1,
        "review": 1, "ledger": 1, "summary": 0, "no_termination": 0, "stale_date": 1,
    }  # fmt: skip
    # positive weights sum to 15; met positives 3+1+2+1+1+1+1+1 = 11, the met "must not" costs 1
    assert res.score == pytest.approx(10 / 15) and res.components["score"] == res.score
    assert res.failure == "partial_credit" and not res.aborted
    assert res.details["notes"]["pct"] == "Model!B5 = 62.5"


def test_negative_weights_count_when_met_and_the_score_is_clipped(workspace: Path) -> None:
    label = KWLabel.model_validate(
        {
            "rubric": [
                code("a", 1, type="contains", file="notes.md", text="x"),
                code("b", -3, type="contains", file="notes.md", text="y"),
            ]
        }
    )
    assert weighted_score(label.rubric, {"a": True, "b": False}) == 1.0
    assert weighted_score(label.rubric, {"a": True, "b": True}) == 0.0  # 1 - 3 clipped at 0
    rubric = [
        code("client", 2, type="contains", file="notes.md", text="fabrikam ltd"),
        code("leak", -1, type="contains", file="ledger.csv", text="cost of sales"),
        code("wrong", -5, type="contains", file="notes.md", text="Contoso"),
    ]
    assert grade(workspace, rubric).score == pytest.approx(0.5)  # (2 - 1) / 2
    rubric[2]["check"]["text"] = "call notes"
    res = grade(workspace, rubric)
    assert res.score == 0.0 and res.failure == "wrong"


def test_corrupt_or_missing_file_scores_zero_for_its_criteria_only(workspace: Path) -> None:
    rubric = [
        code("appendix", 2, type="contains", file="corrupt.docx", text="truncated"),
        code("client", 2, type="contains", file="notes.md", text="fabrikam"),
        code("deck", 1, type="contains", file="absent.pptx", text="Q1"),
    ]
    res = grade(workspace, rubric, deliverables=["notes.md", "corrupt.docx"])
    assert res.score == pytest.approx(2 / 5) and res.failure == "deliverable_unreadable"
    assert sorted(res.details["unreadable"]) == ["absent.pptx", "corrupt.docx"]
    assert res.components["criterion_appendix"] == 0.0 and not res.aborted


@pytest.mark.parametrize(
    "rendering",
    ["2025-03-31", "2025/3/31", "03/31/2025", "3-31-2025", "31.03.2025", "31/3/2025", "March 31, 2025",
     "Mar. 31 2025", "31 March 2025", "31st of March, 2025", "31-Mar-2025", "MARCH 31ST, 2025"],
)  # fmt: skip
def test_date_in_accepts_common_renderings(rendering: str) -> None:
    assert date_pattern(dt.date(2025, 3, 31)).search(f"closing on {rendering}.")


@pytest.mark.parametrize(
    "rendering", ["2025-03-30", "2025-03-311", "131 March 2025", "March 31, 2024", "May 31, 2025"]
)
def test_date_in_rejects_other_dates(rendering: str) -> None:
    assert not date_pattern(dt.date(2025, 3, 31)).search(rendering)


@pytest.mark.parametrize(
    ("label", "message"),
    [
        ({"rubric": []}, "rubric"),
        ({"rubric": [{"id": "a", "requirement": "r", "weight": 1, "kind": "code"}]}, "need a check"),
        ({"rubric": [code("a", 1, type="contains", file="../etc/passwd", text="x")]}, "relative path"),
        ({"rubric": [code("a", -1, type="file_exists", file="a.md")]}, "positive weight"),
        ({"rubric": [code("a", 1, type="file_exists", file="a.md")] * 2}, "duplicate"),
        ({"rubric": [code("a", 1, type="regex", file="a.md", pattern="(")]}, "pattern"),
        (
            {"rubric": [code("a", 1, type="cell_value", file="a.xlsx", cell="B2", equals=1, approx=1.0)]},
            "exactly one",
        ),
        ({"rubric": [code("a", 1, type="sql", file="a.md")]}, "type"),
        ("not a dict", "label"),
    ],
)
def test_bad_labels_fail_closed_with_a_named_error(workspace: Path, label: object, message: str) -> None:
    res = kw_rubric_reward(RewardRequest(response="x", label=label, metadata={"workspace": str(workspace)}))
    assert res.failure == "bad_label" and res.score == 0.0 and not res.aborted
    assert message in res.details["error"]


def test_missing_renderer_is_aborted_not_zero(workspace: Path, monkeypatch) -> None:
    """A reward worker installed without markitdown (import blocked here) cannot read the deliverable."""
    monkeypatch.setitem(sys.modules, "markitdown", None)
    res = grade(workspace, [code("unit", 1, type="contains", file="memo.docx", text="Unit 4B")])
    assert res.aborted and res.failure == "renderer_unavailable" and "markitdown" in res.details["error"]
    monkeypatch.setitem(sys.modules, "formulas", None)
    res = grade(workspace, [code("margin", 1, type="cell_value", file="model.xlsx", cell="B4", equals=749.5)])
    assert res.aborted and res.failure == "renderer_unavailable" and "formulas" in res.details["error"]


def test_missing_workspace_is_aborted_not_zero(tmp_path: Path) -> None:
    label = {"rubric": [code("a", 1, type="file_exists", file="a.md")]}
    for meta in ({}, {"workspace": str(tmp_path / "gone")}):
        res = kw_rubric_reward(RewardRequest(response="x", label=label, metadata=meta))
        assert res.aborted and res.failure == "no_workspace"


def test_registered_and_never_raises_on_model_output(workspace: Path) -> None:
    assert get_reward("kw_rubric") is kw_rubric_reward
    rubric = [code("client", 1, type="contains", file="notes.md", text="fabrikam")]
    for response in ["", "<think>unterminated", "</think><think>", "\x00" * 1000, "é" * 10_000]:
        assert grade(workspace, rubric, response=response).score == 1.0


def test_code_criteria_alone_leave_judge_criteria_unmet(workspace: Path, monkeypatch) -> None:
    monkeypatch.delenv("RUFUS_JUDGE_BASE_URL", raising=False)  # a judge call would abort, not score
    rubric = KWLabel.model_validate(
        {
            "rubric": [
                code("margin", 3, type="cell_value", file="model.xlsx", cell="B4", equals=749.5),
                code("unit", 2, type="contains", file="memo.docx", text="unit 4b"),
                code("summary", 1, type="file_exists", file="summary.docx"),
                code("stale", -1, type="date_in", file="report.pdf", date="2025-02-14"),
                {"id": "tone", "requirement": "Reads like counsel wrote it.", "weight": 4, "kind": "judge"},
            ]
        }
    ).rubric
    assert grade_code_criteria(rubric, workspace) == pytest.approx((3 + 2 - 1) / 10)
    assert grade_code_criteria(rubric[:2], workspace) == 1.0
    with pytest.raises(ValueError, match="positive weight"):
        grade_code_criteria(rubric[3:4], workspace)
    monkeypatch.setitem(sys.modules, "markitdown", None)
    with pytest.raises(RendererUnavailable, match="markitdown"):  # infrastructure, never a 0
        grade_code_criteria(rubric[1:2], workspace)


# ---- judge criteria ---------------------------------------------------------------------------------
class _Judge(BaseHTTPRequestHandler):
    """Stands in for the remote OpenAI-compatible judge (a network boundary this machine cannot reach).

    A criterion is MET when the phrase it quotes ('...') appears in the graded response; the requests are
    kept so the test can see what the judge was shown.
    """

    seen: list[dict] = []
    reply_garbage = False

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Judge.seen.append(body)
        user = body["messages"][1]["content"]
        response = user.split("<response>", 1)[1]
        criteria = re.findall(r"^(\d+)\. \[.*?\] \(weight: [-\d.]+\) .*?'(.+?)'", user, re.MULTILINE)
        verdicts = [
            {
                "criterion_number": int(n),
                "criterion_status": "MET" if q in response else "UNMET",
                "explanation": "x",
            }
            for n, q in criteria
        ]
        content = (
            "I cannot grade this." if _Judge.reply_garbage else json.dumps({"criteria_evaluations": verdicts})
        )
        send_json(self, {"choices": [{"message": {"content": content}}]})

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def judge(monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("RUFUS_JUDGE_BASE_URL", f"http://127.0.0.1:{server.server_port}/v1")
    monkeypatch.setenv("RUFUS_JUDGE_MODEL", "judge")
    _Judge.seen, _Judge.reply_garbage = [], False
    yield _Judge
    server.shutdown()


def judged(cid: str, weight: float, requirement: str, file: str | None = None) -> dict:
    out = {"id": cid, "requirement": requirement, "weight": weight, "kind": "judge"}
    return out | ({"file": file} if file else {})


def test_judge_criteria_through_the_rubric_grader(workspace: Path, judge) -> None:
    rubric = [
        judged("term", 2, "Recommends renewing for 'three years'."),
        judged("landlord", 1, "Names the landlord 'Contoso Estates'."),
        judged("terminate", -1, "Recommends 'terminating' the lease."),
        judged("appendix", 1, "The appendix lists 'Acme'.", file="corrupt.docx"),
        code("otd", 1, type="contains", file="deck.pptx", text="96.2%"),
    ]
    res = grade(
        workspace, rubric, deliverables=["memo.docx", "deck.pptx"], response="<think>t</think>Memo done."
    )
    assert res.score == pytest.approx(3 / 5) and not res.aborted  # term 2 + otd 1 of 5 positive
    assert res.components["criterion_appendix"] == 0.0  # its file is unreadable: the judge is not asked
    (call,) = judge.seen
    user = call["messages"][1]["content"]
    criteria = user.split("<response>")[0]
    assert len(re.findall(r"^\d+\. \[", criteria, re.MULTILINE)) == 3 and "'Acme'" not in criteria
    assert (
        "## Final message\nMemo done." in user and "## Deliverable: memo.docx\n# Lease Renewal Memo" in user
    )
    assert "## Deliverable: corrupt.docx\n[could not be read: corrupt.docx" in user
    assert "Prepare the lease memo for Harbour Road." in user  # the task prompt is the judge's query


def test_judge_that_answers_garbage_is_aborted(workspace: Path, judge) -> None:
    judge.reply_garbage = True
    res = grade(workspace, [judged("term", 1, "Mentions 'three years'.")], deliverables=["memo.docx"])
    assert res.aborted and res.failure == "judge_unavailable"


def test_no_judge_configured_is_aborted_never_zero(workspace: Path, monkeypatch) -> None:
    monkeypatch.delenv("RUFUS_JUDGE_BASE_URL", raising=False)
    monkeypatch.delenv("RUFUS_JUDGE_MODEL", raising=False)
    res = grade(workspace, [judged("term", 1, "Mentions 'three years'.")], deliverables=["memo.docx"])
    assert res.aborted and res.failure == "judge_unavailable" and res.score == 0.0
    only_code = grade(workspace, [code("client", 1, type="contains", file="notes.md", text="fabrikam")])
    assert only_code.score == 1.0 and not only_code.aborted  # code criteria need no judge


# ---- fixtures ---------------------------------------------------------------------------------------
def test_fixture_generator_reproduces_the_committed_files(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_fixtures", FIX / "make_fixtures.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.main(tmp_path)
    for name in ["memo.docx", "deck.pptx", "report.pdf", "notes.md", "ledger.csv"]:
        assert deliverable_text(tmp_path / name) == deliverable_text(FIX / name), name

    def formulas(path: Path) -> dict:
        return {
            c.coordinate: c.value
            for ws in openpyxl.load_workbook(path)
            for row in ws.iter_rows()
            for c in row
        }

    assert formulas(tmp_path / "model.xlsx") == formulas(FIX / "model.xlsx")
