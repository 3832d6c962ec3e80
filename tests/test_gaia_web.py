"""The GAIA web backends: a local FTS5 corpus, three hosted search APIs (against a local server), the cache.

All pages and answers are made up here; the hosted APIs are imitated by a stdlib HTTP server on
127.0.0.1 that checks each API's key header or body, so nothing leaves the machine.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from agentspec.errors import ConfigError
from envs.gaia.web import (
    BraveSearch,
    CachedWeb,
    FetchError,
    LocalCorpus,
    SearchError,
    SearchResult,
    SerperSearch,
    TavilySearch,
    WebBackend,
    html_to_text,
    web_backend,
)

# --------------------------------------------------------------------------- a made-up corpus

PAGES = {
    "birds/puffins.md": "# Marbled puffins of Quillory\n\nThe marbled puffin nests on the cliffs of Quillory island. "
    "Colonies were first counted in 1873 by the surveyor Odile Brasque.\n",
    "notes/bridges.txt": "Bridges of Vantmoor\nThe Vantmoor toll bridge has eleven arches and opened in 1911.\n",
    "towns/ferrowick.html": "<html><head><title>Ferrowick town</title><style>.x{color:red}</style>"
    "<script>var secret = 'zzhidden';</script></head><body><h1>Ferrowick</h1>"
    "<p>Ferrowick sits on the river Lune &amp; exports copper kettles.</p>"
    "<ul><li>Population: 4,210</li><li>Founded: 1640</li></ul></body></html>",
    "misc/kettles.md": "# Copper kettles\n\nA history of the copper kettle trade, briefly mentioning Ferrowick.\n",
}


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    for rel, text in PAGES.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    manifest = {"notes/bridges.txt": {"url": "https://example.test/vantmoor-bridges", "title": "Vantmoor bridges"}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (tmp_path / "ignored.pdf").write_bytes(b"%PDF-1.4 not a page")
    return tmp_path


@pytest.fixture
def corpus(corpus_dir: Path) -> LocalCorpus:
    return LocalCorpus(corpus_dir)


def test_corpus_indexes_every_page_with_manifest_urls_and_default_titles(corpus: LocalCorpus) -> None:
    assert isinstance(corpus, WebBackend)
    assert len(corpus) == 4  # the .pdf is not a page
    assert set(corpus.urls) == {
        "corpus://birds/puffins.md",
        "https://example.test/vantmoor-bridges",
        "corpus://towns/ferrowick.html",
        "corpus://misc/kettles.md",
    }
    titles = {r.url: r.title for q in ("puffin", "Vantmoor", "Ferrowick") for r in corpus.search(q)}
    assert titles["corpus://birds/puffins.md"] == "Marbled puffins of Quillory"  # first markdown heading
    assert titles["https://example.test/vantmoor-bridges"] == "Vantmoor bridges"  # from the manifest
    assert titles["corpus://towns/ferrowick.html"] == "Ferrowick town"  # the html <title>


def test_search_ranks_the_most_relevant_page_first_and_marks_the_snippet(corpus: LocalCorpus) -> None:
    results = corpus.search("when were the puffin colonies counted", k=3)
    assert results[0].url == "corpus://birds/puffins.md"
    assert "**colonies**" in results[0].snippet.lower()
    assert "1873" in results[0].snippet
    # A word in the title outweighs a passing mention in another page's body.
    ferro = corpus.search("Ferrowick")
    assert [r.url for r in ferro] == ["corpus://towns/ferrowick.html", "corpus://misc/kettles.md"]


def test_search_respects_k_and_returns_nothing_for_unknown_words(corpus: LocalCorpus) -> None:
    assert len(corpus.search("copper kettles Ferrowick puffin bridge", k=1)) == 1
    assert corpus.search("xylophone") == []
    assert corpus.search("   ") == []
    with pytest.raises(ConfigError, match="k must be"):
        corpus.search("puffin", k=0)


@pytest.mark.parametrize(
    "query",
    ['"unbalanced', "puffin AND", "NEAR(puffin", "col:umn puffin", "puffin*", "(-)^", "OR", "' OR 1=1 --", "{}[]"],
)
def test_queries_with_fts5_syntax_do_not_crash(corpus: LocalCorpus, query: str) -> None:
    results = corpus.search(query)
    assert all(isinstance(r, SearchResult) for r in results)
    if "puffin" in query:
        assert results[0].url == "corpus://birds/puffins.md"


def test_fetch_returns_page_text_and_html_visible_text_only(corpus: LocalCorpus) -> None:
    text = corpus.fetch("corpus://towns/ferrowick.html")
    assert "Ferrowick sits on the river Lune & exports copper kettles." in text
    assert "Population: 4,210" in text.splitlines()
    assert "zzhidden" not in text and "color:red" not in text and "<p>" not in text
    assert corpus.fetch("https://example.test/vantmoor-bridges").startswith("Bridges of Vantmoor")
    assert corpus.fetch("corpus://birds/puffins.md", max_chars=10) == "# Marbled "
    # The hidden script is not searchable either.
    assert corpus.search("zzhidden") == []


def test_fetch_of_a_url_outside_the_corpus_is_a_fetch_error(corpus: LocalCorpus) -> None:
    with pytest.raises(FetchError, match="not a page of the local corpus"):
        corpus.fetch("https://example.test/elsewhere")
    assert issubclass(FetchError, ConfigError) and issubclass(SearchError, ConfigError)


def test_bad_corpus_configuration_is_a_config_error(tmp_path: Path, corpus_dir: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        LocalCorpus(tmp_path / "missing")
    (corpus_dir / "manifest.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="manifest"):
        LocalCorpus(corpus_dir)
    (corpus_dir / "manifest.json").write_text(json.dumps({"nope.md": {"url": "u"}}), encoding="utf-8")
    with pytest.raises(ConfigError, match="nope.md"):
        LocalCorpus(corpus_dir)
    same = {"birds/puffins.md": {"url": "https://x.test/a"}, "misc/kettles.md": {"url": "https://x.test/a"}}
    (corpus_dir / "manifest.json").write_text(json.dumps(same), encoding="utf-8")
    with pytest.raises(ConfigError, match="share the url"):
        LocalCorpus(corpus_dir)


def test_html_to_text_keeps_blocks_on_their_own_lines() -> None:
    html = "<div>One<br>Two</div><table><tr><td>a</td><td>b</td></tr></table><noscript>no</noscript>"
    assert html_to_text(html) == "One\nTwo\na\nb"


# --------------------------------------------------------------------------- a fake search server


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeServer:
    """Serves canned answers per (method, path) and records every request."""

    routes: dict[tuple[str, str], tuple[int, str, bytes]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    @property
    def allow(self) -> str:
        """The opt-in that lets fetches reach this loopback server (they are refused without it)."""
        return self.url.removeprefix("http://")

    def answer(self, method: str, path: str, body: object, status: int = 200, ctype: str = "") -> None:
        if isinstance(body, bytes):
            data, ctype = body, ctype or "application/octet-stream"
        elif isinstance(body, str):
            data, ctype = body.encode(), ctype or "text/html; charset=utf-8"
        else:
            data, ctype = json.dumps(body).encode(), ctype or "application/json"
        self.routes[(method, path)] = (status, ctype, data)

    def hits(self, path: str) -> int:
        return sum(1 for s in self.seen if s.path == path)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            fake.seen.append(Seen(self.command, parts.path, parse_qs(parts.query), headers, body))
            status, ctype, data = fake.routes.get((self.command, parts.path), (404, "text/plain", b"no such route"))
            if status in (301, 302):
                self.send_response(status)
                self.send_header("Location", data.decode())
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = _serve
        do_POST = _serve

        def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield fake
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture(autouse=True)
def no_real_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the developer's shell holds, tests see only the variables they set."""
    for var in ("BRAVE_API_KEY", "SERPER_API_KEY", "TAVILY_API_KEY",
                "AGENTSPEC_BRAVE_URL", "AGENTSPEC_SERPER_URL", "AGENTSPEC_TAVILY_URL"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)


def test_brave_sends_its_token_header_and_reads_web_results(server: FakeServer, monkeypatch) -> None:
    server.answer("GET", "/res/v1/web/search", {"web": {"results": [
        {"title": "Quillory <strong>puffins</strong>", "url": "https://a.test/1",
         "description": "Nests on <b>cliffs</b>"},
        {"title": "Second", "url": "https://a.test/2", "description": "More"},
        {"title": "No url, dropped"},
    ]}})  # fmt: skip
    monkeypatch.setenv("BRAVE_API_KEY", "brave-secret-1")
    monkeypatch.setenv("AGENTSPEC_BRAVE_URL", server.url)
    backend = web_backend("brave")
    assert isinstance(backend, BraveSearch) and backend.name == "brave"
    results = backend.search("quillory puffins", k=3)
    assert results == [
        SearchResult("Quillory puffins", "https://a.test/1", "Nests on cliffs"),
        SearchResult("Second", "https://a.test/2", "More"),
    ]
    (req,) = server.seen
    assert req.method == "GET" and req.headers["x-subscription-token"] == "brave-secret-1"
    assert req.query == {"q": ["quillory puffins"], "count": ["3"]}
    assert "brave-secret-1" not in repr(backend)


def test_serper_posts_json_with_its_key_header_and_reads_organic(server: FakeServer, monkeypatch) -> None:
    organic = [{"title": f"T{i}", "link": f"https://s.test/{i}", "snippet": f"S{i}"} for i in range(5)]
    server.answer("POST", "/search", {"organic": organic, "knowledgeGraph": {"title": "ignored"}})
    monkeypatch.setenv("SERPER_API_KEY", "serper-secret-2")
    backend = SerperSearch(base_url=server.url)
    results = backend.search("vantmoor bridge", k=2)
    assert results == [SearchResult("T0", "https://s.test/0", "S0"), SearchResult("T1", "https://s.test/1", "S1")]
    (req,) = server.seen
    assert req.headers["x-api-key"] == "serper-secret-2"
    assert json.loads(req.body) == {"q": "vantmoor bridge", "num": 2}


def test_tavily_puts_the_key_in_the_body_and_reads_results(server: FakeServer, monkeypatch) -> None:
    server.answer("POST", "/search", {"results": [{"title": "Lune", "url": "https://t.test/l", "content": "River"}]})
    monkeypatch.setenv("TAVILY_API_KEY", "tavily-secret-3")
    monkeypatch.setenv("AGENTSPEC_TAVILY_URL", server.url + "/")
    results = web_backend("Tavily").search("river lune", k=4)
    assert results == [SearchResult("Lune", "https://t.test/l", "River")]
    (req,) = server.seen
    assert json.loads(req.body) == {"api_key": "tavily-secret-3", "query": "river lune", "max_results": 4}


def test_api_keys_stay_out_of_the_logs(server: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    server.answer("GET", "/res/v1/web/search", {"web": {"results": []}})
    server.answer("POST", "/search", {"results": []})
    server.answer("GET", "/page", "<p>text</p>")
    with caplog.at_level(logging.DEBUG):
        for backend in (BraveSearch(api_key="key-brave-77", base_url=server.url, fetch_allow=server.allow),
                        TavilySearch(api_key="key-tavily-77", base_url=server.url, fetch_allow=server.allow)):  # fmt: skip
            backend.search("q")
            backend.fetch(server.url + "/page")
    assert caplog.records  # httpx does log the requests...
    assert "key-brave-77" not in caplog.text and "key-tavily-77" not in caplog.text  # ...but not the keys


def test_an_answer_without_results_is_an_empty_list(server: FakeServer) -> None:
    server.answer("GET", "/res/v1/web/search", {"query": {"original": "zzz"}})
    assert BraveSearch(api_key="k", base_url=server.url).search("zzz") == []


@pytest.mark.parametrize(
    ("name", "var"), [("brave", "BRAVE_API_KEY"), ("serper", "SERPER_API_KEY"), ("tavily", "TAVILY_API_KEY")]
)
def test_a_missing_api_key_is_a_config_error_naming_the_variable(name: str, var: str, monkeypatch) -> None:
    with pytest.raises(ConfigError, match=var):
        web_backend(name)
    monkeypatch.setenv(var, "   ")
    with pytest.raises(ConfigError, match=var):
        web_backend(name)


def test_http_errors_become_search_errors_with_the_status_and_no_key(server: FakeServer) -> None:
    server.answer("POST", "/search", "internal trouble for tavily-secret-9", status=500, ctype="text/plain")
    with pytest.raises(SearchError, match="HTTP 500") as info:
        TavilySearch(api_key="tavily-secret-9", base_url=server.url).search("anything")
    assert info.value.status_code == 500
    assert "tavily-secret-9" not in str(info.value)
    server.answer("POST", "/search", {"message": "Unauthorized"}, status=403)
    with pytest.raises(SearchError, match="SERPER_API_KEY"):
        SerperSearch(api_key="wrong", base_url=server.url).search("anything")
    server.answer("GET", "/res/v1/web/search", "<html>not json</html>")
    with pytest.raises(SearchError, match="not JSON"):
        BraveSearch(api_key="k", base_url=server.url).search("anything")


def test_an_unreachable_api_is_a_search_error(server: FakeServer) -> None:
    dead = server.url.rsplit(":", 1)[0] + ":9"  # the discard port: nothing listens on it here
    with pytest.raises(SearchError, match="brave search failed"):
        BraveSearch(api_key="k", base_url=dead, timeout=2).search("anything")


def test_fetch_returns_visible_text_of_an_html_page_after_redirects(server: FakeServer) -> None:
    page = "<html><head><title>T</title><script>hide()</script></head><body><p>Odile Brasque, 1873</p></body></html>"
    server.answer("GET", "/page", page)
    server.answer("GET", "/old", (server.url + "/page").encode(), status=302)
    server.answer("GET", "/plain", "just text\n", ctype="text/plain")
    backend = SerperSearch(api_key="k", base_url=server.url, fetch_allow=server.allow)
    assert backend.fetch(server.url + "/old") == "Odile Brasque, 1873"
    assert backend.fetch(server.url + "/plain") == "just text\n"
    assert backend.fetch(server.url + "/page", max_chars=5) == "Odile"


def test_fetch_failures_are_fetch_errors_with_the_cause(server: FakeServer) -> None:
    server.answer("GET", "/pdf", b"%PDF-1.4", ctype="application/pdf")
    backend = BraveSearch(api_key="k", base_url=server.url, fetch_allow=server.allow)
    with pytest.raises(FetchError, match="HTTP 404") as info:
        backend.fetch(server.url + "/missing")
    assert info.value.status_code == 404
    with pytest.raises(FetchError, match="application/pdf"):
        backend.fetch(server.url + "/pdf")
    with pytest.raises(FetchError, match="only http"):
        backend.fetch("file:///etc/passwd")


def test_fetch_stops_reading_at_the_size_cap(server: FakeServer) -> None:
    server.answer("GET", "/big", "a" * 50_000, ctype="text/plain")
    backend = TavilySearch(api_key="k", base_url=server.url, max_fetch_bytes=1_000, fetch_allow=server.allow)
    assert len(backend.fetch(server.url + "/big", max_chars=100_000)) == 1_000


# --------------------------------------------------------------------------- cache and factory


def test_cached_web_fetches_each_url_once(server: FakeServer) -> None:
    server.answer("GET", "/page", "<p>Ferrowick copper</p>")
    web = CachedWeb(BraveSearch(api_key="k", base_url=server.url, fetch_allow=server.allow))
    assert web.name == "brave" and isinstance(web, WebBackend)
    first = web.fetch(server.url + "/page")
    second = web.fetch(server.url + "/page")
    assert first == second == "Ferrowick copper"
    assert server.hits("/page") == 1 and web.hits == 1
    assert web.fetch(server.url + "/page", max_chars=9) == "Ferrowick"
    assert server.hits("/page") == 1 and web.hits == 2


def test_cached_web_caches_searches_per_query_and_k_and_failures(server: FakeServer) -> None:
    server.answer("POST", "/search", {"organic": [{"title": "A", "link": "https://s.test/a", "snippet": ""}]})
    web = CachedWeb(SerperSearch(api_key="k", base_url=server.url, fetch_allow=server.allow))
    assert web.search("q") == web.search("q")
    assert server.hits("/search") == 1
    web.search("q", k=2)
    assert server.hits("/search") == 2 and web.hits == 1
    for _ in range(2):
        with pytest.raises(FetchError, match="HTTP 404"):
            web.fetch(server.url + "/gone")
    assert server.hits("/gone") == 1 and web.hits == 2


def test_cached_web_over_the_local_corpus(corpus: LocalCorpus) -> None:
    web = CachedWeb(corpus)
    assert web.search("puffin") == web.search("puffin")
    assert web.fetch("corpus://misc/kettles.md") == corpus.fetch("corpus://misc/kettles.md")
    assert web.hits == 1 and web.misses == 2


def test_web_backend_factory_checks_its_arguments(corpus_dir: Path) -> None:
    assert isinstance(web_backend("local", corpus=corpus_dir), LocalCorpus)
    with pytest.raises(ConfigError, match="corpus"):
        web_backend("local")
    with pytest.raises(ConfigError, match="local, brave, serper, tavily"):
        web_backend("bing")
