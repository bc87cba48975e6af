"""The built-in ``fetch_url`` tool: one GET, its page as Markdown for the model.

HTML becomes Markdown with markdownify (on BeautifulSoup's parser): it keeps headings,
emphasis, links, lists, tables and code blocks as Markdown, is MIT-licensed like zagent (the
other common converter, html2text, is GPL-3.0) and is maintained; scripts, styles and the
like are dropped before it runs. Other text is answered as text, an image is saved in the
call's folder and attached, anything else is described (type and size), not dumped.

Every hop goes through :mod:`zagent_core.builtins.web_access` (resolved once, checked, fetched
from that address); redirects are followed here, one at a time, so each is checked as the
first request was. The body is streamed and reading stops at the cap; what the model is
shown is capped again after the conversion, with the whole page kept in the call's folder.
"""

from __future__ import annotations

import mimetypes
import re
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from zagent_core.builtins.web_access import Refused, checked_target
from zagent_core.config import Config, FetchUrlConfig
from zagent_core.journal.events import Media
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext, always, object_schema
from zagent_core.tools.results import ToolResult, _attachable
from zagent_core.version import zagent_version

NAME = "fetch_url"
#: What the whole page is kept as in the call's ``output/`` folder when the model is shown only its start.
PAGE_FILE = "page.md"
_HTML = ("text/html", "application/xhtml+xml")
_TEXT = ("application/json", "application/xml", "application/javascript", "application/x-ndjson")
#: Elements whose content is not the page's text.
_DROPPED = ["script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "embed", "head"]
_STREAM_CHUNK = 64 * 1024
#: HTML converted to Markdown at most, in characters: the conversion costs some 5 to 10 s a MiB
#: (BeautifulSoup's parser and markdownify, in Python), and the model is shown 32 KiB of it.
HTML_CONVERTED = 1024 * 1024


def parameters(config: Config) -> dict[str, Any]:
    settings = config.builtins.fetch_url
    return object_schema({
        "url": {"type": "string", "minLength": 1, "maxLength": 8192,
                "description": "The http or https URL to fetch."},
        "max_bytes": {"type": "integer", "minimum": 1024, "maximum": settings.max_bytes,
                      "description": f"Bytes of the body read at most (default and most: {settings.max_bytes})."},
    }, ["url"])


def description(config: Config) -> str:
    cap = config.limits.output_cap_bytes // 1024
    private = "" if config.builtins.fetch_url.allow_private else " Private and local addresses are refused."
    return (
        "Fetch a web page (HTTP GET) and answer it as Markdown (headings, links, lists, code); other text as "
        f"text, images attached for you to see, other files described. At most {cap} KiB is shown, the whole page "
        f"is saved for read_file.{private}"
    )


@dataclass
class _Page:
    """What the last hop of a fetch answered."""

    url: httpx.URL
    status: int
    reason: str
    mime: str
    charset: str | None
    declared: int | None
    body: bytes = b""
    #: Reading stopped at the cap (or the timeout) before the body's end.
    cut: str | None = None
    redirects: list[str] = field(default_factory=list)

    def heading(self, size: str | None = None) -> str:
        """The first line of the result; ``size``: what is said of the body instead of what was read."""
        size = size or f"{len(self.body)} bytes{' read, ' + self.cut if self.cut else ''}"
        came = f"; redirected from {' -> '.join(self.redirects)}" if self.redirects else ""
        return f"[{self.url}: {self.status} {self.reason}, {self.mime or 'no content type'}, {size}{came}]"


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Fetch one URL and answer what it holds."""
    settings = context.config.builtins.fetch_url
    limit = min(int(arguments.get("max_bytes", settings.max_bytes)), settings.max_bytes)
    try:
        url = httpx.URL(arguments["url"].strip())
    except httpx.InvalidURL as exc:
        return ToolResult(output=f"{arguments['url']!r} is not a URL ({exc}); give one such as "
                                 "https://example.com/page", is_error=True)
    try:
        with httpx.Client(trust_env=False, follow_redirects=False,
                          headers={"User-Agent": f"zagent/{zagent_version()} (fetch_url)",
                                   "Accept-Encoding": "gzip, deflate"}) as client:
            page = _fetch(context, client, url, settings, limit)
    except Refused as exc:
        return ToolResult(output=f"not fetched: {exc}", is_error=True)
    except httpx.TimeoutException:
        return ToolResult(output=f"not fetched: {url} did not answer within builtins.fetch_url.timeout_seconds "
                                 f"({settings.timeout_seconds:g} s)", is_error=True)
    except httpx.HTTPError as exc:
        return ToolResult(output=f"not fetched: {url}: {exc or type(exc).__name__}", is_error=True)
    return _answer(context, page)


def _fetch(context: BuiltinContext, client: httpx.Client, url: httpx.URL, settings: FetchUrlConfig,
           limit: int) -> _Page:
    deadline = time.monotonic() + settings.timeout_seconds
    redirects: list[str] = []
    for _ in range(settings.max_redirects + 1):
        target = checked_target(url, settings)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise httpx.TimeoutException("deadline")
        response = target.send(client, remaining)
        try:
            location = response.headers.get("location")
            if response.is_redirect and location:
                redirects.append(str(url))
                url = url.join(location)
                continue
            mime = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            declared = response.headers.get("content-length")
            page = _Page(url=url, status=response.status_code, reason=response.reason_phrase, mime=mime,
                         charset=response.charset_encoding, redirects=redirects,
                         declared=int(declared) if declared and declared.isdigit() else None)
            if _kind(mime) != "other":
                _read(context, response, page, limit, deadline)
            return page
        finally:
            response.close()
    raise Refused(f"{redirects[0]} redirected more than builtins.fetch_url.max_redirects "
                  f"({settings.max_redirects}) times; the last hop led to {url}")


def _read(context: BuiltinContext, response: httpx.Response, page: _Page, limit: int, deadline: float) -> None:
    """The body into ``page``, up to ``limit`` bytes, the deadline, or the session stopping its calls."""
    body = bytearray()
    for chunk in _decoded(response, page.url):
        body += chunk
        if len(body) > limit:
            page.cut = f"cut at max_bytes ({limit})"
            del body[limit:]
        elif time.monotonic() > deadline:
            page.cut = "cut at builtins.fetch_url.timeout_seconds"
        elif context.host.calls_stopped():
            page.cut = "cut: the session's calls were stopped"
        if page.cut:
            break
    page.body = bytes(body)


def _decoded(response: httpx.Response, url: httpx.URL) -> Iterator[bytes]:
    """The body, decoded a bounded piece at a time: httpx's own decoding inflates a whole network
    chunk at once, and 64 KiB of gzip can be 64 MiB of zeros (of Brotli, gigabytes)."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        yield from response.iter_raw(_STREAM_CHUNK)
        return
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise Refused(f"{url} came in the {encoding} content encoding, which fetch_url does not decode "
                      "(it asks for gzip or deflate)")
    # 32 + 15: a gzip or a zlib stream, whichever it is.
    decoder = zlib.decompressobj(wbits=47)
    try:
        for raw in response.iter_raw(_STREAM_CHUNK):
            pending = raw
            while pending:
                yield decoder.decompress(pending, _STREAM_CHUNK)
                pending = decoder.unconsumed_tail
        yield decoder.flush()
    except zlib.error as exc:
        raise Refused(f"{url} sent a body that does not decode as {encoding} ({exc})") from None


def _kind(mime: str) -> str:
    if mime in _HTML:
        return "html"
    if mime.startswith("text/") or mime in _TEXT or mime.endswith(("+json", "+xml")):
        return "text"
    return "image" if mime.startswith("image/") else "other"


def _answer(context: BuiltinContext, page: _Page) -> ToolResult:
    kind = _kind(page.mime)
    failed = page.status >= 400
    if kind == "other":
        size = f"{page.declared} bytes" if page.declared is not None else "size not given"
        return ToolResult(output=f"{page.heading(size)}\n[not shown, nor read: fetch_url shows web pages, text and "
                                 "images]", is_error=failed)
    if kind == "image":
        return _image(context, page, failed)
    try:
        text = page.body.decode(page.charset or "utf-8", "replace")
    except LookupError:  # a charset Python does not know
        text = page.body.decode("utf-8", "replace")
    shown = text
    if kind == "html":
        shown = _markdown(text[:HTML_CONVERTED], page.url)
        if len(text) > HTML_CONVERTED:
            shown = (f"[only the first {HTML_CONVERTED // 2**20} MiB of the page's {len(text)} characters of HTML "
                     f"was converted]\n\n{shown}")
    return ToolResult(output=f"{page.heading()}\n\n{_capped(context, shown)}", is_error=failed)


def _markdown(html: str, base: httpx.URL) -> str:
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(html, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for element in soup(_DROPPED):
        element.decompose()
    # Links made absolute: the model fetches them as they are written, with no page to be relative to.
    for attribute, elements in (("href", soup.find_all("a", href=True)), ("src", soup.find_all("img", src=True))):
        for element in elements:
            try:
                element[attribute] = str(base.join(str(element[attribute]).strip()))
            except httpx.InvalidURL:
                continue
    text = MarkdownConverter(heading_style="ATX", bullets="-", escape_underscores=False).convert_soup(soup)
    text = re.sub(r"\n[ \t]*\n(?:[ \t]*\n)+", "\n\n", text).strip()
    return f"Title: {title}\n\n{text}" if title else text


def _capped(context: BuiltinContext, text: str) -> str:
    """``text``, or its start and where the whole of it is kept when it is over the model's cap."""
    cap = context.config.limits.output_cap_bytes
    encoded = text.encode("utf-8")
    if len(encoded) <= cap:
        return text
    kept = encoded[:cap].decode("utf-8", "ignore")
    kept = kept[:kept.rfind("\n") + 1] or kept
    lines = kept.count("\n")
    assert context.call_dir is not None, "fetch_url gets a call folder (runs_process)"
    whole = context.call_dir / "output" / PAGE_FILE
    whole.write_text(text, encoding="utf-8")
    return (f"{kept}[shown: the first {len(kept.encode('utf-8'))} of {len(encoded)} bytes, {cap // 1024} KiB being "
            f"the most a result shows; the whole page is {whole}: read on with read_file at offset {lines + 1}]")


def _image(context: BuiltinContext, page: _Page, failed: bool) -> ToolResult:
    assert context.call_dir is not None, "fetch_url gets a call folder (runs_process)"
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", page.url.path.rsplit("/", 1)[-1]).strip("._")[:100] or "image"
    extension = mimetypes.guess_extension(page.mime) or ""
    path = context.call_dir / "output" / (stem if stem.endswith(extension) else stem + extension)
    path.write_bytes(page.body)
    if page.cut:
        return ToolResult(output=f"{page.heading()}\n[image saved to {path} but incomplete, so not attached]",
                          is_error=True)
    attach, why_not = _attachable(page.mime, len(page.body), context.config.capabilities, context.config.limits)
    if not attach:
        return ToolResult(output=f"{page.heading()}\n[image saved to {path}; {why_not}]", is_error=failed)
    return ToolResult(output=f"{page.heading()}\n[image saved to {path}, attached for you to see]", is_error=failed,
                      media=[Media(path=str(path), mime=page.mime, size=len(page.body))])


TOOL = Builtin(
    name=NAME, description=description(Config()), parameters=parameters(Config()), run=run,
    # It only reads (the web): beside other reads it changes nothing they see.
    concurrency_safe=True,
    # The page may have changed, or be gone: after a crash the call is reported, and a replay
    # serves the page as it was recorded.
    replay="unsafe",
    # Not a process, but a folder: the whole page and fetched images are kept in its output/.
    runs_process=always,
)


def for_config(config: Config) -> Builtin:
    """The tool with the caps ``config`` sets in its description and schema."""
    return TOOL.shaped(description(config), parameters(config))
