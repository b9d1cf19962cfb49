"""The ``search`` agent environment (stage 06 Search Agent, paper §3.7): web_search, web_scrape and python.

Spec: ``search:backend=local,store=PATH[,index=PATH]`` for training and offline use (BM25 over a page
store) or ``search:backend=web`` for evaluation (Serper and Jina Reader), plus ``results=N``,
``snippet_chars=N``, ``page_budget_tokens=N`` (:class:`~infra.agents.search.tools.SearchToolsConfig`),
``python=1`` (the sandboxed ``python`` tool), ``summarize=1`` (condense over-budget pages),
``api_timeout=S`` and ``api_retries=N`` (of the web clients and the summarizer) and the
:class:`~infra.agents.contract.EpisodeLimits` fields (``max_tool_calls``, ``max_iterations``,
``max_new_tokens``, ``max_context_tokens``, ``tool_result_max_tokens``, ``max_tool_errors``). A bad option
is a one-line ValueError naming it. The limits default to the paper's training budgets
(:data:`TRAIN_LIMITS`: <= 100 tool calls, 32K tokens per turn, 128K per trajectory, no cap on failed
calls, which the reward already scales down); evaluation passes ``max_tool_calls=200``
(:data:`EVAL_LIMITS`). Rows carry their task's limits, so these apply to the tasks :meth:`SearchEnv.task_of`
writes (stage 06's data prep, the evaluation harness).

Where things come from:

* ``local``: the page store at ``store`` and its ``bm25s`` index are loaded once per process
  (:func:`local_index`; with ``index=PATH`` the index is read from there, or built and saved there);
* ``web``: the keys from ``SERPER_API_KEY`` (required) and ``JINA_API_KEY`` (optional), the services'
  addresses from ``RUFUS_SERPER_BASE_URL`` / ``RUFUS_JINA_BASE_URL`` when set (tests point them at
  loopback doubles); the clients live for one episode;
* ``summarize=1``: a chat endpoint from ``RUFUS_SEARCH_SUMMARIZER_BASE_URL``, ``_MODEL`` and optional
  ``_API_KEY`` (the teacher's OpenAI-compatible client);
* ``python=1``: one process-wide project sandbox, booted on the first python call.

The blocklist of answer-leaking sites applies to both backends. An episode exposes the tools its task
enables (``AgentTask.tools``, i.e. the row's ``metadata["tools_enabled"]``; all when unset); naming a tool
this spec does not offer is an error. A missing key, store or summarizer endpoint fails the episode's
reset and an API that stops answering raises from the tool: either way the episode is ``aborted``, not 0.
The reward is ``search_judge`` (:func:`rewards.search_agent.score_episode`), its judge chosen by the row's
``metadata["judge"]`` (else ``RUFUS_SEARCH_JUDGE``); :class:`SearchEnv` subclasses may set a default judge.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import os
import threading
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationError
from strands.types.tools import AgentTool

from infra.agents.contract import AgentTask, EnvironmentFailure, EpisodeLimits
from infra.agents.envs.base import AgentEnvironment
from infra.agents.harbor.command_tool import flag_option
from infra.agents.search.clients import JinaReaderClient, SerperClient
from infra.agents.search.store import BM25Index, PageStore
from infra.agents.search.summarize import Summarizer, SummarizerUnavailable
from infra.agents.search.tools import SearchToolsConfig, build_search_tools
from rewards.contract import RewardRequest, RewardResult
from rewards.search_agent import score_episode

TOOL_NAMES = ("web_search", "web_scrape", "python")
#: Paper budgets in training (§3.7, Table 16): 100 tool calls, 32K tokens per turn, 128K per trajectory.
TRAIN_LIMITS: dict[str, Any] = {
    "max_tool_calls": 100,
    "max_iterations": None,
    "max_new_tokens": 32_768,
    "max_context_tokens": 131_072,
    "max_tool_errors": None,
}
#: Evaluation allows 200 tool calls (``search:backend=web,max_tool_calls=200``).
EVAL_LIMITS: dict[str, Any] = {**TRAIN_LIMITS, "max_tool_calls": 200}
#: ``tool_result_max_tokens`` defaults to the page budget plus this (a page's title/URL header, markers).
RESULT_HEADROOM_TOKENS = 512
SERPER_BASE_URL_ENV = "RUFUS_SERPER_BASE_URL"
JINA_BASE_URL_ENV = "RUFUS_JINA_BASE_URL"
SUMMARIZER_ENV = "RUFUS_SEARCH_SUMMARIZER"  # _BASE_URL, _MODEL, _API_KEY
SYSTEM_PROMPT = (
    "You are a research agent. Answer the question by searching the web with web_search, reading pages "
    "with web_scrape and, when a tool named python is offered, computing with it. Check facts against "
    "the pages you read. When you are sure, give only the final answer as <answer>...</answer>."
)


# ---- process-wide resources -----------------------------------------------------------------------------
_INDEX_LOCK = threading.Lock()
_INDEXES: dict[tuple[str, str | None], BM25Index] = {}


def local_index(store: str, index: str | None = None) -> BM25Index:
    """Return the process-wide BM25 index of the page store at ``store`` (built once per path).

    With ``index``, a saved index there is loaded (it must match the store) or a new one is built and
    saved there. Stores are few per process (one corpus, or the tiny world), so the cache is not bounded.
    """
    key = (store, index)
    with _INDEX_LOCK:  # concurrent episodes wait for the one build instead of each building
        if key not in _INDEXES:
            pages = PageStore.load(store)
            if index is not None and (Path(index) / "pages.json").is_file():
                _INDEXES[key] = BM25Index.load(index, pages)
            else:
                _INDEXES[key] = BM25Index.build(pages)
                if index is not None:
                    _INDEXES[key].save(index)
        return _INDEXES[key]


_SANDBOX_LOCK = threading.Lock()


@functools.lru_cache(maxsize=4)
def _sandbox(wall_s: float) -> Any:
    from infra.sandbox import Limits, Sandbox

    box = Sandbox(Limits(wall_s=wall_s), workers=2)
    atexit.register(box.close)
    return box


class LazySandbox:
    """The process-wide project sandbox, started on the first ``run_python`` (search-only episodes and
    spec checks never boot one); ``SandboxUnavailable`` there aborts the episode through the tool."""

    def __init__(self, wall_s: float) -> None:
        self.wall_s = wall_s

    def run_python(self, code: str, timeout_s: float | None = None) -> Any:
        """Run ``code`` in the shared sandbox (see :meth:`infra.sandbox.Sandbox.run_python`)."""
        with _SANDBOX_LOCK:
            box = _sandbox(self.wall_s)
        return box.run_python(code, timeout_s=timeout_s)


def _summarizer(timeout: float | None, retries: int | None) -> Summarizer:
    """Return the summarizer on the endpoint named by ``RUFUS_SEARCH_SUMMARIZER_*``; unset is a failure."""
    from infra.endpoints import ChatClient

    url, model = os.environ.get(f"{SUMMARIZER_ENV}_BASE_URL"), os.environ.get(f"{SUMMARIZER_ENV}_MODEL")
    if not url or not model:
        raise SummarizerUnavailable(
            f"search option summarize=1: set {SUMMARIZER_ENV}_BASE_URL and {SUMMARIZER_ENV}_MODEL "
            f"(and {SUMMARIZER_ENV}_API_KEY if the endpoint needs one)"
        )
    kwargs: dict[str, Any] = {"api_key": os.environ.get(f"{SUMMARIZER_ENV}_API_KEY") or None}
    if timeout is not None:
        kwargs["timeout"] = timeout
    if retries is not None:
        kwargs["max_retries"] = retries
    return Summarizer(ChatClient(url, model, **kwargs))


def _number_option(owner: str, key: str, value: Any, kind: type, expected: str) -> Any:
    """Return ``value`` (None, or a number of ``kind``: > 0 for floats, >= 0 for ints); ValueError naming
    ``key`` otherwise."""
    if value is None:
        return None
    ok = not isinstance(value, bool) and isinstance(value, int if kind is int else (int, float))
    if not ok or (value <= 0 if kind is float else value < 0):
        raise ValueError(f"{owner} option {key}={value!r}: expected {expected}")
    return kind(value)


def _option_error(owner: str, exc: ValidationError, given: dict[str, Any]) -> ValueError:
    """Return a one-line ValueError naming the first bad option of ``exc`` (pydantic's first error)."""
    err = exc.errors()[0]
    key = str(err["loc"][0]) if err["loc"] else "?"
    if err["type"] == "extra_forbidden":
        return ValueError(f"{owner} option {key}: unknown option")
    return ValueError(f"{owner} option {key}={given.get(key)!r}: {err['msg']}")


# ---- the environment ------------------------------------------------------------------------------------
class SearchEnv(AgentEnvironment):
    """Questions answered with web_search, web_scrape (and python); reward: the gated ``search_judge``."""

    name = "search"
    system_prompt = SYSTEM_PROMPT
    #: Judge used when a row names none (None: ``RUFUS_SEARCH_JUDGE``, else the training judge).
    default_judge: ClassVar[str | None] = None
    #: Whether backend=local needs ``store=`` (a subclass may take each task's store from its metadata).
    store_option_required: ClassVar[bool] = True

    def __init__(
        self,
        backend: Any = "local",
        store: Any = None,
        index: Any = None,
        results: Any = 10,
        snippet_chars: Any = 240,
        page_budget_tokens: Any = 8192,
        python: Any = False,
        summarize: Any = False,
        api_timeout: Any = None,
        api_retries: Any = None,
        **limits: Any,
    ) -> None:
        owner = self.name
        if backend not in ("local", "web"):
            raise ValueError(f"{owner} option backend={backend!r}: expected local or web")
        if backend == "local" and store is None and self.store_option_required:
            raise ValueError(f"{owner} option store: backend=local needs store=PATH (a page store .jsonl)")
        for key, value in (("store", store), ("index", index)):
            if backend == "web" and value is not None:
                raise ValueError(f"{owner} option {key}: only backend=local reads a page store")
        self.backend = str(backend)
        self.store = None if store is None else str(Path(str(store)).resolve())
        self.index = None if index is None else str(Path(str(index)).resolve())
        self.python = flag_option(owner, "python", python)
        self.summarize = flag_option(owner, "summarize", summarize)
        self.api_timeout = _number_option(owner, "api_timeout", api_timeout, float, "seconds > 0")
        self.api_retries = _number_option(owner, "api_retries", api_retries, int, "an integer >= 0")
        web = backend == "web"
        given = {"results": results, "snippet_chars": snippet_chars, "page_budget_tokens": page_budget_tokens}
        try:
            backends = {"search_backend": "serper", "scrape_backend": "jina"} if web else {}
            self.tools_config = SearchToolsConfig(**backends, **given)
        except ValidationError as exc:
            raise _option_error(owner, exc, given) from None
        default_result = self.tools_config.page_budget_tokens + RESULT_HEADROOM_TOKENS
        merged = {**TRAIN_LIMITS, "tool_result_max_tokens": default_result, **limits}
        try:
            self.limits = EpisodeLimits(**merged)
        except ValidationError as exc:
            raise _option_error(owner, exc, merged) from None
        self._tools: list[AgentTool] = []
        self._clients: list[Any] = []

    # ---- tasks
    def task_of(
        self,
        task_id: str,
        question: str,
        answers: list[str],
        *,
        judge: str | None = None,
        tools: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> AgentTask:
        """Return the agent task of one question: the system prompt, the question, the gold answers (the
        first canonical, the rest aliases) as the label, this spec's limits and tools (None: all)."""
        if not answers:
            raise ValueError(f"{self.name} task {task_id!r}: no gold answer")
        if tools is not None:
            self.check_tools(tools, task_id)
        meta = {"env": self.name, "question": question, **({"judge": judge} if judge else {})}
        return AgentTask(
            id=task_id,
            messages=[{"role": "system", "content": self.system_prompt or SYSTEM_PROMPT},
                      {"role": "user", "content": question}],
            tools=tools,
            ground_truth={"answer": answers[0], "aliases": list(answers[1:])},
            limits=self.limits,
            metadata={**meta, **(metadata or {})},
        )  # fmt: skip

    def tasks(self, n: int, seed: int = 0) -> list[AgentTask]:
        """The search environment generates no questions: rows come from a question set through
        :meth:`task_of` (stage 06's data prep, the evaluation harness)."""
        raise ValueError(
            f"{self.name} environment generates no tasks: write rows with SearchEnv.task_of from a question "
            "set (stage 06's data prep), or use search_tiny for the embedded world"
        )

    # ---- tools
    def available_tools(self) -> tuple[str, ...]:
        """Names of the tools this spec offers."""
        return TOOL_NAMES if self.python else TOOL_NAMES[:2]

    def check_tools(self, names: list[str], task_id: str) -> None:
        """Raise ValueError naming a tool of ``names`` this spec does not offer."""
        missing = [n for n in names if n not in self.available_tools()]
        if missing:
            hint = " (add python=1 to the spec)" if "python" in missing and not self.python else ""
            raise ValueError(
                f"{self.name} task {task_id!r}: tools_enabled names {missing}, not offered by this "
                f"environment ({', '.join(self.available_tools())}){hint}"
            )

    def enabled_tools(self, task: AgentTask) -> list[str]:
        """Return the tools of ``task``: its ``tools`` (the row's ``tools_enabled``), else all offered."""
        names = task.tools if task.tools is not None else task.metadata.get("tools_enabled")
        if names is None:
            return list(self.available_tools())
        self.check_tools(list(names), task.id)
        return list(names)

    def store_of(self, task: AgentTask) -> str:
        """Return the page store ``task`` searches (backend=local): the spec's ``store``."""
        if self.store is None:
            raise ValueError(f"{self.name} task {task.id!r}: no page store (store=PATH)")
        return self.store

    def _build_tools(self, task: AgentTask) -> list[AgentTool]:
        enabled = self.enabled_tools(task)
        config = self.tools_config
        api: dict[str, Any] = {}
        if self.api_timeout is not None:
            api["timeout_s"] = self.api_timeout
        if self.api_retries is not None:
            api["max_retries"] = self.api_retries
        index = serper = jina = summarizer = None
        if self.backend == "local":
            store = self.store_of(task)
            try:
                index = local_index(store, self.index)
            except (OSError, ValueError) as exc:
                raise EnvironmentFailure(f"{self.name}: page store {store}: {exc}") from exc
        else:
            serper_url = os.environ.get(SERPER_BASE_URL_ENV) or config.serper.base_url
            jina_url = os.environ.get(JINA_BASE_URL_ENV) or config.jina.base_url
            serper = SerperClient(config.serper.model_copy(update={"base_url": serper_url, **api}))
            self._clients.append(serper)
            jina = JinaReaderClient(config.jina.model_copy(update={"base_url": jina_url, **api}))
            self._clients.append(jina)
        if self.summarize:
            summarizer = _summarizer(self.api_timeout, self.api_retries)
        with_python = "python" in enabled
        tools = build_search_tools(
            config,
            index=index,
            serper=serper,
            jina=jina,
            summarizer=summarizer,
            sandbox=LazySandbox(max(config.python_timeout_s, 1.0)) if with_python else None,
            with_python=with_python,
        )
        return [t for t in tools if t.tool_name in enabled]

    def tools(self) -> list[AgentTool]:
        """Return the current episode's tools ([] outside an episode)."""
        return list(self._tools)

    async def reset(self, task: AgentTask) -> None:
        """Build the episode's tools (loading the page store on first use); raises when a backend is not
        usable (no store, no key, no summarizer endpoint), which aborts the episode."""
        try:
            self._tools = await asyncio.to_thread(self._build_tools, task)
        except BaseException:
            self._close_clients()
            raise

    def score(self, task: AgentTask, request: RewardRequest) -> RewardResult:
        """Return the gated ``search_judge`` reward (the row's judge, else :attr:`default_judge`)."""
        meta = request.metadata
        if self.default_judge and not meta.get("judge"):
            request = request.model_copy(update={"metadata": {**meta, "judge": self.default_judge}})
        return score_episode(request)

    def _close_clients(self) -> None:
        clients, self._clients = self._clients, []
        for client in clients:
            client.close()

    async def cleanup(self) -> None:
        """Close the episode's API clients and drop its tools."""
        self._tools = []
        self._close_clients()
