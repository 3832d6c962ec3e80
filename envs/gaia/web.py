"""Search and fetch backends for the GAIA harness: a local corpus and three hosted search APIs.

Every backend follows one small protocol, :class:`WebBackend`: ``search(query, k)`` returns
:class:`SearchResult` values and ``fetch(url, max_chars)`` returns a page's visible text.

- :class:`LocalCorpus` indexes a folder of ``.md``/``.txt``/``.html`` pages in an in-memory
  SQLite FTS5 table; it needs no network, so runs over it are reproducible.
- :class:`BraveSearch`, :class:`SerperSearch` and :class:`TavilySearch` call hosted search APIs,
  configured by environment variables (see each class); their ``fetch`` is a plain HTTP GET.
- :class:`CachedWeb` wraps any backend and answers repeated calls from memory for the run, so a
  speculative fetch that the authority later confirms is not sent twice.

Errors are translated at this seam: bad configuration raises :class:`~agentspec.errors.ConfigError`,
a failed search :class:`SearchError` and a failed fetch :class:`FetchError` (both ConfigErrors, so a
tool can turn them into an observation for the agent).

Example::

    >>> web = CachedWeb(web_backend("local", corpus=Path("corpus")))   # doctest: +SKIP
    >>> [r.url for r in web.search("tallest lighthouse", k=2)]           # doctest: +SKIP
    ['corpus://lighthouses.md', 'https://example.org/coast']
    >>> web.fetch("corpus://lighthouses.md")[:20]                        # doctest: +SKIP
    'Lighthouses\\nThe tall'
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import sqlite3
import threading
import time
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable
from urllib.parse import unquote

import httpx

from agentspec.errors import ConfigError

__all__ = [
    "BraveSearch",
    "CachedWeb",
    "FetchError",
    "LocalCorpus",
    "SearchError",
    "SearchResult",
    "SerperSearch",
    "TavilySearch",
    "WebBackend",
    "fetch_url",
    "host_literal",
    "html_to_text",
    "non_public_reason",
    "parse_fetch_allow",
    "web_backend",
]

BACKENDS = ("local", "brave", "serper", "tavily")
PAGE_SUFFIXES = (".md", ".txt", ".html", ".htm")
MANIFEST = "manifest.json"
DEFAULT_TIMEOUT_S = 20.0
# A page bigger than this is cut off while downloading: the agent reads at most max_chars anyway.
DEFAULT_MAX_FETCH_BYTES = 5_000_000
USER_AGENT = "agentspec-gaia/0.1 (+research harness)"

_T = TypeVar("_T")


class SearchError(ConfigError):
    """A search could not be answered: the API refused it, failed, or was unreachable."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class FetchError(ConfigError):
    """A page could not be fetched: unknown URL, HTTP error, network failure or unreadable content."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One search hit: the page's title, its URL (what ``fetch`` takes) and a short snippet."""

    title: str
    url: str
    snippet: str


@runtime_checkable
class WebBackend(Protocol):
    """What the GAIA web tools need from a search provider."""

    name: str

    def search(self, query: str, k: int = 5) -> list[SearchResult]:
        """Return at most ``k`` results for ``query``, best first."""
        ...

    def fetch(self, url: str, max_chars: int = 20_000) -> str:
        """Return the visible text of the page at ``url``, cut to ``max_chars`` characters."""
        ...


# --------------------------------------------------------------------------- html -> text

_SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe", "object"})
_BLOCK_TAGS = frozenset(
    {
        "address", "article", "aside", "blockquote", "br", "caption", "dd", "div", "dl", "dt", "fieldset",
        "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li",
        "main", "nav", "ol", "p", "pre", "section", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
        "title",
    }
)  # fmt: skip
_VOID_TAGS = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"})


class _TextExtractor(HTMLParser):
    """Collects the text a browser would show; block elements start new lines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: str = ""
        self._skip_depth = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _SKIPPED_TAGS and tag not in _VOID_TAGS:
            self._skip_depth += 1
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIPPED_TAGS and self._skip_depth:
            self._skip_depth -= 1
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            # The title lives in <head>, which is otherwise hidden; keep it apart from the body text.
            self.title += data
        elif not self._skip_depth:
            self.parts.append(data)


def _tidy(text: str) -> str:
    """Collapse runs of spaces inside lines and drop blank lines."""
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def _parse_html(html: str) -> tuple[str, str]:
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    return " ".join(parser.title.split()), _tidy("".join(parser.parts))


def html_to_text(html: str) -> str:
    """Return the visible text of an HTML document: no tags, scripts, styles or ``<head>``.

    Block elements (paragraphs, headings, list items, table cells...) become separate lines::

        >>> html_to_text("<html><head><title>T</title></head><body><h1>Hi</h1><p>a &amp; b</p></body></html>")
        'Hi\\na & b'
    """
    return _parse_html(html)[1]


# --------------------------------------------------------------------------- local corpus

_TERM = re.compile(r"\w+", re.UNICODE)
_SNIPPET_TOKENS = 24
# bm25 weights per column (title, body): a query word in the title says more than one in the body.
_BM25_WEIGHTS = (5.0, 1.0)


@dataclass(frozen=True, slots=True)
class _Page:
    url: str
    title: str
    text: str


def _fts_query(query: str) -> str:
    """Turn free text into an FTS5 query that cannot be a syntax error.

    Each word is quoted (so ``AND``, ``NEAR``, ``*``, ``"`` or ``:`` are plain words) and the words are
    OR-ed, leaving the ranking to bm25::

        >>> _fts_query('who wrote "Dune"? (AND 1965)')
        '"who" OR "wrote" OR "dune" OR "and" OR "1965"'
    """
    terms = dict.fromkeys(t.lower() for t in _TERM.findall(query))
    return " OR ".join(f'"{t}"' for t in terms)


def _default_title(text: str, relpath: str) -> str:
    """The first heading or, failing that, the first non-empty line; the file name for an empty page."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("#"):
            return line.lstrip("#").strip() or relpath
    return lines[0] if lines else relpath


def _read_manifest(folder: Path) -> dict[str, dict[str, str]]:
    path = folder / MANIFEST
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: not readable JSON ({e}); fix or remove the manifest") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: must map relative file paths to {{'url': ..., 'title': ...}}")
    manifest: dict[str, dict[str, str]] = {}
    for rel, entry in raw.items():
        if not isinstance(entry, dict) or not all(
            isinstance(entry.get(key, ""), str) for key in ("url", "title")
        ):
            raise ConfigError(f"{path}: entry {rel!r} must be an object with string 'url' and 'title'")
        manifest[Path(rel).as_posix()] = entry
    return manifest


def _load_page(path: Path, relpath: str, meta: Mapping[str, str]) -> _Page:
    try:
        raw = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ConfigError(f"corpus page {path} cannot be read: {e}") from e
    if path.suffix.lower() in (".html", ".htm"):
        html_title, text = _parse_html(raw)
        title = html_title or _default_title(text, relpath)
    else:
        text = raw.strip()
        title = _default_title(text, relpath)
    return _Page(url=meta.get("url") or f"corpus://{relpath}", title=meta.get("title") or title, text=text)


class LocalCorpus:
    """A folder of pages searched with SQLite FTS5 (bm25 ranking), fully offline.

    Pages are the ``.md``, ``.txt`` and ``.html`` files anywhere under ``folder``. An optional
    ``folder/manifest.json`` gives a page its real URL and title::

        {"history/dune.md": {"url": "https://example.org/dune", "title": "Dune (novel)"}}

    Without an entry a page's URL is ``corpus://<relative path>`` and its title its first heading
    (``<title>`` for HTML) or first line. Everything is indexed once, here; ``fetch`` only takes
    URLs of this corpus.
    """

    name = "local"

    def __init__(self, folder: Path) -> None:
        folder = Path(folder)
        if not folder.is_dir():
            raise ConfigError(f"corpus folder {folder} does not exist; pass a folder of .md/.txt/.html pages")
        manifest = _read_manifest(folder)
        files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in PAGE_SUFFIXES)
        rels = {p.relative_to(folder).as_posix(): p for p in files}
        unknown = sorted(set(manifest) - set(rels))
        if unknown:
            raise ConfigError(f"{folder / MANIFEST} names pages that are not in the corpus: {', '.join(unknown)}")
        self.folder = folder
        self._pages: list[_Page] = [_load_page(path, rel, manifest.get(rel, {})) for rel, path in rels.items()]
        self._by_url: dict[str, _Page] = {}
        for page in self._pages:
            if page.url in self._by_url:
                raise ConfigError(f"{folder / MANIFEST}: two pages share the url {page.url}; give each its own")
            self._by_url[page.url] = page
        # Tools may run in worker threads; one lock serialises use of the single connection.
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute("CREATE VIRTUAL TABLE pages USING fts5(title, body, tokenize='porter unicode61')")
        self._db.executemany(
            "INSERT INTO pages(rowid, title, body) VALUES (?, ?, ?)",
            [(i, page.title, page.text) for i, page in enumerate(self._pages)],
        )

    def __len__(self) -> int:
        return len(self._pages)

    @property
    def urls(self) -> list[str]:
        """Every page's URL, in file-path order."""
        return [page.url for page in self._pages]

    def search(self, query: str, k: int = 5) -> list[SearchResult]:
        """Return the ``k`` pages that best match ``query`` (bm25), each with a snippet around the match.

        Matched words are wrapped in ``**`` in the snippet; any text is a valid query.
        """
        _check_k(k)
        fts = _fts_query(query)
        if not fts:
            return []
        sql = (
            "SELECT rowid, snippet(pages, -1, '**', '**', '…', ?) FROM pages WHERE pages MATCH ? "
            f"ORDER BY bm25(pages, {_BM25_WEIGHTS[0]}, {_BM25_WEIGHTS[1]}) LIMIT ?"
        )
        with self._lock:
            rows = self._db.execute(sql, (_SNIPPET_TOKENS, fts, k)).fetchall()
        return [
            SearchResult(title=self._pages[i].title, url=self._pages[i].url, snippet=_tidy(snip).replace("\n", " "))
            for i, snip in rows
        ]

    def fetch(self, url: str, max_chars: int = 20_000) -> str:
        """Return the text of the corpus page at ``url`` (visible text for HTML), cut to ``max_chars``."""
        _check_max_chars(max_chars)
        page = self._by_url.get(url.strip())
        if page is None:
            # Not the folder's path: the agent reads this, and a host path would differ between machines.
            raise FetchError(f"{url} is not a page of the local corpus")
        return page.text[:max_chars]

    def close(self) -> None:
        """Free the index (optional: it lives in memory and goes with the object)."""
        with self._lock:
            self._db.close()


# --------------------------------------------------------------------------- hosted search APIs


def _check_k(k: int) -> None:
    if not isinstance(k, int) or k < 1:
        raise ConfigError(f"k must be a whole number of at least 1, got {k!r}")


def _check_max_chars(max_chars: int) -> None:
    if not isinstance(max_chars, int) or max_chars < 1:
        raise ConfigError(f"max_chars must be a whole number of at least 1, got {max_chars!r}")


def _strip_tags(text: str) -> str:
    """Search APIs mark matches with tags such as ``<strong>``; keep only the words."""
    return html_to_text(text).replace("\n", " ") if "<" in text or "&" in text else text


def _is_html(content_type: str, body: bytes) -> bool:
    if "html" in content_type:
        return True
    # A server that does not say what it sends: sniff the first bytes like a browser would.
    head = body[:512].lstrip().lower()
    return not content_type and head.startswith((b"<!doctype html", b"<html"))


# --------------------------------------------------------------------------- fetching pages safely

#: Redirects followed per fetch; each hop is resolved and checked like the first URL.
MAX_REDIRECTS = 10
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS = {"http": 80, "https": 443}
# NAT64 (RFC 6052) and IPv4-compatible IPv6 addresses carry an IPv4 address in their last 32 bits.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NUMBER_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def non_public_reason(address: IPAddress) -> str | None:
    """Why ``address`` is not a public internet address (``"loopback"``, ``"private"``...); None when it is.

    IPv6 addresses that carry an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, 6to4, Teredo, NAT64,
    IPv4-compatible) are judged by that address too, so ``::ffff:127.0.0.1`` is loopback::

        >>> non_public_reason(ipaddress.ip_address("::ffff:127.0.0.1"))
        'loopback (inside the IPv6 address ::ffff:7f00:1)'
        >>> non_public_reason(ipaddress.ip_address("93.184.215.14")) is None
        True
    """
    if isinstance(address, ipaddress.IPv6Address):
        for inner in _embedded_ipv4(address):
            reason = non_public_reason(inner)
            if reason is not None:
                return f"{reason} (inside the IPv6 address {address})"
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("site-local", isinstance(address, ipaddress.IPv6Address) and address.is_site_local),
        ("not globally routable", not address.is_global),
    )
    return next((reason for reason, hit in checks if hit), None)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    found = [address.ipv4_mapped, address.sixtofour, *(address.teredo or ())]
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [inner for inner in found if inner is not None]


def host_literal(host: str) -> IPAddress | None:
    """The address ``host`` spells without DNS, or None for a name.

    Besides dotted quads and IPv6, the forms C's ``inet_aton`` (and so the system resolver) accepts count:
    one to four parts, each decimal, octal (leading ``0``) or hex (``0x``), the last filling the
    remaining bytes. A host made only of such numbers that is out of range raises :class:`FetchError`::

        >>> str(host_literal("2130706433")), str(host_literal("0x7f.1")), str(host_literal("0177.0.0.01"))
        ('127.0.0.1', '127.0.0.1', '127.0.0.1')
        >>> host_literal("example.org") is None
        True
    """
    text = unquote(host).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    parts = (text[:-1] if text.endswith(".") else text).split(".")
    if not all(_NUMBER_PART.fullmatch(part) for part in parts):
        return None  # a name: the resolver decides what it means
    values = [_number_part(part) for part in parts]
    if len(parts) > 4 or any(v > 255 for v in values[:-1]) or values[-1] >= 256 ** (5 - len(parts)):
        raise FetchError(f"refused to fetch from {host!r}: a number that is not a valid IPv4 address")
    number = values[-1]
    for index, value in enumerate(values[:-1]):
        number += value << (8 * (3 - index))
    return ipaddress.IPv4Address(number)


def _number_part(part: str) -> int:
    if part[:2].lower() == "0x":
        return int(part[2:] or "0", 16)
    return int(part, 8) if part.startswith("0") else int(part)


def parse_fetch_allow(pairs: str | Iterable[str] | None) -> frozenset[tuple[IPAddress, int]]:
    """The ``HOST:PORT`` pairs a fetch may reach although they are not public (a local search corpus server).

    Each host is an IP address (``127.0.0.1:8080``, ``[::1]:8080``), so the opt-in names exactly one
    server; a string may hold several, comma-separated. Anything else raises :class:`ConfigError`::

        >>> sorted(str(ip) + f":{port}" for ip, port in parse_fetch_allow("127.0.0.1:8080, [::1]:8080"))
        ['127.0.0.1:8080', '::1:8080']
    """
    if pairs is None:
        return frozenset()
    items = pairs.split(",") if isinstance(pairs, str) else list(pairs)
    allowed: set[tuple[IPAddress, int]] = set()
    for item in (entry.strip() for entry in items):
        if not item:
            continue
        match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([0-9.]+):(\d{1,5})", item)
        try:
            if match is None:
                raise ValueError
            address = ipaddress.ip_address(match.group(1) or match.group(3))
            port = int(match.group(2) or match.group(4))
            if not 0 < port < 65536:
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"fetch_allow {item!r}: give IP:PORT pairs such as 127.0.0.1:8080 or [::1]:8080 (an address, "
                "not a name, so exactly one server is let through)"
            ) from None
        allowed.add((address, port))
    return frozenset(allowed)


def _pair(address: IPAddress, port: int) -> str:
    return f"{address}:{port}" if address.version == 4 else f"[{address}]:{port}"


def _checked_address(url: httpx.URL, allow: frozenset[tuple[IPAddress, int]]) -> str:
    """The address to connect to for ``url``: resolved once, every answer public or allowed, else FetchError."""
    host = url.raw_host.decode("ascii")
    port = url.port or _DEFAULT_PORTS[url.scheme]
    literal = host_literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as e:
            raise FetchError(f"cannot fetch {url}: the host {host!r} does not resolve ({e})") from e
        # A scope id (fe80::1%eth0) is not part of the address; the address alone decides.
        addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    for address in addresses:
        reason = non_public_reason(address)
        if reason is not None and (address, port) not in allow:
            shown = host if literal is not None else f"{host} (resolves to {address})"
            raise FetchError(
                f"refused to fetch {url}: {shown} is not a public address ({reason}); only public internet "
                f"addresses are fetched (a local search corpus server is let through with fetch_allow={_pair(address, port)})"
            )
    if not addresses:
        raise FetchError(f"cannot fetch {url}: the host {host!r} has no address")
    return str(addresses[0])


class _Watchdog:
    """Shuts the fetch's sockets when its deadline passes.

    httpx's timeouts are per read, so a server that sends one byte every few seconds never trips them; shutting
    the socket down wakes the blocked read at once, whichever phase (headers or body) it is in. The sockets
    are learnt from httpx's ``trace`` extension, which also checks each connection goes to the checked address.
    """

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self.address: str | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        if event.endswith("connect_tcp.started") and info.get("host") != self.address:
            # Never reached: the URL holds the checked address. If httpx ever resolved on its own, stop here.
            raise FetchError(f"refused to connect to {info.get('host')!r}: not the checked address {self.address}")
        if event.endswith("connect_tcp.complete"):
            sock = info["return_value"].get_extra_info("socket")
            with self._lock:
                self._sockets.append(sock)
                if self.fired:
                    _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: the fetch finished


def fetch_url(
    url: str,
    max_chars: int = 20_000,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    max_bytes: int = DEFAULT_MAX_FETCH_BYTES,
    transport: httpx.BaseTransport | None = None,
    allow: str | Iterable[str] | frozenset[tuple[IPAddress, int]] = frozenset(),
) -> str:
    """GET ``url`` (following redirects) and return its visible text, cut to ``max_chars``.

    HTML becomes text (:func:`html_to_text`); ``text/*``, JSON and XML come back as they are; any
    other content type (PDF, images...) raises :class:`FetchError`, as do HTTP errors (with the
    status), timeouts and network failures. The download stops after ``max_bytes``.

    Only public internet addresses are fetched: at every hop (redirects included) the host is resolved
    once, refused if any of its addresses is loopback, private, link-local, multicast, reserved or
    otherwise not public (IPv6 forms and numeric hosts such as ``2130706433`` included), and the
    connection goes to the address that was checked, so DNS cannot answer differently the second time.
    ``allow`` lets given ``IP:PORT`` pairs through (see :func:`parse_fetch_allow`). ``timeout`` bounds
    the whole fetch, redirects and a slowly dripping body included.
    """
    _check_max_chars(max_chars)
    if not url.startswith(("http://", "https://")):
        raise FetchError(f"cannot fetch {url!r}: only http:// and https:// URLs are supported")
    allowed = allow if isinstance(allow, frozenset) else parse_fetch_allow(allow)
    deadline = time.monotonic() + timeout
    try:
        target = httpx.URL(url)
    except httpx.InvalidURL as e:
        raise FetchError(f"cannot fetch {url!r}: {e}") from e
    with _Watchdog(timeout) as watchdog:
        try:
            for _ in range(MAX_REDIRECTS + 1):
                fetched = _fetch_hop(target, allowed, watchdog, deadline, max_bytes, transport)
                if isinstance(fetched, httpx.URL):
                    target = fetched
                    continue
                body, content_type, encoding = fetched
                break
            else:
                raise FetchError(f"fetching {url} failed: more than {MAX_REDIRECTS} redirects")
        except httpx.TimeoutException as e:
            raise FetchError(f"fetching {url} timed out after {timeout:g}s") from e
        except httpx.HTTPError as e:
            if watchdog.fired:
                raise FetchError(f"fetching {url} timed out after {timeout:g}s (the whole download)") from e
            raise FetchError(f"fetching {url} failed: {type(e).__name__}: {e}") from e
    if _is_html(content_type, body):
        text = html_to_text(body.decode(encoding, errors="replace"))
    elif not content_type or content_type.startswith("text/") or "json" in content_type or "xml" in content_type:
        text = body.decode(encoding, errors="replace")
    else:
        raise FetchError(f"cannot read {url}: content type {content_type.split(';')[0]} is not text")
    return text[:max_chars]


def _fetch_hop(
    url: httpx.URL,
    allow: frozenset[tuple[IPAddress, int]],
    watchdog: _Watchdog,
    deadline: float,
    max_bytes: int,
    transport: httpx.BaseTransport | None,
) -> httpx.URL | tuple[bytes, str, str]:
    """One request: the redirect's next URL, or (body, content type, encoding) of the answer."""
    if url.scheme not in _DEFAULT_PORTS:
        raise FetchError(f"cannot fetch {url}: only http:// and https:// URLs are supported")
    address = _checked_address(url, allow)
    watchdog.address = address
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise FetchError(f"fetching {url} timed out (the whole download)")
    host = url.raw_host.decode("ascii")
    # The request goes to the checked address; Host and TLS (SNI, certificate check) still use the name.
    extensions: dict[str, Any] = {"trace": watchdog.trace}
    if url.scheme == "https":
        extensions["sni_hostname"] = host
    headers = {"User-Agent": USER_AGENT, "Host": url.netloc.decode("ascii")}
    # trust_env=False: a proxy from the environment would make the connection somewhere unchecked.
    with httpx.Client(timeout=remaining, transport=transport, trust_env=False) as client, client.stream(
        "GET", url.copy_with(host=address), headers=headers, extensions=extensions
    ) as response:
        if response.status_code in _REDIRECTS and "location" in response.headers:
            return url.join(response.headers["location"])
        if response.status_code >= 400:
            raise FetchError(f"fetching {url} failed: HTTP {response.status_code}", response.status_code)
        body = _read_body(response, url, max_bytes)
        if watchdog.fired:
            raise FetchError(f"fetching {url} timed out (the whole download)")
        content_type = response.headers.get("content-type", "").lower()
        return body, content_type, response.charset_encoding or "utf-8"


#: zlib ``wbits`` for each content coding we decode; "deflate" may also come raw (see :class:`_Inflater`).
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class _Inflater:
    """Decodes one gzip/deflate layer without ever producing more than it is asked for."""

    def __init__(self, coding: str) -> None:
        self._coding = coding
        self._inflater = zlib.decompressobj(_WBITS[coding])
        self._started = False

    def decode(self, chunk: bytes, limit: int) -> bytes:
        """At most ``limit`` (> 0) decoded bytes of ``chunk``; input past that is dropped (the read stops there)."""
        try:
            out = self._inflater.decompress(chunk, limit)
        except zlib.error:
            if self._coding != "deflate" or self._started:
                raise
            # Some servers send "deflate" as a raw deflate stream without the zlib header (httpx accepts it too).
            self._inflater = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._inflater.decompress(chunk, limit)
        self._started = True
        return out


def _read_body(response: httpx.Response, url: httpx.URL, max_bytes: int) -> bytes:
    """The decoded body, at most ``max_bytes`` of it, however small the compressed answer.

    httpx's own decoding inflates a whole network chunk before anyone can count it, and stacks one decoder per
    listed coding, so a few hundred bytes of ``gzip, gzip`` become hundreds of megabytes. Here the raw bytes are
    inflated with an output limit, and only one gzip/deflate layer is accepted.
    """
    listed = response.headers.get_list("content-encoding", split_commas=True)
    codings = [c for c in (v.strip().lower() for v in listed) if c and c != "identity"]
    if len(codings) > 1 or (codings and codings[0] not in _WBITS):
        raise FetchError(f"cannot read {url}: unsupported content encoding {', '.join(codings)!r}")
    inflater = _Inflater(codings[0]) if codings else None
    body = bytearray()
    try:
        for chunk in response.iter_raw():
            left = max_bytes - len(body)
            if left <= 0:  # checked before decoding too: zlib reads max_length=0 as "no limit"
                break
            body.extend(inflater.decode(chunk, left) if inflater else chunk[:left])
            if len(body) >= max_bytes:
                break
    except zlib.error as e:
        raise FetchError(f"cannot read {url}: its {codings[0]} body is corrupt ({e})") from e
    return bytes(body)


@dataclass(frozen=True, slots=True)
class _ApiConfig:
    """Where a hosted API lives and which environment variables configure it."""

    name: str
    key_var: str
    url_var: str
    default_url: str


class _HostedSearch(ABC):
    """Shared machinery of the hosted search backends: configuration, the HTTP call, error mapping.

    Subclasses set ``_api`` and implement ``_request`` (build the call) and ``_results`` (read the
    answer). The API key is kept out of ``repr`` and out of every error message.
    """

    _api: _ApiConfig

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_fetch_bytes: int = DEFAULT_MAX_FETCH_BYTES,
        transport: httpx.BaseTransport | None = None,
        fetch_allow: str | Iterable[str] | None = None,
    ) -> None:
        self.name: str = self._api.name
        # Pages come from wherever search results point; the API itself is the operator's choice (base_url).
        self.fetch_allow = parse_fetch_allow(fetch_allow)
        key = api_key if api_key is not None else os.environ.get(self._api.key_var, "")
        if not key.strip():
            raise ConfigError(
                f"the {self._api.name} search backend needs an API key: "
                f"set the {self._api.key_var} environment variable"
            )
        self._key = key.strip()
        self.base_url = (base_url or os.environ.get(self._api.url_var) or self._api.default_url).rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"{self._api.url_var}={self.base_url!r} is not an http(s) URL")
        self.timeout = timeout
        self.max_fetch_bytes = max_fetch_bytes
        # Tests pass an httpx transport; by default httpx opens real connections.
        self._transport = transport

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    @abstractmethod
    def _request(self, query: str, k: int) -> tuple[str, str, dict[str, Any]]:
        """Return (method, path, httpx request keyword arguments) for one search."""

    @abstractmethod
    def _results(self, payload: Mapping[str, Any]) -> list[SearchResult]:
        """The results in the API's answer."""

    def _redact(self, text: str) -> str:
        return text.replace(self._key, "<api key>")

    def search(self, query: str, k: int = 5) -> list[SearchResult]:
        """Ask the API for the ``k`` best results for ``query``; failures raise :class:`SearchError`."""
        _check_k(k)
        if not query.strip():
            return []
        method, path, kwargs = self._request(query, k)
        url = self.base_url + path
        try:
            with httpx.Client(timeout=self.timeout, transport=self._transport) as client:
                response = client.request(method, url, **kwargs)
        except httpx.TimeoutException as e:
            raise SearchError(f"{self.name} search timed out after {self.timeout:g}s ({self.base_url})") from e
        except httpx.HTTPError as e:
            raise SearchError(f"{self.name} search failed: {type(e).__name__}: {self._redact(str(e))}") from e
        if response.status_code >= 400:
            detail = self._redact(" ".join(response.text.split())[:200])
            hint = f"; check {self._api.key_var}" if response.status_code in (401, 403) else ""
            raise SearchError(
                f"{self.name} search failed: HTTP {response.status_code} {detail}{hint}", response.status_code
            )
        try:
            payload = response.json()
        except ValueError as e:
            raise SearchError(f"{self.name} search answered with something that is not JSON") from e
        if not isinstance(payload, dict):
            raise SearchError(f"{self.name} search answered with JSON that is not an object")
        return self._results(payload)[:k]

    def fetch(self, url: str, max_chars: int = 20_000) -> str:
        """GET ``url`` and return its visible text (see :func:`fetch_url`; public addresses and ``fetch_allow``)."""
        return fetch_url(
            url, max_chars, timeout=self.timeout, max_bytes=self.max_fetch_bytes, transport=self._transport,
            allow=self.fetch_allow,
        )


def _items(payload: Mapping[str, Any], *path: str) -> list[Mapping[str, Any]]:
    """The list at ``payload[path[0]][path[1]]...``; missing keys mean no results."""
    node: Any = payload
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return [item for item in node if isinstance(item, Mapping)] if isinstance(node, list) else []


def _result(item: Mapping[str, Any], title: str, url: str, snippet: str) -> SearchResult | None:
    link = item.get(url)
    if not isinstance(link, str) or not link:
        return None  # a hit without a URL cannot be fetched; drop it
    return SearchResult(
        title=_strip_tags(str(item.get(title) or link)), url=link, snippet=_strip_tags(str(item.get(snippet) or ""))
    )


def _collect(items: list[Mapping[str, Any]], title: str, url: str, snippet: str) -> list[SearchResult]:
    results = (_result(item, title, url, snippet) for item in items)
    return [r for r in results if r is not None]


class BraveSearch(_HostedSearch):
    """Brave Search API (web results).

    Environment variables:
        ``BRAVE_API_KEY``: the subscription token (required; sent as ``X-Subscription-Token``).
        ``AGENTSPEC_BRAVE_URL``: base URL, default ``https://api.search.brave.com``.

    Calls ``GET /res/v1/web/search?q=...&count=k`` and reads ``web.results[].{title,url,description}``.
    """

    _api = _ApiConfig("brave", "BRAVE_API_KEY", "AGENTSPEC_BRAVE_URL", "https://api.search.brave.com")

    def _request(self, query: str, k: int) -> tuple[str, str, dict[str, Any]]:
        headers = {"X-Subscription-Token": self._key, "Accept": "application/json"}
        return "GET", "/res/v1/web/search", {"params": {"q": query, "count": k}, "headers": headers}

    def _results(self, payload: Mapping[str, Any]) -> list[SearchResult]:
        return _collect(_items(payload, "web", "results"), "title", "url", "description")


class SerperSearch(_HostedSearch):
    """Serper (Google results).

    Environment variables:
        ``SERPER_API_KEY``: the API key (required; sent as ``X-API-KEY``).
        ``AGENTSPEC_SERPER_URL``: base URL, default ``https://google.serper.dev``.

    Calls ``POST /search`` with ``{"q": query, "num": k}`` and reads ``organic[].{title,link,snippet}``.
    """

    _api = _ApiConfig("serper", "SERPER_API_KEY", "AGENTSPEC_SERPER_URL", "https://google.serper.dev")

    def _request(self, query: str, k: int) -> tuple[str, str, dict[str, Any]]:
        return "POST", "/search", {"json": {"q": query, "num": k}, "headers": {"X-API-KEY": self._key}}

    def _results(self, payload: Mapping[str, Any]) -> list[SearchResult]:
        return _collect(_items(payload, "organic"), "title", "link", "snippet")


class TavilySearch(_HostedSearch):
    """Tavily search API.

    Environment variables:
        ``TAVILY_API_KEY``: the API key (required; sent in the JSON body as ``api_key``).
        ``AGENTSPEC_TAVILY_URL``: base URL, default ``https://api.tavily.com``.

    Calls ``POST /search`` with ``{"api_key": key, "query": query, "max_results": k}`` and reads
    ``results[].{title,url,content}``.
    """

    _api = _ApiConfig("tavily", "TAVILY_API_KEY", "AGENTSPEC_TAVILY_URL", "https://api.tavily.com")

    def _request(self, query: str, k: int) -> tuple[str, str, dict[str, Any]]:
        return "POST", "/search", {"json": {"api_key": self._key, "query": query, "max_results": k}}

    def _results(self, payload: Mapping[str, Any]) -> list[SearchResult]:
        return _collect(_items(payload, "results"), "title", "url", "content")


# --------------------------------------------------------------------------- cache and factory


class CachedWeb:
    """Answers repeated searches and fetches from memory for the length of a run.

    ``search`` is cached per ``(query, k)``, ``fetch`` per URL (a cached page serves any
    ``max_chars`` up to the one it was fetched with). Failures are cached too, so a confirmed call
    sees exactly what the speculative one saw. ``hits`` counts calls answered from the cache::

        >>> web = CachedWeb(backend)                      # doctest: +SKIP
        >>> web.fetch("https://example.org/a") == web.fetch("https://example.org/a")  # doctest: +SKIP
        True
        >>> web.hits                                      # doctest: +SKIP
        1
    """

    def __init__(self, backend: WebBackend) -> None:
        self.backend = backend
        self.name: str = backend.name
        self.hits = 0
        self.misses = 0
        self._searches: dict[tuple[str, int], list[SearchResult] | ConfigError] = {}
        self._pages: dict[str, tuple[int, str | ConfigError]] = {}
        self._lock = threading.Lock()

    def search(self, query: str, k: int = 5) -> list[SearchResult]:
        """The backend's results for ``(query, k)``, asked for once per run."""
        _check_k(k)
        outcome = self._cached(self._searches, (query, k), lambda: self.backend.search(query, k))
        return list(outcome)

    def fetch(self, url: str, max_chars: int = 20_000) -> str:
        """The backend's text for ``url``, fetched once per run (again only if more characters are wanted)."""
        _check_max_chars(max_chars)
        with self._lock:
            cached = self._pages.get(url)
            if cached is not None and cached[0] >= max_chars:
                self.hits += 1
                return _unwrap(cached[1])[:max_chars]
            self.misses += 1
        outcome = _attempt(lambda: self.backend.fetch(url, max_chars))
        with self._lock:
            self._pages[url] = (max_chars, outcome)
        return _unwrap(outcome)

    def _cached(
        self,
        store: dict[tuple[str, int], list[SearchResult] | ConfigError],
        key: tuple[str, int],
        call: Callable[[], list[SearchResult]],
    ) -> list[SearchResult]:
        with self._lock:
            if key in store:
                self.hits += 1
                return _unwrap(store[key])
            self.misses += 1
        outcome = _attempt(call)
        with self._lock:
            store[key] = outcome
        return _unwrap(outcome)


def _attempt(call: Callable[[], _T]) -> _T | ConfigError:
    """Run ``call``, returning a ConfigError (search/fetch failure) instead of raising it, for caching."""
    try:
        return call()
    except ConfigError as e:
        return e


def _unwrap(outcome: _T | ConfigError) -> _T:
    if isinstance(outcome, ConfigError):
        # The same error object is raised on every hit; drop the old traceback so it does not pile up.
        raise outcome.with_traceback(None)
    return outcome


def web_backend(
    name: str, corpus: Path | None = None, *, fetch_allow: str | Iterable[str] | None = None
) -> WebBackend:
    """Build the backend called ``name``: ``local`` (needs ``corpus``), ``brave``, ``serper`` or ``tavily``.

    Hosted backends read their API key and base URL from the environment (see each class); their
    ``fetch`` reaches only public addresses, and the ``IP:PORT`` pairs in ``fetch_allow``
    (a local search corpus server; see :func:`parse_fetch_allow`).
    """
    allowed = sorted(parse_fetch_allow(fetch_allow), key=str)  # checked here, whichever backend is built
    pairs = [_pair(ip, port) for ip, port in allowed]
    key = name.strip().lower()
    if key == "local":
        if corpus is None:
            raise ConfigError("the local web backend needs a corpus: pass a folder of .md/.txt/.html pages")
        return LocalCorpus(Path(corpus))
    hosted: dict[str, type[_HostedSearch]] = {"brave": BraveSearch, "serper": SerperSearch, "tavily": TavilySearch}
    if key not in hosted:
        raise ConfigError(f"unknown web backend {name!r}; choose one of: {', '.join(BACKENDS)}")
    return hosted[key](fetch_allow=pairs)
