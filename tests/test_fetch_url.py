"""The fetch_url built-in against a real HTTP server on 127.0.0.1: pages, text, an image, big and
endless bodies, redirects (to private addresses too); through the engine and through the CLI
with the scripted model, and a replay that serves the recorded page."""

from __future__ import annotations

import base64
import gzip
import ipaddress
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from local_http import QuietHandler, one_call, replay_report, scripted_run, serving

from zagent_core.builtins import registry
from zagent_core.builtins.web_access import host_matches, public
from zagent_core.config import BuiltinsConfig, Config, FetchUrlConfig, LimitsConfig
from zagent_core.tools.results import ToolResult

PAGE = ("<html><head><title>Retries</title><script>var secret = 1;</script><style>p {}</style></head><body>"
        "<h1>Retry policy</h1><p>Calls are <em>retried</em> <strong>three</strong> times; see "
        '<a href="/docs/backoff.html">backoff</a>.</p><ul><li>first</li><li>second</li></ul>'
        "<pre><code>retry(3)\n</code></pre></body></html>")
#: A 1x1 PNG.
PIXEL = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


#: Bodies sent in a content encoding: a small gzip, a gzip bomb (20 MiB of zeros in 20 KiB), Brotli.
ENCODED = {"/gzip.txt": ("gzip", gzip.compress(b"line one\nline two\n")),
           "/bomb.txt": ("gzip", gzip.compress(bytes(20 * 2**20), compresslevel=9)),
           "/brotli.txt": ("br", b"\x0b\x02\x80hello\x03")}
#: Answered when the server stops: what /stall waits for.
_STOPPED = threading.Event()


class _Site(QuietHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = urlsplit(self.path).path
        query = parse_qs(urlsplit(self.path).query)
        if path in ("/redirect", "/loop"):
            self.send_response(302 if path == "/redirect" else 301)
            self.send_header("Location", query["to"][0] if path == "/redirect" else "/loop")
            self.end_headers()
        elif path == "/host":
            self.answer(200, "text/plain", f"Host: {self.headers['Host']}".encode())
        elif path == "/stall":
            _STOPPED.wait()
        elif path in ENCODED:
            encoding, body = ENCODED[path]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Encoding", encoding)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif path == "/endless":
            self.answer(200, "text/plain", None)
            try:
                while True:
                    self.wfile.write(b"x" * 65536)
            except OSError:  # the client stopped reading, as it should
                return
        else:
            found = {"/page.html": ("text/html; charset=utf-8", PAGE.encode()),
                     "/notes.txt": ("text/plain", "line one\nline two\n".encode()),
                     "/pixel.png": ("image/png", PIXEL),
                     "/odd.txt": ("text/plain; charset=x-no-such-charset", "café\n".encode()),
                     "/big.txt": ("text/plain", b"".join(b"line %d\n" % n for n in range(200_000))),
                     "/big.html": ("text/html", b"<h1>Long</h1><p>" + b"x" * (3 * 2**20 // 2) + b"</p>"),
                     "/archive.zip": ("application/zip", b"PK" + bytes(4000))}.get(path)
            if found is None:
                self.answer(404, "text/html", b"<p>No such <b>page</b></p>")
            else:
                self.answer(200, *found)


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with serving(_Site) as (_, url):
        yield url
        _STOPPED.set()


def fetch(home_dir: Path, workspace: Path, arguments: dict[str, Any], **settings: Any) -> ToolResult:
    config = Config(builtins=BuiltinsConfig(fetch_url=FetchUrlConfig(**settings)),
                    limits=LimitsConfig(output_cap_bytes=4096))
    return one_call(home_dir, workspace, config, "fetch_url", arguments)


@pytest.fixture
def reach(home_dir: Path, workspace: Path, site: str) -> Any:
    """fetch_url allowed to reach the test server (and so every private address)."""
    def call(path: str, **arguments: Any) -> ToolResult:
        return fetch(home_dir, workspace, {"url": site + path, **arguments}, allow_private=True)
    return call


def test_fetch_url_is_offered_replay_unsafe_and_concurrency_safe() -> None:
    tool = registry.all_builtins()["fetch_url"]
    assert tool.replay == "unsafe" and tool.concurrency_safe is True
    assert registry.enabled(Config())[0]["fetch_url"].description.endswith("Private and local addresses are refused.")
    private = Config(builtins=BuiltinsConfig(fetch_url=FetchUrlConfig(allow_private=True)))
    assert "Private" not in registry.enabled(private)[0]["fetch_url"].description


def test_a_page_is_markdown_with_headings_emphasis_links_lists_and_code(reach: Any, site: str) -> None:
    result = reach("/page.html")
    assert not result.is_error, result.output
    assert result.output.splitlines()[0] == f"[{site}/page.html: 200 OK, text/html, {len(PAGE)} bytes]"
    body = result.output.split("\n\n", 1)[1]
    assert body.startswith("Title: Retries\n\n# Retry policy\n\n")
    assert f"Calls are *retried* **three** times; see [backoff]({site}/docs/backoff.html)." in body
    assert "- first\n- second" in body and "```\nretry(3)\n```" in body
    assert "secret" not in body and "p {}" not in body


def test_text_is_text_and_other_files_are_described(reach: Any, site: str) -> None:
    assert reach("/notes.txt").output.endswith("\n\nline one\nline two\n")
    assert reach("/odd.txt").output.endswith("\n\ncafé\n")  # an unknown charset is read as UTF-8
    archive = reach("/archive.zip")
    assert not archive.is_error
    assert archive.output == (f"[{site}/archive.zip: 200 OK, application/zip, 4002 bytes]\n"
                              "[not shown, nor read: fetch_url shows web pages, text and images]")


def test_an_image_is_saved_in_the_call_folder_and_attached(reach: Any) -> None:
    result = reach("/pixel.png")
    (media,) = result.media
    assert media.mime == "image/png" and media.size == len(PIXEL)
    assert Path(media.path).read_bytes() == PIXEL and Path(media.path).parent.name == "output"
    assert f"[image saved to {media.path}, attached for you to see]" in result.output


def test_an_error_status_is_an_error_result_with_the_page(reach: Any, site: str) -> None:
    result = reach("/nope")
    assert result.is_error
    assert result.output == f"[{site}/nope: 404 Not Found, text/html, 26 bytes]\n\nNo such **page**"


def test_the_body_is_cut_at_max_bytes_and_the_shown_text_at_the_output_cap(reach: Any) -> None:
    cut = reach("/big.txt", max_bytes=2048)
    assert "2048 bytes read, cut at max_bytes (2048)]" in cut.output.splitlines()[0]
    whole = reach("/big.txt")
    shown, footer = whole.output.rsplit("\n", 1)
    heading, text = shown.split("\n\n", 1)
    assert len(text.encode()) <= 4096 and footer.startswith(f"[shown: the first {len(text) + 1} of 2288890 bytes")
    page = Path(footer.split("the whole page is ")[1].split(":")[0])
    assert page.name == "page.md" and page.read_text().endswith("line 199999\n")
    # The text ends with a whole line; the footer's offset is the next line of page.md.
    last = int(text.rsplit("line ", 1)[1])
    assert footer.endswith(f"read on with read_file at offset {last + 2}]")
    assert page.read_text().splitlines()[last + 1] == f"line {last + 1}"


def test_a_compressed_body_is_decoded_a_bounded_piece_at_a_time(reach: Any, site: str) -> None:
    assert reach("/gzip.txt").output.endswith("\n\nline one\nline two\n")
    bomb = reach("/bomb.txt", max_bytes=100_000)
    assert "100000 bytes read, cut at max_bytes (100000)" in bomb.output.splitlines()[0]
    brotli = reach("/brotli.txt")
    assert brotli.is_error and brotli.output == (f"not fetched: {site}/brotli.txt came in the br content encoding, "
                                                 "which fetch_url does not decode (it asks for gzip or deflate)")


def test_only_the_first_mebibyte_of_html_is_converted(reach: Any) -> None:
    result = reach("/big.html")
    lines = result.output.splitlines()
    assert lines[2] == "[only the first 1 MiB of the page's 1572884 characters of HTML was converted]"
    assert lines[4] == "# Long"
    page = Path(result.output.rsplit("the whole page is ", 1)[1].split(":")[0])
    assert page.read_text().endswith("x" * 100) and len(page.read_text()) < 2**20 + 200


def test_an_endless_body_is_read_only_to_the_cap(reach: Any) -> None:
    result = reach("/endless", max_bytes=100_000)
    assert "100000 bytes read, cut at max_bytes (100000)" in result.output.splitlines()[0]


def test_redirects_are_followed_and_counted(reach: Any, site: str) -> None:
    result = reach(f"/redirect?to=/redirect%3Fto%3D{site}/notes.txt")
    assert not result.is_error
    assert result.output.splitlines()[0].endswith(f"; redirected from {site}/redirect?to=/redirect%3Fto%3D{site}"
                                                  f"/notes.txt -> {site}/redirect?to={site}/notes.txt]")
    looped = reach("/loop")
    assert looped.is_error and looped.output == (
        f"not fetched: {site}/loop redirected more than builtins.fetch_url.max_redirects (5) times; the last hop "
        f"led to {site}/loop")


def test_a_name_is_fetched_from_its_checked_address_with_its_own_host_header(
        home_dir: Path, workspace: Path, site: str) -> None:
    named = site.replace("127.0.0.1", "localhost")
    result = fetch(home_dir, workspace, {"url": f"{named}/host"}, allow_hosts=["localhost"])
    assert result.output.endswith(f"\n\nHost: localhost:{site.rsplit(':', 1)[1]}"), result.output


def test_a_server_that_does_not_answer_is_given_up_at_the_timeout(home_dir: Path, workspace: Path,
                                                                  site: str) -> None:
    result = fetch(home_dir, workspace, {"url": f"{site}/stall"}, allow_private=True, timeout_seconds=0.5)
    assert result.is_error and result.output == (
        f"not fetched: {site}/stall did not answer within builtins.fetch_url.timeout_seconds (0.5 s)")


def test_private_addresses_are_refused_by_default(home_dir: Path, workspace: Path, site: str) -> None:
    direct = fetch(home_dir, workspace, {"url": f"{site}/page.html"})
    assert direct.is_error and direct.output.startswith("not fetched: 127.0.0.1 is a private address")
    assert "add the host to builtins.fetch_url.allow_hosts in config.json (or set allow_private to true)" in (
        direct.output)
    named = fetch(home_dir, workspace, {"url": site.replace("127.0.0.1", "localhost") + "/page.html"})
    assert named.is_error and "(localhost resolves to it) is a private address" in named.output


@pytest.mark.parametrize("to", ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/", "http://[::1]:80/",
                                "http://[::ffff:127.0.0.1]/", "http://0.0.0.0/"])
def test_a_redirect_to_a_private_address_is_refused(home_dir: Path, workspace: Path, site: str, to: str) -> None:
    """The test server is reached by allowing its host only: the hop after it is checked anew."""
    result = fetch(home_dir, workspace, {"url": f"{site}/redirect?to={to}"}, allow_hosts=["127.0.0.1"])
    host = to.split("/")[2].split("]")[0].strip("[")
    assert result.is_error and result.output.startswith("not fetched: "), result.output
    assert host in result.output and "is a private address" in result.output


def test_denied_hosts_and_other_schemes_are_refused(home_dir: Path, workspace: Path, site: str) -> None:
    denied = fetch(home_dir, workspace, {"url": f"{site}/page.html"}, allow_private=True, deny_hosts=["127.0.0.1"])
    assert denied.output == ("not fetched: 127.0.0.1 is in builtins.fetch_url.deny_hosts of config.json; it is "
                             "never fetched")
    assert fetch(home_dir, workspace, {"url": "file:///etc/passwd"}).output == (
        "not fetched: file:/etc/passwd is not an http or https URL; fetch_url fetches only those")


@pytest.mark.parametrize(("address", "expected"), [
    ("93.184.216.34", True), ("2606:2800:220:1:248:1893:25c8:1946", True), ("127.0.0.1", False),
    ("10.1.2.3", False), ("172.16.0.1", False), ("192.168.1.1", False), ("169.254.169.254", False),
    ("100.64.0.1", False), ("0.0.0.0", False), ("224.0.0.1", False), ("::1", False), ("fe80::1", False),
    ("fd00:ec2::254", False), ("::ffff:10.0.0.1", False), ("::ffff:93.184.216.34", True),
    ("64:ff9b::a9fe:a9fe", False), ("2002:7f00:1::", False), ("::", False)])
def test_what_is_public(address: str, expected: bool) -> None:
    assert public(ipaddress.ip_address(address)) is expected


def test_host_patterns() -> None:
    assert host_matches("wiki.corp.example", ["*.corp.example"]) and not host_matches("corp.example", ["*.corp.example"])
    assert host_matches("Example.COM.", ["example.com"]) and host_matches("::1", ["[::1]"])


def test_through_the_cli_and_a_replay_serves_the_recorded_page(home_dir: Path, tmp_path: Path, site: str) -> None:
    (home_dir / "config.json").write_text(json.dumps({"builtins": {"fetch_url": {"allow_private": True}}}))
    session_id, (finished,) = scripted_run(home_dir, tmp_path / "script.json", [
        {"name": "fetch_url", "arguments": {"url": f"{site}/page.html"}}], "Calls are retried three times.")
    assert "# Retry policy" in finished.output and not finished.is_error
    # The page is gone: a rerun replay serves what was recorded (fetch_url is replay: unsafe).
    (home_dir / "config.json").write_text(json.dumps({"builtins": {"fetch_url": {"deny_hosts": ["127.0.0.1"]}}}))
    report = replay_report(home_dir, session_id)
    assert report["verdict"] == "NOTHING RERUN" and report["differences"] == [], report
    assert report["not_rerun"] == [f"fetch_url ({finished.call_id})"]
    # Run again, the call meets the page as it is now: refused, a difference.
    report = replay_report(home_dir, session_id, "--allow-unsafe")
    assert [(d["field"], d["actual"]) for d in report["differences"]] == [
        ("is_error", True),
        ("output", "not fetched: 127.0.0.1 is in builtins.fetch_url.deny_hosts of config.json; it is never fetched")]


def test_https_is_sent_to_the_checked_address_with_the_name_as_its_server_name(
        home_dir: Path, workspace: Path, tmp_path: Path) -> None:
    """The connection goes to the IP, and TLS still names (and checks the certificate against) the host:
    a self-signed certificate for localhost is refused as unverified, after the server heard "localhost"."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    heard: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda sock, name, ctx: heard.append(name)  # type: ignore[assignment,misc,return-value]
    with serving(_Site) as (server, url):
        server.socket = context.wrap_socket(server.socket, server_side=True)
        port = url.rsplit(":", 1)[1]
        result = fetch(home_dir, workspace, {"url": f"https://localhost:{port}/notes.txt"}, allow_hosts=["localhost"])
    assert result.is_error and "CERTIFICATE_VERIFY_FAILED" in result.output, result.output
    assert heard == ["localhost"]
