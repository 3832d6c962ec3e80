"""GAIA's ``fetch_page`` reaches only public addresses, at every redirect, within one deadline for the whole fetch.

Every server here is started by the test on 127.0.0.1; other addresses are only ever classified, never contacted.
"""

from __future__ import annotations

import gzip
import ipaddress
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentspec.errors import ConfigError
from envs.gaia.web import (
    BraveSearch,
    FetchError,
    fetch_url,
    host_literal,
    non_public_reason,
    parse_fetch_allow,
    web_backend,
)


@dataclass
class Site:
    """A loopback HTTP server: ``routes`` maps a path to (status, extra headers, body); it records each request."""

    routes: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    seen: list[tuple[str, str]] = field(default_factory=list)  # (path, Host header)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def allow(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def sites() -> Iterator[Callable[[], Site]]:
    servers: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    def start() -> Site:
        site = Site()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.seen.append((self.path, self.headers.get("Host", "")))
                status, headers, body = site.routes.get(self.path, (404, {}, b"no such page"))
                self.send_response(status)
                for name, value in {"Content-Type": "text/plain", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        servers.append((httpd, thread))
        site.port = httpd.server_address[1]
        return site

    yield start
    for httpd, thread in servers:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def test_a_loopback_page_is_refused_by_default_and_the_server_never_sees_a_request(sites) -> None:
    site = sites()
    site.routes["/stats"] = (200, {}, b"model server internals")
    for url in (f"{site.url}/stats", f"http://localhost:{site.port}/stats", f"http://2130706433:{site.port}/stats",
                f"http://0x7f.1:{site.port}/stats", f"http://0.0.0.0:{site.port}/stats",
                f"http://[::ffff:127.0.0.1]:{site.port}/stats"):  # fmt: skip
        with pytest.raises(FetchError, match="refused to fetch .* not a public address"):
            fetch_url(url, timeout=2)
    # The hosted backends' fetch (what the agent's fetch_page calls) refuses the same way.
    with pytest.raises(FetchError, match=f"fetch_allow=127.0.0.1:{site.port}"):
        BraveSearch(api_key="k", base_url=site.url).fetch(f"{site.url}/stats")
    assert site.seen == []


def test_the_opt_in_lets_exactly_the_named_server_through(sites) -> None:
    corpus, other = sites(), sites()
    corpus.routes["/page"] = (200, {"Content-Type": "text/html"}, b"<p>Lune river</p>")
    other.routes["/page"] = (200, {}, b"secret")
    assert fetch_url(f"{corpus.url}/page", allow=corpus.allow, timeout=2) == "Lune river"
    with pytest.raises(FetchError, match="not a public address"):
        fetch_url(f"{other.url}/page", allow=corpus.allow, timeout=2)  # same address, another port
    assert other.seen == []


def test_the_bench_option_reaches_the_hosted_backend(sites, monkeypatch) -> None:
    corpus = sites()
    corpus.routes["/page"] = (200, {}, b"from the local corpus server")
    monkeypatch.setenv("BRAVE_API_KEY", "k")
    assert web_backend("brave", fetch_allow=corpus.allow).fetch(f"{corpus.url}/page") == "from the local corpus server"
    with pytest.raises(FetchError, match="refused"):
        web_backend("brave").fetch(f"{corpus.url}/page")


def test_the_gaia_bench_takes_the_opt_in_as_a_bench_option(sites, monkeypatch) -> None:
    from pathlib import Path

    from envs.gaia.bench import GaiaBench

    fixtures = Path(__file__).resolve().parent / "data" / "gaia-format"
    corpus = sites()
    corpus.routes["/page"] = (200, {}, b"local mirror page")
    monkeypatch.setenv("BRAVE_API_KEY", "k")
    bench = GaiaBench.from_data_dir(fixtures, search="brave", backend="none", fetch_allow=corpus.allow)
    assert bench.web is not None and bench.web.fetch(f"{corpus.url}/page") == "local mirror page"
    plain = GaiaBench.from_data_dir(fixtures, search="brave", backend="none")
    with pytest.raises(FetchError, match="refused"):
        plain.web.fetch(f"{corpus.url}/page")
    with pytest.raises(ConfigError, match="fetch_allow 'localhost:80'"):
        GaiaBench.from_data_dir(fixtures, search="brave", backend="none", fetch_allow="localhost:80")


def test_a_redirect_to_a_non_public_address_is_refused_at_that_hop(sites) -> None:
    public_stand_in, model_server = sites(), sites()
    model_server.routes["/stats"] = (200, {}, b"queue depth 3")
    for target in (f"{model_server.url}/stats", f"http://localhost:{model_server.port}/stats",
                   f"http://2130706433:{model_server.port}/stats", f"http://[::1]:{model_server.port}/stats"):  # fmt: skip
        public_stand_in.routes["/go"] = (302, {"Location": target}, b"")
        with pytest.raises(FetchError, match="refused to fetch .*/stats"):
            fetch_url(f"{public_stand_in.url}/go", allow=public_stand_in.allow, timeout=2)
    assert model_server.seen == []
    # A relative redirect stays on the allowed server and is followed.
    public_stand_in.routes["/go"] = (302, {"Location": "/here"}, b"")
    public_stand_in.routes["/here"] = (200, {}, b"arrived")
    assert fetch_url(f"{public_stand_in.url}/go", allow=public_stand_in.allow, timeout=2) == "arrived"


def test_a_redirect_loop_is_cut_off(sites) -> None:
    site = sites()
    site.routes["/loop"] = (302, {"Location": "/loop"}, b"")
    with pytest.raises(FetchError, match="more than 10 redirects"):
        fetch_url(f"{site.url}/loop", allow=site.allow, timeout=5)


def test_the_host_is_resolved_once_and_the_connection_goes_to_that_address(sites, monkeypatch) -> None:
    """No DNS-rebinding window: the name is looked up once; a second lookup would get an error here."""
    site = sites()
    site.routes["/page"] = (200, {}, b"pinned")
    real = socket.getaddrinfo
    lookups: list[str] = []

    def rebinding_dns(host, *args, **kwargs):
        if host == "corpus.test":
            lookups.append(host)
            if len(lookups) > 1:
                raise socket.gaierror(socket.EAI_NONAME, "a second answer would be a different address")
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", args[0] if args else 0))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding_dns)
    assert fetch_url(f"http://corpus.test:{site.port}/page", allow=site.allow, timeout=2) == "pinned"
    assert lookups == ["corpus.test"]
    assert site.seen == [("/page", f"corpus.test:{site.port}")]  # the name still goes in the Host header


def _drip_server(head: bytes, drip: bytes, every_s: float) -> tuple[int, threading.Event, threading.Thread]:
    """A raw server that sends ``head`` at once, then ``drip`` one byte every ``every_s`` seconds."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(5)
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn, listener:
            conn.recv(65536)
            try:
                conn.sendall(head)
                for byte in drip:
                    if stop.wait(every_s):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return  # the client hung up: the point of the test

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], stop, thread


@pytest.mark.parametrize("phase", ["body", "headers"])
def test_a_slow_drip_is_cut_at_the_whole_fetch_deadline(phase: str) -> None:
    # One byte every 0.2 s never trips a per-read timeout of 1 s; 60 bytes would take 12 s.
    response = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 60\r\n\r\n"
    head, drip = (response, b"x" * 60) if phase == "body" else (b"", response + b"x" * 60)
    port, stop, thread = _drip_server(head, drip, 0.2)
    started = time.monotonic()
    try:
        with pytest.raises(FetchError, match="timed out"):
            fetch_url(f"http://127.0.0.1:{port}/", allow=f"127.0.0.1:{port}", timeout=1.0)
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        thread.join(timeout=5)
    assert elapsed < 2.0, f"the 1 s fetch took {elapsed:.1f}s"


# --------------------------------------------------------------------------- pure classification (no traffic)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"), ("127.255.0.9", "loopback"), ("::1", "loopback"),
        ("0.0.0.0", "unspecified"), ("::", "unspecified"),
        ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"), ("fc00::1", "private"),
        ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"), ("ff02::1", "multicast"),
        ("240.0.0.1", "private"), ("255.255.255.255", "private"), ("100.64.0.1", "not globally routable"),
        ("fec0::1", "site-local"), ("2001:db8::1", "private"),
        ("::ffff:127.0.0.1", "loopback (inside"), ("::ffff:10.0.0.1", "private (inside"),
        ("::ffff:169.254.169.254", "link-local (inside"), ("2002:7f00:1::", "loopback (inside"),
        ("2002:c0a8:101::", "private (inside"), ("64:ff9b::7f00:1", "loopback (inside"),
        ("::127.0.0.1", "loopback (inside"), ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback (inside"),
    ],
)  # fmt: skip
def test_non_public_addresses_are_named(address: str, reason: str) -> None:
    found = non_public_reason(ipaddress.ip_address(address))
    assert found is not None and found.startswith(reason), found


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700:4700::1111", "2a00:1450:4001::1"])
def test_public_addresses_pass(address: str) -> None:
    assert non_public_reason(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("host", "address"),
    [("2130706433", "127.0.0.1"), ("0x7f000001", "127.0.0.1"), ("017700000001", "127.0.0.1"),
     ("0177.0.0.1", "127.0.0.1"), ("0x7f.0.0.1", "127.0.0.1"), ("127.1", "127.0.0.1"), ("127.0.1", "127.0.0.1"),
     ("10.0x10.1", "10.16.0.1"), ("0", "0.0.0.0"), ("127.0.0.1.", "127.0.0.1"), ("::ffff:7f00:1", "::ffff:7f00:1"),
     ("[::1]", "::1"), ("169.254.169.254", "169.254.169.254")],
)  # fmt: skip
def test_numeric_host_forms_are_read_as_the_resolver_reads_them(host: str, address: str) -> None:
    assert host_literal(host) == ipaddress.ip_address(address)


def test_names_are_left_to_the_resolver_and_bad_numbers_are_refused() -> None:
    assert host_literal("example.org") is None and host_literal("1x.example") is None
    for host in ("4294967296", "1.2.3.4.5", "256.1.1.1", "1.2.65536", "0x1.0x100.1"):
        with pytest.raises(FetchError, match="not a valid IPv4 address"):
            host_literal(host)


def test_the_opt_in_names_servers_by_address_and_port_only() -> None:
    assert parse_fetch_allow(["127.0.0.1:8080", "[::1]:9000"]) == {
        (ipaddress.ip_address("127.0.0.1"), 8080), (ipaddress.ip_address("::1"), 9000)}  # fmt: skip
    assert parse_fetch_allow(None) == frozenset() == parse_fetch_allow("")
    for bad in ("localhost:8080", "127.0.0.1", "127.0.0.0/8:80", "127.0.0.1:0", "127.0.0.1:70000", "::1:80", "*:80"):
        with pytest.raises(ConfigError, match="IP:PORT"):
            parse_fetch_allow(bad)


def test_the_examples_in_the_docstrings_hold() -> None:
    import doctest

    import envs.gaia.web

    failures, tried = doctest.testmod(envs.gaia.web)
    assert failures == 0 and tried >= 7


def test_https_connects_to_the_checked_address_and_verifies_the_name(tmp_path, monkeypatch) -> None:
    """TLS still checks the certificate against the host name while the socket goes to the checked address."""
    import shutil
    import ssl
    import subprocess

    import httpx

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=corpus.test", "-addext", "subjectAltName=DNS:corpus.test"],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "6")
            self.end_headers()
            self.wfile.write(b"secure")

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = server_tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    port = httpd.server_address[1]
    real = socket.getaddrinfo
    names = {"corpus.test", "other.test"}

    def local_dns(host, *args, **kwargs):
        if host in names:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", local_dns)
    client_tls = ssl.create_default_context(cafile=str(cert))
    try:
        transport = httpx.HTTPTransport(verify=client_tls)
        assert fetch_url(f"https://corpus.test:{port}/", allow=f"127.0.0.1:{port}", transport=transport) == "secure"
        with pytest.raises(FetchError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed|match"):
            fetch_url(f"https://other.test:{port}/", allow=f"127.0.0.1:{port}",
                      transport=httpx.HTTPTransport(verify=client_tls))
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


# --------------------------------------------------------------------------- compressed bodies stay within max_bytes


def _peak_bytes_of(call: Callable[[], object]) -> tuple[object, int]:
    """``call()``'s result and the most memory allocated while it ran."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_gzip_bomb_is_inflated_only_up_to_max_bytes(sites) -> None:
    # 64 MB of text in 64 KB on the wire: httpx's own decoding would inflate it all before the length check.
    site = sites()
    site.routes["/bomb"] = (200, {"Content-Encoding": "gzip"}, gzip.compress(b"a" * 64_000_000, compresslevel=1))
    site.routes["/small"] = (200, {}, b"a" * 10_000)

    def fetch(path: str) -> str:
        return fetch_url(f"{site.url}{path}", allow=site.allow, timeout=5, max_bytes=10_000, max_chars=50_000)

    small, baseline = _peak_bytes_of(lambda: fetch("/small"))  # the client's own needs (TLS context...)
    text, peak = _peak_bytes_of(lambda: fetch("/bomb"))
    assert text == small == "a" * 10_000
    extra = peak - baseline
    assert extra < 2_000_000, f"fetching 10 kB of a gzip bomb allocated {extra / 1e6:.0f} MB more than 10 kB of text"


def test_stacked_and_unknown_content_encodings_are_refused(sites) -> None:
    # Each gzip layer multiplies: a few hundred bytes of "gzip, gzip" held hundreds of megabytes.
    site = sites()
    stacked = gzip.compress(gzip.compress(b"a" * 10_000_000))
    assert len(stacked) < 1_000
    site.routes["/stacked"] = (200, {"Content-Encoding": "gzip, gzip"}, stacked)
    site.routes["/twice"] = (200, {"Content-Encoding": "gzip", "content-encoding": "deflate"}, stacked)
    site.routes["/br"] = (200, {"Content-Encoding": "br"}, b"\x0b\x02\x80hello\x03")
    for path in ("/stacked", "/twice", "/br"):
        with pytest.raises(FetchError, match="unsupported content encoding"):
            fetch_url(f"{site.url}{path}", allow=site.allow, timeout=5, max_bytes=1_000)


def test_gzip_and_both_deflate_forms_are_still_read(sites) -> None:
    site = sites()
    page = b"<p>Lune river</p>"
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    site.routes["/gzip"] = (200, {"Content-Type": "text/html", "Content-Encoding": "gzip"}, gzip.compress(page))
    site.routes["/zlib"] = (200, {"Content-Type": "text/html", "Content-Encoding": "deflate"}, zlib.compress(page))
    site.routes["/raw"] = (200, {"Content-Type": "text/html", "Content-Encoding": "deflate"},
                           raw.compress(page) + raw.flush())  # fmt: skip
    site.routes["/plain"] = (200, {"Content-Type": "text/html", "Content-Encoding": "identity"}, page)
    for path in ("/gzip", "/zlib", "/raw", "/plain"):
        assert fetch_url(f"{site.url}{path}", allow=site.allow, timeout=5) == "Lune river", path
    site.routes["/corrupt"] = (200, {"Content-Encoding": "gzip"}, b"not gzip at all")
    with pytest.raises(FetchError, match="corrupt"):
        fetch_url(f"{site.url}/corrupt", allow=site.allow, timeout=5)
