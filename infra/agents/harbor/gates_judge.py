"""Gate 2 of :mod:`infra.agents.harbor.gates`: every graded requirement is stated in the instruction.

The IF reward's LLM judge (:func:`rewards.instruction_following.judge_endpoint`: ``RUFUS_JUDGE_BASE_URL``,
``RUFUS_JUDGE_MODEL``, optional ``RUFUS_JUDGE_API_KEY``; :class:`infra.endpoints.ChatClient` at temperature
0) gets the instruction, the names of the starting files and the text files under tests/, and answers JSON:
the requirements the tests grade that the instruction does not state, each with a quote from the tests.
Any finding fails the gate; a quote not found in the tests is marked, not dropped. No judge configured, a
judge that fails or an answer that is not the JSON asked for: skipped (never a pass).
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from pydantic import BaseModel, ValidationError

from infra.agents.harbor.gates_sandbox import Status, rel_path, text_files
from infra.agents.harbor.local_runtime import build_workspace
from infra.agents.harbor.task import HarborTask

JUDGE_CHARS = 40_000  # tests text sent to the judge
JUDGE_SYSTEM = (
    "You review a terminal task used to train coding agents. The agent sees only the instruction and the "
    "files in its working directory /app; afterwards hidden tests grade /app. List every requirement the "
    "tests grade that the instruction does not state, directly or as an obvious consequence. Not "
    "requirements: the tests' own bookkeeping (writing the reward file, setup) and facts fixed by the "
    'starting files. Answer with JSON only: {"unstated": [{"requirement": "<what the tests demand>", '
    '"evidence": "<an exact quote from the tests>"}]}, with an empty list when every graded requirement '
    "is stated."
)


class _Finding(BaseModel):
    requirement: str
    evidence: str = ""


class _JudgeAnswer(BaseModel):
    unstated: list[_Finding]


def judge_prompt(task: HarborTask) -> list[dict[str, str]]:
    """The messages sent to the judge: instruction, starting file names, the tests' text files."""
    listing = "(not listed: the environment is not files-only)"
    if task.environment.files_only:
        with tempfile.TemporaryDirectory() as tmp:
            build_workspace(task, Path(tmp))
            names = sorted(str(p.relative_to(tmp)) for p in Path(tmp).rglob("*") if p.is_file())
        listing = "\n".join(names[:200]) or "(empty)"
    tests = ""
    for path in text_files(task.tests_dir):
        tests += f"\n### {rel_path(task, path)}\n```\n{path.read_text(errors='replace')}\n```\n"
    if len(tests) > JUDGE_CHARS:
        tests = tests[:JUDGE_CHARS] + "\n[tests cut here]"
    user = f"## Instruction\n{task.instruction}\n\n## Files in /app at the start\n{listing}\n\n## Tests\n"
    user += tests
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


def requirements_stated(task: HarborTask) -> tuple[Status, str]:
    """Gate 2: ask the judge for graded requirements the instruction leaves out."""
    from infra.endpoints import ChatClient, TeacherError
    from rewards.instruction_following import judge_endpoint

    endpoint = judge_endpoint()
    if endpoint is None:
        return "skipped", "no judge endpoint (set RUFUS_JUDGE_BASE_URL and RUFUS_JUDGE_MODEL)"
    messages = judge_prompt(task)
    client = ChatClient(endpoint[0], endpoint[1], api_key=endpoint[2], timeout=120.0)
    try:
        text = client.chat(messages, temperature=0.0, include_reasoning=False)[0]
        body = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip())
        answer = _JudgeAnswer.model_validate(json.loads(body))
    except TeacherError as exc:
        return "skipped", f"judge {endpoint[1]} failed: {exc}"
    except (ValueError, ValidationError) as exc:
        return "skipped", f"judge {endpoint[1]} did not answer the JSON asked for: {str(exc).splitlines()[0]}"
    if not answer.unstated:
        return "pass", f"judge {endpoint[1]} found no graded requirement missing from the instruction"
    tests_text = " ".join(messages[1]["content"].split())
    found = []
    for f in answer.unstated:
        quoted = " ".join(f.evidence.split())
        mark = "" if quoted and quoted in tests_text else " [quote not found in the tests]"
        found.append(f'{f.requirement} (tests: "{f.evidence.strip()}"){mark}')
    return "fail", f"judge {endpoint[1]}: {len(found)} graded requirement(s) not stated: " + "; ".join(found)
