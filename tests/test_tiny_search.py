"""The ``search_agent`` tiny family (stage 06, embedded): its generated world, split, rows and SFT text.

Everything here is real (world generation, trafilatura extraction, bm25s ranking, the micro tokenizer and
chat template, the 8-gram screens); the ``search_tiny`` environment is written separately, so rows are
checked for the fields it reads rather than rolled out.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from functools import cache
from pathlib import Path

import trafilatura

from data_prep import tiny_tasks as tt
from data_prep.benchmarks import BenchmarkItem
from data_prep.converters import from_openai
from data_prep.decontaminate import build_index, scan_texts
from data_prep.tiny_tasks import search
from data_prep.tiny_tasks import search_world as sw
from data_prep.tiny_tasks.rl_prep import prompt_text
from data_prep.tiny_tasks.sft_sources import screen_text
from infra.embedded.chat_format import install_glm_markup, render_with_loss_mask
from infra.embedded.tokenizer_build import _WORDS, build_micro_tokenizer

BOILERPLATE = (
    "Tiny Wiki",
    "Random page",
    "Help",
    "About the wiki",
    "Privacy",
    "Terms",
    "Contact",
    "fictional",
)


@cache
def _root() -> Path:
    return sw.world_root()


@cache
def _questions() -> tuple[dict, ...]:
    return tuple(sw.load_questions(_root()))


@cache
def _pages() -> dict[str, dict]:
    lines = (_root() / "pages.jsonl").read_text().splitlines()
    return {p["url"]: p for p in map(json.loads, lines)}


@cache
def _content(url: str) -> str:
    """The page's main content as the default trafilatura call extracts it."""
    return trafilatura.extract(_pages()[url]["html"]) or ""


@cache
def _tok():
    tok = build_micro_tokenizer(0)
    install_glm_markup(tok)
    return tok


def _ntok(text: str) -> int:
    return len(_tok()(text, add_special_tokens=False)["input_ids"])


def _unique(split: str, seed: int = 0) -> list:
    return [t for t in tt.generate(search.FAMILY, 700, seed, split) if not search.is_repeat(t.id)]


def _scrapes(q: dict) -> list[str]:
    return [s["arguments"]["url"] for s in q["plan"] if s["name"] == "web_scrape"]


def test_registered_family_and_metric() -> None:
    assert tt.GENERATORS[search.FAMILY] is search.generate and search.FAMILY in tt.SHARED_FAMILIES
    assert tt.METRIC_FAMILIES[search.METRIC] == (search.FAMILY,) and search.METRIC in tt.SHARED_METRICS
    root = _root()
    assert root.name.startswith(f"seed{sw.ROOT_SEED}-r{sw.REGIONS}-") and sw.world_root() == root
    assert {p.name for p in root.iterdir()} == {"pages.jsonl", "questions.jsonl"}


def test_world_is_deterministic_in_seed_and_region(tmp_path) -> None:
    a, b = sw.write_world(tmp_path / "a", seed=0), sw.write_world(tmp_path / "b", seed=0)
    for name in ("pages.jsonl", "questions.jsonl"):
        assert (a / name).read_bytes() == (b / name).read_bytes() == (_root() / name).read_bytes()
    other = sw.build_world(1)
    assert sorted(other) != sorted(sw.build_world(0))  # another seed, another world
    # region r depends on (seed, r) alone: building fewer regions leaves the first ones unchanged
    names = sw._names(1)
    assert [e.__dict__ for e in sw._region(1, 2, names)] == [
        e.__dict__ for e in other.values() if e.region == 2
    ]
    kinds = Counter(e.kind for e in other.values())
    assert kinds == {k: n * sw.REGIONS for k, n in sw.PER_REGION.items()}
    a_rows, b_rows = tt.generate(search.FAMILY, 40, 3), tt.generate(search.FAMILY, 40, 3)
    assert [t.prompt_row().model_dump() for t in a_rows] == [t.prompt_row().model_dump() for t in b_rows]
    assert [t.id for t in tt.generate(search.FAMILY, 40, 4)] != [t.id for t in a_rows]


def test_plans_alternate_search_and_scrape_and_hops_match() -> None:
    qs = _questions()
    assert len(qs) > 450 and {q["hops"] for q in qs} == {2, 3, 4}
    assert all(Counter(q["template"] for q in qs)[t] for t in sw.TEMPLATES)  # every template has instances
    for q in qs:
        plan, hops = q["plan"], q["hops"]
        assert hops == sw.TEMPLATES[q["template"]].hops and len(plan) == 2 * hops + 1, q["id"]
        for search_step, scrape_step in zip(plan[0:-1:2], plan[1:-1:2], strict=True):
            assert search_step["name"] == "web_search" and scrape_step["name"] == "web_scrape"
            slug = scrape_step["arguments"]["url"].removeprefix(sw.SITE)
            assert scrape_step["arguments"]["url"] == sw.SITE + slug and slug.isalpha()
            assert _pages()[scrape_step["arguments"]["url"]]["title"] == search_step["arguments"]["query"]
        assert plan[-1] == {"name": "answer", "arguments": {"answer": q["answer"]}}
        assert plan[0]["arguments"]["query"] in q["question"]  # the first name comes from the question
        scrapes = _scrapes(q)
        assert len(set(scrapes)) == hops == len(scrapes), q["id"]


def test_gold_answer_is_on_the_last_scraped_page_only() -> None:
    """Each hop names the next page's entity on the page before; only the last page holds the answer."""
    for q in _questions():
        scrapes, answer = _scrapes(q), q["answer"].lower()
        assert answer in _content(scrapes[-1]).lower(), q["id"]
        assert not any(answer in _content(url).lower() for url in scrapes[:-1]), q["id"]
        for url, query in zip(scrapes, [s["arguments"]["query"] for s in q["plan"][2:-1:2]], strict=False):
            assert query in _content(url), (q["id"], url, query)


def test_extraction_drops_navigation_and_footer() -> None:
    world = sw.build_world(sw.ROOT_SEED)
    assert len(_pages()) == len(world)
    for url, page in _pages().items():
        entity = world[url.removeprefix(sw.SITE)]
        assert "<nav" in page["html"] and "<footer" in page["html"] and page["title"] == entity.name
        for text in (
            _content(url),
            trafilatura.extract(page["html"], url=url, output_format="markdown", include_comments=False),
            trafilatura.extract(page["html"], favor_precision=True),
        ):
            assert not [b for b in BOILERPLATE if b in text], (url, text)
            assert all(s in text for s in sw.facts(entity, world)), (url, text)


def test_heldout_and_train_share_no_question_entity_pair_or_page() -> None:
    train, held = _unique("train"), _unique("heldout")
    by_split = Counter(q["split"] for q in _questions())
    assert len(train) == by_split["train"] and len(held) == by_split["heldout"] and len(held) > 100
    for a, b in ((train, held), (held, train)):
        assert {t.id for t in a}.isdisjoint(t.id for t in b)
    key = lambda t: (t.metadata["template"], t.metadata["gold"]["plan"][0]["arguments"]["query"])  # noqa: E731
    assert not {key(t) for t in train} & {key(t) for t in held}
    assert not {t.prompt[-1]["content"] for t in train} & {t.prompt[-1]["content"] for t in held}
    assert not {t.metadata["template"] for t in train} & set(sw.HELDOUT_TEMPLATES)
    assert {t.metadata["template"] for t in held} >= set(sw.HELDOUT_TEMPLATES)
    # held-out regions: no training plan reads or searches any of their pages
    region = {e.url: e.region for e in sw.build_world(sw.ROOT_SEED).values()}
    held_pages = {u for u, r in region.items() if r % sw.HELDOUT_EVERY == sw.HELDOUT_EVERY - 1}
    train_pages = {u for t in train for s in t.metadata["gold"]["plan"] if (u := s["arguments"].get("url"))}
    assert held_pages and train_pages and not train_pages & held_pages
    assert sorted(t.id for t in _unique("heldout", seed=5)) == sorted(t.id for t in held)  # seed orders only


def test_rows_name_the_world_and_carry_the_gold() -> None:
    rows = tt.generate(search.FAMILY, 30, 0)
    looped = tt.generate(search.FAMILY, len(_unique("train")) + 2, 0)
    assert search.is_repeat(looped[-1].id) and looped[-1].id == f"{looped[1].id}-r1"
    for task in rows:
        row, meta = task.prompt_row().model_dump(), task.metadata
        q = next(q for q in _questions() if q["id"] == meta["question_id"])
        assert meta["env"] == search.ENV and meta["environment"] == "agent"
        assert meta["environment_options"] == {"env": search.ENV, "concurrency": 4, "ray_actors": 0}
        assert meta["reward"] == search.REWARD and meta["judge"] == "deterministic"
        assert meta["family"] == search.FAMILY and meta["tools_enabled"] == ["web_search", "web_scrape"]
        assert Path(meta["world"]) == _root() and (Path(meta["world"]) / "pages.jsonl").is_file()
        assert meta["gold"] == {"answer": q["answer"], "aliases": q["aliases"], "plan": q["plan"]}
        assert row["label"] == {"answer": q["answer"], "aliases": q["aliases"]} and meta["hops"] == q["hops"]
        assert [m["role"] for m in task.prompt] == ["system", "user"] and task.prompt[1]["content"] == q[
            "question"
        ]
        assert task.answer == f"<answer>{q['answer']}</answer>" and meta["limits"]["max_tool_calls"] == 9


def test_answers_cannot_be_read_off_the_question() -> None:
    """The answer (or an alias) never occurs in the question, and the world's names are not English."""
    words = {w.lower() for w in _WORDS}
    names = {e.name for e in sw.build_world(sw.ROOT_SEED).values()}
    assert not {n.lower() for n in names} & words
    for q in _questions():
        text = q["question"].lower()
        assert not [a for a in [q["answer"], *q["aliases"]] if a.lower() in text], q["id"]
        assert not re.search(r"\d", q["question"])  # years are answers, never given


def test_questions_answers_and_gold_turns_fit_the_micro_budget() -> None:
    """Each name is two micro tokens; question, every model turn, every tool text and the whole
    conversation fit the family's budgets (48 tokens a turn, 160 a tool text, the context)."""
    limits = search.LIMITS
    assert {_ntok(" " + e.name) for e in sw.build_world(sw.ROOT_SEED).values()} == {2}
    assert max(_ntok(q["question"]) for q in _questions()) <= 40
    assert max(_ntok(q["answer"]) for q in _questions()) <= 8
    tasks = _unique("train") + _unique("heldout")
    rows = search.gold_conversations(tasks)
    assert len(rows) == len(tasks) == len(_questions())
    longest: dict[int, int] = {}
    for task, row in zip(tasks, rows, strict=True):
        tools = [m["content"] for m in row["messages"] if m["role"] == "tool"]
        assert max(map(_ntok, tools)) <= limits["tool_result_max_tokens"]
        messages, specs = from_openai(row)
        messages = [m.model_copy(update={"loss": int(m.role == "assistant")}) for m in messages]
        ids, mask = render_with_loss_mask(_tok(), messages, specs)
        turns = [len(s) for s in "".join(map(str, mask)).split("0") if s]
        assert len(turns) == 2 * task.metadata["hops"] + 1 and max(turns) <= limits["max_new_tokens"]
        hops = task.metadata["hops"]
        longest[hops] = max(longest.get(hops, 0), len(ids))
    assert max(longest.values()) <= limits["max_context_tokens"], longest


def test_gold_conversations_follow_the_plan_and_fail_closed() -> None:
    tasks = _unique("train")[:40]
    rows = search.gold_conversations(tasks)
    assert len(rows) == len(tasks)
    for task, row in zip(tasks, rows, strict=True):
        plan, msgs = task.metadata["gold"]["plan"], row["messages"]
        assert row["id"] == task.id and msgs[:2] == task.prompt
        assert [m["role"] for m in msgs[2:]] == ["assistant", "tool"] * (len(plan) - 1) + ["assistant"]
        assert {t["function"]["name"] for t in row["tools"]} == {"web_search", "web_scrape"}
        for step, call, result in zip(plan, msgs[2:-1:2], msgs[3:-1:2], strict=False):
            [tc] = call["tool_calls"]
            assert tc["function"]["name"] == step["name"] == result["name"]
            assert json.loads(tc["function"]["arguments"]) == step["arguments"]
            assert result["tool_call_id"] == tc["id"] and result["content"]
        for search_msg, scrape_step in zip(msgs[3:-1:4], plan[1::2], strict=False):
            first = search_msg["content"].splitlines()[1].strip()
            assert first == f"URL: {scrape_step['arguments']['url']}"  # the target ranks first
        answer = task.metadata["gold"]["answer"]
        assert msgs[-1] == {"role": "assistant", "content": f"<answer>{answer}</answer>"}
        assert answer in msgs[-2]["content"]  # the last scrape's text
    # a plan that scrapes a page its search did not show, or whose last page lacks the answer, is left out
    bad_url, bad_answer = tasks[0], tasks[1]
    gold = bad_url.metadata["gold"]
    plan = [*gold["plan"]]
    plan[1] = {"name": "web_scrape", "arguments": {"url": sw.SITE + "nowhere"}}
    bad_url.metadata = {**bad_url.metadata, "gold": {**gold, "plan": plan}}
    gold = bad_answer.metadata["gold"]
    plan = [*gold["plan"][:-1], {"name": "answer", "arguments": {"answer": "Nowhere"}}]
    bad_answer.metadata = {**bad_answer.metadata, "gold": {**gold, "answer": "Nowhere", "plan": plan}}
    assert search.gold_conversations([bad_url, bad_answer, tasks[2]]) == rows[2:3]


def test_no_train_question_is_screened_out_by_the_heldout_set() -> None:
    """The start name leads each question, so the 8-gram screens drop no train question."""
    held = tt.heldout_tasks(search.METRIC, 200, 0)
    items = [BenchmarkItem(t.id, prompt_text(t.prompt_row())) for t in held]
    index = build_index([("heldout:search_accuracy", items, False)])
    train = _unique("train")
    assert scan_texts(index, [screen_text(t) for t in train]) == [None] * len(train)


def test_search_shows_the_target_first_with_its_fact_free_lead() -> None:
    """With :data:`search.TOOLS_CONFIG` a search shows the named page first, its snippet only the lead
    sentence (no fact), and a scrape its title, URL and article; an unknown page is a failed call."""
    world = sw.build_world(sw.ROOT_SEED)
    for q in _questions()[::9]:
        queries = [s["arguments"]["query"] for s in q["plan"][0:-1:2]]
        for query, url in zip(queries, _scrapes(q), strict=True):
            text, ok = search.call_tool(_root(), "c0", "web_search", {"query": query})
            entity = world[url.removeprefix(sw.SITE)]
            lead = sw.facts(entity, world)[0]
            blocks = text.split("\n\n")
            assert ok and blocks[0] == f"1. {query}\n   URL: {url}\n   {lead}", text
            assert len(blocks) <= search.TOOLS_CONFIG["results"]
            page, ok = search.call_tool(_root(), "c1", "web_scrape", {"url": url})
            assert (
                ok
                and page.startswith(f"Title: {query}\nURL: {url}\n\n")
                and page.endswith(sw.facts(entity, world)[-1])
            )
    text, ok = search.call_tool(_root(), "c2", "web_scrape", {"url": sw.SITE + "nowhere"})
    assert not ok and text.startswith("Error: could not read")
