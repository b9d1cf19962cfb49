"""Stage 06's search tools: BM25 store, extraction, API clients, blocklist, summarizer, sandboxed python.

Serper, Jina Reader and the summarizer's chat endpoint are remote APIs we cannot call here: the tests run
the real clients (httpx, and ``infra.endpoints.ChatClient``) against :class:`ApiDouble`, a local HTTP
server on 127.0.0.1 that stands in for the remote API and answers with scripted replies. Everything else
(bm25s, trafilatura, the blocklist, the sandbox) is the real thing.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from infra.agents.contract import EnvironmentFailure
from infra.agents.search import (
    Blocklist,
    BM25Index,
    JinaConfig,
    JinaReaderClient,
    Page,
    PageFetchError,
    PageStore,
    SearchAuthError,
    SearchTimeout,
    SearchUnavailable,
    SerperClient,
    SerperConfig,
    Summarizer,
    SummarizerUnavailable,
    extract_main_content,
)
from infra.agents.search.summarize import FACTS_PREFIX, numbers
from infra.agents.search.tools import SearchToolsConfig, build_search_tools, python_tool
from infra.endpoints import ChatClient

Reply = tuple[int, Any, float]  # status, body (dict → JSON, str → text), delay in seconds


class ApiDouble:
    """A loopback stand-in for a remote HTTP API: each request gets the next scripted reply (last repeats)."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                double.requests.append(
                    {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
                )
                status, payload, delay = double.replies[min(len(double.requests), len(double.replies)) - 1]
                time.sleep(delay)
                data = (json.dumps(payload) if isinstance(payload, dict) else payload).encode()
                try:
                    self.send_response(status)
                    self.send_header(
                        "Content-Type", "application/json" if isinstance(payload, dict) else "text/plain"
                    )
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api() -> Iterator[Any]:
    doubles: list[ApiDouble] = []

    def start(*replies: Reply) -> ApiDouble:
        doubles.append(ApiDouble(list(replies)))
        return doubles[-1]

    yield start
    for d in doubles:
        d.close()


def _html(title: str, body: str) -> str:
    return (
        f"<html><head><title>{title}</title></head><body>"
        "<nav><ul><li><a href='/'>Home</a></li><li><a href='/about'>About Tiny Wiki</a></li>"
        "<li><a href='/random'>Random article</a></li></ul></nav>"
        f"<main><article><h1>{title}</h1>{body}</article></main>"
        "<footer><p>Copyright Tiny Wiki Foundation. Privacy policy. Contact us.</p></footer></body></html>"
    )


PAGES = [
    Page(
        url="https://tiny.wiki/people/ada-vance",
        title="Ada Vance",
        html=_html(
            "Ada Vance",
            "<p>Ada Vance is a glassblower born on 14 March 1962 in Port Elsmere.</p>"
            "<p>In 1991 she founded Lumen Glassworks, which employed 1,240 people by 2010.</p>",
        ),
    ),
    Page(
        url="https://tiny.wiki/companies/lumen-glassworks",
        title="Lumen Glassworks",
        html=_html(
            "Lumen Glassworks",
            "<p>Lumen Glassworks is a glass manufacturer headquartered in Port Elsmere.</p>"
            "<p>The company was founded by Ada Vance; its revenue in 2020 was 88.5 million crowns.</p>",
        ),
    ),
    Page(
        url="https://tiny.wiki/places/port-elsmere",
        title="Port Elsmere",
        text="Port Elsmere is a harbour town with a population of 48,300. Its mayor is Colm Ibarra.",
    ),
    Page(url="https://tiny.wiki/events/b-twin", title="Harbour regatta", text="The regatta sails each June."),
    Page(url="https://tiny.wiki/events/a-twin", title="Harbour regatta", text="The regatta sails each June."),
]


@pytest.fixture(scope="module")
def index() -> BM25Index:
    return BM25Index.build(PageStore(PAGES))


def _call(tool: Any, **arguments: Any) -> dict[str, Any]:
    return tool._tool_func({"toolUseId": "t1", "input": arguments})


def _text(result: dict[str, Any]) -> str:
    return result["content"][0]["text"]


# ---------------------------------------------------------------- store, index, extraction


def test_bm25_ranks_the_right_page_first_and_is_deterministic(index: BM25Index) -> None:
    assert index.search("glassblower born Port Elsmere")[0].url == "https://tiny.wiki/people/ada-vance"
    assert index.search("mayor population harbour town")[0].url == "https://tiny.wiki/places/port-elsmere"
    top = index.search("Lumen Glassworks revenue")[0]
    assert top.url == "https://tiny.wiki/companies/lumen-glassworks"
    assert "88.5 million" in top.snippet  # the snippet is the sentence that matches the query
    # identical pages tie on score: the smaller URL comes first, every time, in a fresh index too
    twins = [r.url for r in index.search("regatta") if "twin" in r.url]
    assert twins == ["https://tiny.wiki/events/a-twin", "https://tiny.wiki/events/b-twin"]
    again = BM25Index.build(PageStore(reversed(PAGES)))
    for query in ("regatta June", "Ada Vance", "Port Elsmere"):
        assert again.search(query) == index.search(query) == index.search(query)
    assert index.search("the of and") == [] and index.search("zzzz unknownword") == []
    assert len(index.search("Port Elsmere", k=2)) == 2


def test_index_save_load_round_trip_and_store_mismatch(index: BM25Index, tmp_path: Path) -> None:
    index.save(tmp_path / "idx")
    loaded = BM25Index.load(tmp_path / "idx", PageStore(PAGES))
    for query in ("Ada Vance glassblower", "regatta", "revenue 2020"):
        assert loaded.search(query) == index.search(query)
    changed = [*PAGES[:-1], Page(url="https://tiny.wiki/x", title="X", text="other")]
    with pytest.raises(ValueError, match="different page store"):
        BM25Index.load(tmp_path / "idx", PageStore(changed))
    with pytest.raises(FileNotFoundError, match="pages.json"):
        BM25Index.load(tmp_path, PageStore(PAGES))


def test_store_jsonl_round_trip_lookup_and_errors(tmp_path: Path) -> None:
    PageStore(PAGES).save(tmp_path / "pages.jsonl")
    store = PageStore.load(tmp_path)  # a folder of .jsonl files
    assert len(store) == len(PAGES)
    assert store.get("HTTPS://Tiny.Wiki/places/port-elsmere/#history").title == "Port Elsmere"
    assert store.get("https://tiny.wiki/nowhere") is None
    (tmp_path / "pages.jsonl").write_text('{"url": "https://a.b", "text": "x"}\n{"url": "https://c.d"}\n')
    with pytest.raises(
        ValueError, match=r"pages.jsonl:2: not a page record: .*exactly one of 'html' and 'text'"
    ):
        PageStore.load(tmp_path / "pages.jsonl")
    with pytest.raises(ValueError, match="duplicate URL"):
        PageStore([PAGES[0], PAGES[0].model_copy()])


def test_extraction_drops_navigation_and_footer_and_keeps_the_body(index: BM25Index) -> None:
    text = extract_main_content(PAGES[0].html or "")
    assert "born on 14 March 1962 in Port Elsmere" in text and "employed 1,240 people" in text
    for boilerplate in ("About Tiny Wiki", "Random article", "Privacy policy", "Copyright"):
        assert boilerplate not in text
    # the index never sees the boilerplate either: a navigation word matches nothing
    assert index.search("privacy policy copyright") == []
    scrape = build_search_tools(SearchToolsConfig(), index=index, with_python=False)[1]
    result = _call(scrape, url="https://tiny.wiki/people/ada-vance")
    assert result["status"] == "success"
    assert _text(result).startswith("Title: Ada Vance\nURL: https://tiny.wiki/people/ada-vance")
    assert "Lumen Glassworks" in _text(result) and "Privacy policy" not in _text(result)
    missing = _call(scrape, url="https://tiny.wiki/people/nobody")
    assert missing["status"] == "error" and "no such page" in _text(missing)


def test_local_search_tool_numbers_results_and_rejects_malformed_arguments(index: BM25Index) -> None:
    search, scrape = build_search_tools(SearchToolsConfig(), index=index, with_python=False)
    text = _text(_call(search, query="Ada Vance glassblower"))
    assert text.startswith("1. Ada Vance\n   URL: https://tiny.wiki/people/ada-vance\n   ")
    assert "\n\n2. " in text
    assert _text(_call(search, query="qqqq")) == "No results for 'qqqq'."
    malformed = [
        (search, {}),
        (search, {"query": 7}),
        (search, {"query": "  "}),
        (search, {"query": "x" * 1001}),
        (scrape, {"url": None}),
        (scrape, {"url": "a b"}),
    ]
    for tool, args in malformed:
        result = _call(tool, **args)
        assert result["status"] == "error" and _text(result).startswith("Error: malformed tool call"), args


# ---------------------------------------------------------------- API clients (loopback doubles)

SERPER_OK = {
    "organic": [
        {
            "title": "Ada Vance - Wikipedia",
            "link": "https://en.wikipedia.org/wiki/Ada_Vance",
            "snippet": "Glass.",
        },
        {"title": "HLE answers", "link": "https://huggingface.co/datasets/cais/hle", "snippet": "Leak."},
        {"title": "News", "link": "https://news.example.com/a", "snippet": "Story.", "date": "2 days ago"},
    ]
}


def _serper(double: ApiDouble, **kw: Any) -> SerperClient:
    config = SerperConfig(base_url=double.url, max_retries=kw.pop("max_retries", 2), backoff_s=0, **kw)
    return SerperClient(config, api_key="test-key")


def test_serper_client_posts_the_paper_settings_and_parses_organic_results(api: Any) -> None:
    double = api((200, SERPER_OK, 0))
    results = _serper(double).search("ada vance")
    request = double.requests[0]
    assert request["method"] == "POST" and request["path"] == "/search"
    assert request["headers"]["X-API-KEY"] == "test-key"
    assert json.loads(request["body"]) == {"q": "ada vance", "num": 10, "gl": "us", "hl": "en"}
    assert [r.url for r in results] == [o["link"] for o in SERPER_OK["organic"]]
    assert results[0].title == "Ada Vance - Wikipedia" and results[2].snippet == "2 days ago — Story."


def test_serper_client_retries_after_a_500(api: Any) -> None:
    double = api((500, {"message": "internal"}, 0), (200, SERPER_OK, 0))
    assert len(_serper(double).search("q")) == 3
    assert len(double.requests) == 2


def test_serper_client_timeout_and_persistent_5xx_are_typed_infrastructure_failures(api: Any) -> None:
    slow = api((200, SERPER_OK, 1.0))
    with pytest.raises(SearchTimeout, match="gave up after 2 attempts; last: timed out after 0.2s"):
        _serper(slow, timeout_s=0.2, max_retries=1).search("q")
    down = api((503, "overloaded", 0))
    with pytest.raises(SearchUnavailable, match="HTTP 503: overloaded") as info:
        _serper(down).search("q")
    assert isinstance(info.value, EnvironmentFailure) and len(down.requests) == 3
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(SearchUnavailable, match="ConnectError"):
        SerperClient(SerperConfig(base_url=closed, max_retries=0), api_key="k").search("q")


def test_serper_client_auth_errors_name_the_key_variable(api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    double = api((401, {"message": "Unauthorized."}, 0))
    with pytest.raises(
        SearchAuthError, match=r"HTTP 401: the key in SERPER_API_KEY .*Unauthorized\."
    ) as info:
        _serper(double).search("q")
    assert isinstance(info.value, EnvironmentFailure) and len(double.requests) == 1  # never retried
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    with pytest.raises(SearchAuthError, match="set SERPER_API_KEY"):
        SerperClient(SerperConfig(base_url=double.url))


def _jina(double: ApiDouble, **kw: Any) -> JinaReaderClient:
    return JinaReaderClient(JinaConfig(base_url=double.url, max_retries=1, backoff_s=0, **kw), api_key="jk")


def test_jina_client_reads_markdown_and_truncates_to_its_token_budget(api: Any) -> None:
    page = "Title: Ada\n\nURL Source: https://x.org/ada\n\nMarkdown Content:\n" + "word " * 400
    double = api((200, page, 0))
    assert _jina(double).read("https://x.org/ada?lang=en") == page
    request = double.requests[0]
    assert (
        request["path"] == "/https://x.org/ada?lang=en" and request["headers"]["Authorization"] == "Bearer jk"
    )
    assert request["headers"]["X-Return-Format"] == "markdown"
    cut = _jina(double, max_tokens=100).read("https://x.org/ada")
    assert len(cut) <= 400 and cut.startswith("Title: Ada")  # 100 tokens of ~4 characters, marker included
    assert cut.endswith(f"\n[truncated from about {-(-len(page) // 4)} tokens]")


def test_jina_page_failures_are_tool_errors_and_service_failures_abort(api: Any) -> None:
    config = SearchToolsConfig(search_backend="local", scrape_backend="jina")
    index = BM25Index.build(PageStore(PAGES))

    def scrape_with(double: ApiDouble, **kw: Any) -> Any:
        return build_search_tools(config, index=index, jina=_jina(double, **kw), with_python=False)[1]

    gone = api((422, {"message": "Failed to goto https://dead.example: net::ERR_NAME_NOT_RESOLVED"}, 0))
    result = _call(scrape_with(gone), url="https://dead.example")
    assert result["status"] == "error" and "ERR_NAME_NOT_RESOLVED" in _text(result)
    slow = api((200, "late", 1.0))  # the page took too long: an observation, not retried
    result = _call(scrape_with(slow, timeout_s=0.2), url="https://slow.example")
    assert result["status"] == "error" and "timed out after 0.2s" in _text(result) and len(slow.requests) == 1
    down = api((503, "maintenance", 0))
    with pytest.raises(SearchUnavailable, match="HTTP 503"):
        _call(scrape_with(down), url="https://ok.example")
    bad_key = api((401, {"message": "invalid token"}, 0))
    with pytest.raises(SearchAuthError, match="JINA_API_KEY"):
        _call(scrape_with(bad_key), url="https://ok.example")


# ---------------------------------------------------------------- blocklist


def test_blocklist_matches_hosts_subdomains_and_path_prefixes() -> None:
    blocks = Blocklist().blocks
    blocked = [
        "https://huggingface.co/datasets/cais/hle",
        "http://www.kaggle.com/x",
        "hf.co/datasets/a",
        "https://HuggingFace.co/Datasets/vtllms/sealqa/resolve/main/x.parquet",
        "https://lastexam.ai",
        "https://openaipublic.blob.core.windows.net/simple-evals/browse_comp_test_set.csv",
        "https://github.com/openai/simple-evals",
        "https://datasets-server.huggingface.co/rows?d=1",
    ]
    allowed = [
        "https://huggingface.co/Qwen/Qwen3-32B",
        "https://github.com/openai/other",
        "https://notkaggle.com/x",
        "https://github.com/openai/simple-evals-fork",
        "https://en.wikipedia.org/wiki/X",
    ]
    assert [u for u in blocked if not blocks(u)] == [] and [u for u in allowed if blocks(u)] == []
    assert Blocklist(["example.org/private"]).blocks("https://sub.example.org/private/a")
    assert not Blocklist([]).blocks("https://huggingface.co/datasets/cais/hle")
    with pytest.raises(ValueError, match="blocklist entry"):
        Blocklist(["/just/a/path"])


def test_blocklist_filters_both_search_backends_and_refuses_blocked_scrapes(
    api: Any, index: BM25Index
) -> None:
    serper, jina = api((200, SERPER_OK, 0)), api((200, "page", 0))
    config = SearchToolsConfig(search_backend="serper", scrape_backend="jina")
    search, scrape = build_search_tools(config, serper=_serper(serper), jina=_jina(jina), with_python=False)
    text = _text(_call(search, query="ada vance"))
    assert "huggingface.co" not in text and "2. News\n   URL: https://news.example.com/a" in text
    result = _call(scrape, url="https://huggingface.co/datasets/cais/hle/viewer")
    assert result["status"] == "error" and "blocked site" in _text(result) and jina.requests == []
    # the local backend: blocking a domain drops its pages and still fills the list from the rest
    local = SearchToolsConfig(blocklist=["tiny.wiki/people"])
    search, scrape = build_search_tools(local, index=index, with_python=False)
    text = _text(_call(search, query="Ada Vance Port Elsmere"))
    assert "tiny.wiki/people" not in text and "1. Lumen Glassworks" in text
    assert _call(scrape, url="https://tiny.wiki/people/ada-vance")["status"] == "error"


# ---------------------------------------------------------------- summarizer

LONG_PAGE = "\n\n".join(
    [
        "Ada Vance was born on 14 March 1962 in Port Elsmere, a town of 48,300 people.",
        "She founded Lumen Glassworks in 1991; by 2010 it employed 1,240 people and sold 88.5 million.",
        "The firm's kiln reached 1,150 degrees, and its 2019-03-12 patent covered a 3.75 mm pane.",
    ]
    + ["Filler paragraph about the history of glass in the harbour district." * 3] * 30
)


def test_summarizer_keeps_every_number_of_a_lossy_summary(api: Any) -> None:
    lossy = "Evidence:\n- Ada Vance founded Lumen Glassworks in 1991 in Port Elsmere.\nSummary: a glassmaker."
    chat = api((200, {"choices": [{"message": {"role": "assistant", "content": lossy}}]}, 0))
    client = ChatClient(chat.url, "judge-model", max_retries=0)
    config = SearchToolsConfig(page_budget_tokens=500)
    local = PageStore([Page(url="https://tiny.wiki/long", title="Long", text=LONG_PAGE), *PAGES[:1]])
    _, scrape = build_search_tools(
        config, index=BM25Index.build(local), summarizer=Summarizer(client), with_python=False
    )
    text = _text(_call(scrape, url="https://tiny.wiki/long"))
    assert text.startswith("[page of") and "condensed by the summarizer" in text and FACTS_PREFIX in text
    for number in numbers(LONG_PAGE):
        assert number in text, number
    assert "born on 14 March 1962" in text and "2019-03-12 patent" in text  # whole sentences restored
    prompt = json.loads(chat.requests[0]["body"])["messages"]
    assert "exactly as written" in prompt[0]["content"] and "88.5 million" in prompt[1]["content"]
    # a page within the budget is returned as is, without asking the summarizer
    assert "Facts" not in _text(_call(scrape, url=PAGES[0].url)) and len(chat.requests) == 1


def test_summarizer_splits_long_pages_and_a_failing_endpoint_aborts(api: Any) -> None:
    echo = api((200, {"choices": [{"message": {"content": "Evidence: none."}}]}, 0))
    summary = Summarizer(ChatClient(echo.url, "m", max_retries=0), max_input_tokens=200).condense(
        LONG_PAGE, 300
    )
    assert (
        len(echo.requests) > 1
        and "part 1 of" in json.loads(echo.requests[0]["body"])["messages"][1]["content"]
    )
    assert all(n in summary for n in numbers(LONG_PAGE))
    down = api((500, "boom", 0))
    with pytest.raises(SummarizerUnavailable, match="HTTP 500") as info:
        Summarizer(ChatClient(down.url, "m", max_retries=0)).condense(LONG_PAGE, 300)
    assert isinstance(info.value, EnvironmentFailure)


# ---------------------------------------------------------------- python in the sandbox


@pytest.fixture(scope="module")
def sandbox(sandbox_ok: None) -> Iterator[Any]:
    from infra.sandbox import Limits, Sandbox

    with Sandbox(Limits(wall_s=10)) as box:
        yield box


def test_python_tool_runs_code_in_the_sandbox(sandbox: Any) -> None:
    tool = python_tool(sandbox, timeout_s=5)
    ok = _call(
        tool, code="import datetime\nprint(2**10, datetime.date(2024, 3, 1) - datetime.date(2023, 3, 1))"
    )
    assert ok["status"] == "success" and _text(ok) == "1024 366 days, 0:00:00"
    failed = _call(tool, code="print('before')\n1/0")
    assert failed["status"] == "error"
    assert _text(failed).startswith("before\n[stderr]: Traceback") and "ZeroDivisionError" in _text(failed)
    assert "rufus-sandbox" not in _text(failed)  # the sandbox harness's own frames are not shown
    assert _text(failed).endswith("[exit code]: 1")
    slow = _call(python_tool(sandbox, timeout_s=1), code="import time\ntime.sleep(30)")
    assert slow["status"] == "error" and "timed out after 1s" in _text(slow)
    for args in ({}, {"code": ""}, {"code": ["print(1)"]}):
        result = _call(tool, **args)
        assert result["status"] == "error" and _text(result).startswith("Error: malformed tool call")


def test_python_tool_has_no_network_and_no_filesystem_beyond_scratch(
    sandbox: Any, api: Any, tmp_path: Path
) -> None:
    double = api((200, "reachable", 0))
    port = double.url.rsplit(":", 1)[1]
    (tmp_path / "secret.txt").write_text("host secret")
    code = f"""
import socket
for host, port in (("127.0.0.1", {port}), ("1.1.1.1", 80)):
    try:
        socket.create_connection((host, port), timeout=2)
        print("connected", host)
    except OSError as exc:
        print("no network", host, type(exc).__name__)
for path in ("/etc/rufus_probe", "{tmp_path}/out.txt", "/usr/rufus_probe"):
    try:
        open(path, "w").write("x")
        print("wrote", path)
    except OSError as exc:
        print("cannot write", path)
try:
    print(open("{tmp_path}/secret.txt").read())
except OSError:
    print("cannot read host file")
open("scratch.txt", "w").write("scratch ok")
print(open("scratch.txt").read())
"""
    result = _call(python_tool(sandbox, timeout_s=8), code=code)
    text = _text(result)
    assert result["status"] == "success", text
    assert "connected" not in text and text.count("no network") == 2 and double.requests == []
    assert "wrote" not in text and text.count("cannot write") == 3 and not (tmp_path / "out.txt").exists()
    assert "host secret" not in text and "cannot read host file" in text
    assert text.endswith("scratch ok")


def test_service_failures_end_the_episode_as_aborted_and_page_errors_do_not() -> None:
    from infra.agents.contract import Termination, termination_from_error

    assert termination_from_error(RuntimeError("tool failed")) is not Termination.ABORTED
    for kind in (SearchUnavailable, SearchTimeout, SearchAuthError, SummarizerUnavailable):
        error = kind("the service failed")
        try:
            raise RuntimeError("strands wrapper") from error
        except RuntimeError as wrapped:
            assert termination_from_error(wrapped) is Termination.ABORTED, type(error).__name__
    assert not issubclass(PageFetchError, EnvironmentFailure)
