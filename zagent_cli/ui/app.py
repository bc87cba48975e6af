"""The console's routes (Starlette), behind the access token.

Every request must carry the token: once in the query (``?token=``, the URL ``zagent ui``
prints), which sets a cookie and sends the browser on to the same URL without it, then the
cookie. A form that changes a session also carries a CSRF token derived from the access
token, and the cookie is ``SameSite=Strict``: a page of another site can neither read the
console nor post to it. Pages read the journal in Starlette's thread pool (its calls block).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from zagent_cli.ui import pages
from zagent_cli.ui.deciding import Decider
from zagent_cli.ui.listing import STATUSES, Pricing, Tallies, sessions_page
from zagent_cli.ui.live import Hub, head_events, list_events
from zagent_cli.ui.said import COOKIE_SECONDS, Said, read_said, said_cookie

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from zagent_cli.context import Context
    from zagent_core.drive.driving import Decision
    from zagent_core.history.trees import TreeNode
    from zagent_core.journal.protocol import AdminJournal, ChangeFeed
    from zagent_core.journal.views import SessionState

#: The turns a session's page shows unless asked for all (``?all=1``).
LAST_TURNS = 20
#: The calls the audit page lists at most (the newest), as ``zagent audit``'s default.
AUDIT_LIMIT = 100
#: What the audit page filters calls by: ``zagent audit``'s ``--errors`` and ``--asked``.
AUDIT_FILTERS = ("errors", "asked")
#: How a decision given on a page is journaled (``via``), for the audit to say where it came from.
VIA = "zagent ui"
#: A form's body, at most (an answer is capped lower by config's limits; this bounds the read).
MOST_FORM_BYTES = 1 << 20


@dataclass
class Console:
    """What the routes share: the journal they read, its change feed, and how to drive a session."""

    journal: AdminJournal
    context: Context
    token: str
    #: The cookie's name: one per port, so two consoles on one host keep their own.
    cookie: str
    #: Opens the journal's change feed (``zagent_store.open_changes``): given, so the console's wing
    #: does not pick a store's feed itself.
    changes: Callable[[], ChangeFeed]
    decider: Decider = field(init=False)
    live: Hub = field(init=False)
    tallies: Tallies = field(default_factory=Tallies)

    def __post_init__(self) -> None:
        self.decider = Decider(self.context)
        self.live = Hub(self.changes)

    @property
    def csrf(self) -> str:
        return hmac.new(self.token.encode(), b"zagent ui forms", hashlib.sha256).hexdigest()

    @property
    def said_cookie(self) -> str:
        """The cookie that carries a form's outcome to the page it redirects to (:mod:`.said`)."""
        return f"{self.cookie}_said"


class TokenGate:
    """No request reaches a route without the access token (query once, then the cookie)."""

    def __init__(self, app: ASGIApp, console: Console) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        token = self.console.token
        given = request.query_params.get("token")
        if given is not None and hmac.compare_digest(given.encode(), token.encode()):
            rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
            response: Response = RedirectResponse(request.url.path + (f"?{rest}" if rest else ""), 303)
            response.set_cookie(self.console.cookie, token, httponly=True, samesite="strict")
        elif hmac.compare_digest(request.cookies.get(self.console.cookie, "").encode(), token.encode()):
            await self.app(scope, receive, send)
            return
        else:
            response = HTMLResponse(pages.layout("no access", "<h1>No access</h1><p>Open the URL <code>zagent ui</code> "
                                                 "printed, with its <code>?token=</code>, to use this console.</p>"),
                                    403)
        await response(scope, receive, send)


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def _pricing(console: Console) -> Pricing | None:
    """The catalog's prices now (config.json is read for each page: edited prices show at once);
    None without a catalog, where every cost would be unknown."""
    from zagent_core.tools.model_catalog import known, priced_by

    config = console.context.config()
    return Pricing(priced_by(config), console.tallies) if known(config) else None


def sessions(request: Request) -> Response:
    console = _console(request)
    status = request.query_params.get("status") or None
    search = request.query_params.get("q", "").strip()
    page = sessions_page(console.journal, status=status, search=search, after=request.query_params.get("after"),
                         pricing=_pricing(console))
    return HTMLResponse(pages.sessions_page(page, status, search, STATUSES))


def _session_html(console: Console, session_id: str, whole: bool, said: Said | None = None) -> tuple[str, int]:
    from zagent_cli.session_view import Part, conversation, header_facts, last_turns
    from zagent_cli.ui.timeline import MOST_CALLS, timeline_svg
    from zagent_core.journal.snapshots import open_state
    from zagent_core.session.status import session_status, turn_failure

    journal = console.journal
    state = open_state(journal, session_id)
    if state.version == 0:
        return pages.layout("no such session", f'<h1>No session "{escape(session_id)}"</h1>'
                                               '<p><a href="/">The list</a> shows the sessions.</p>'), 404
    status = session_status(journal, session_id, state)
    part = Part() if whole else last_turns(journal, state, LAST_TURNS)
    facts = header_facts(state, status, turn_failure(state)) + _cost_facts(console, state)
    main = pages.session_main(state, status, facts, conversation(journal, state, part, numbered=True),
                              timeline_svg(journal.audit(session=session_id, limit=MOST_CALLS)), console.csrf,
                              earlier_turns=part.earlier_turns)
    return pages.session_page(state, main, whole=whole, said=said), 409 if said and said.problem else 200


def _cost_facts(console: Console, state: SessionState) -> list[tuple[str, str]]:
    """What the session cost, on its own and with its sub-agents (none without a catalog), from
    the tallies the list keeps: a page drawn again reads only the events appended since."""
    from zagent_cli.show import cost_facts
    from zagent_core.history.costs import SessionCosts
    from zagent_core.history.trees import session_tree

    pricing = _pricing(console)
    tree = session_tree(console.journal, state.session_id) if pricing is not None else None
    if pricing is None or tree is None:
        return []
    own = pricing.spend(console.journal, state.session_id, state.version)
    below = list(_below(tree))
    subtree = sum((pricing.spend(console.journal, node.session_id, console.journal.head(node.session_id))
                   for node in below), own)
    # The lines of `zagent sessions show`, but its turns' (the page shows the conversation's last turns only).
    return cost_facts(SessionCosts(state.session_id, (), own, subtree, len(below)))


def _below(node: TreeNode) -> Iterator[TreeNode]:
    for child in node.children:
        yield child
        yield from _below(child)


def session(request: Request) -> Response:
    """A session's page, with what the form that sent the browser here found (said once)."""
    console = _console(request)
    session_id = request.path_params["session_id"]
    said = read_said(request.cookies.get(console.said_cookie), console.csrf, session_id)
    html, code = _session_html(console, session_id, "all" in request.query_params, said)
    response = HTMLResponse(html, code)
    if said is not None:
        response.delete_cookie(console.said_cookie, httponly=True, samesite="strict")
    return response


def _redirect(console: Console, said: Said) -> Response:
    """POST/redirect/GET: to the session's page, which says ``said`` once; reloading it posts nothing."""
    response = RedirectResponse(f"/sessions/{quote(said.session_id)}", 303)
    response.set_cookie(console.said_cookie, said_cookie(said, console.csrf), max_age=COOKIE_SECONDS,
                        httponly=True, samesite="strict")
    return response


def export(request: Request) -> Response:
    """The session as ``zagent sessions export -o FILE`` writes it (the same lines), as a download."""
    import re

    from zagent_core.history.exports import export_lines

    console = _console(request)
    session_id = request.path_params["session_id"]
    if console.journal.head(session_id) == 0:
        return HTMLResponse(pages.layout("no such session", f'<h1>No session "{escape(session_id)}"</h1>'), 404)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", session_id)
    # Streamed as it is read (in Starlette's thread pool): a long session is never held whole.
    return StreamingResponse((line + "\n" for line in export_lines(console.journal.read(session_id))),
                             media_type="application/jsonl",
                             headers={"Content-Disposition": f'attachment; filename="{name}.jsonl"'})


#: Server-sent events go out as they are written: not cached, not buffered by a proxy (nginx).
_STREAMED = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
_TOO_MANY = "too many pages are followed live; reload this one by hand"


async def session_events(request: Request) -> Response:
    """A session page's stream: its session's head, each time it moves."""
    live = _console(request).live
    if not live.take():
        return Response(_TOO_MANY, 503)
    return StreamingResponse(head_events(live, request.path_params["session_id"], _console(request).journal.head),
                             media_type="text/event-stream", headers=_STREAMED)


async def sessions_events(request: Request) -> Response:
    """The list's stream: the sessions that moved."""
    live = _console(request).live
    if not live.take():
        return Response(_TOO_MANY, 503)
    return StreamingResponse(list_events(live), media_type="text/event-stream", headers=_STREAMED)


async def _form(request: Request) -> dict[str, str] | None:
    """The form's fields, or None when its CSRF token is not this console's (or it is too big)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MOST_FORM_BYTES:
            return None
    fields = {name: values[0] for name, values in parse_qs(body.decode("utf-8", "replace")).items()}
    if not hmac.compare_digest(fields.get("csrf", "").encode(), _console(request).csrf.encode()):
        return None
    return fields


def _refused() -> Response:
    return HTMLResponse(pages.layout("refused", "<h1>Refused</h1><p>The form did not come from this console (its CSRF "
                                                "token is missing or wrong): reload the session's page and try "
                                                "again.</p>"), 403)


#: What the session's page says once a person's decision is journaled.
_GIVEN = {"answer": "Your answer was given", "approve": "Approved", "deny": "Denied"}


async def decide(request: Request) -> Response:
    """An answer, an approval or a denial: the drive starts, and the browser is sent to the
    session's page (303), which says whether the decision was given or why not."""
    import asyncio

    from zagent_core.drive.driving import answering, approving, denying

    console = _console(request)
    session_id, what = request.path_params["session_id"], request.path_params["what"]
    if what not in ("answer", "approve", "deny"):
        return HTMLResponse(pages.layout("not found", "<h1>Not found</h1>"), 404)
    fields = await _form(request)
    if fields is None:
        return _refused()
    call_id = fields.get("call_id") or None
    decision: Decision
    if what == "answer":
        answer = fields.get("answer", "")
        if not answer.strip():
            return _redirect(console, Said(session_id, "The answer is empty: write one, or pick a choice.", True))
        decision = answering(answer, call_id, numbered=False, via=VIA)
    elif what == "approve":
        decision = approving(call_id, via=VIA)
    else:
        decision = denying(call_id, fields.get("reason", "").strip(), via=VIA)
    refusal = await asyncio.wrap_future(console.decider.decide(session_id, decision))
    if refusal is not None:
        return _redirect(console, Said(session_id, refusal[:1].upper() + refusal[1:], True))
    call = f" (call {call_id})" if call_id else ""
    return _redirect(console, Said(session_id, f"{_GIVEN[what]}{call}: the session goes on below."))


async def fork(request: Request) -> Response:
    """A new session from this one's events, up to the event ``at`` (its last when blank), as
    ``zagent sessions fork`` makes it; the browser is sent to the new session's page."""
    import anyio

    console = _console(request)
    session_id = request.path_params["session_id"]
    fields = await _form(request)
    if fields is None:
        return _refused()
    at = fields.get("at", "").strip().lstrip("#")
    if at and not at.isdigit():
        return _redirect(console, Said(session_id, f'Cannot fork at "{at}": give the number of an event (the #N of '
                                                   "zagent sessions show --events), or leave it blank for the "
                                                   "last.", True))
    said = await anyio.to_thread.run_sync(_fork, console, session_id, int(at) if at else None)
    return _redirect(console, said)


def _fork(console: Console, session_id: str, at: int | None) -> Said:
    import click

    from zagent_core.history.exports import fork_session
    from zagent_core.ids import new_session_id
    from zagent_core.journal.events import SessionForked

    try:
        with console.context.existing_journal(read_only=False) as journal:
            last = journal.read_last(session_id, 1)
            if not last:
                return Said(session_id, f'No session "{session_id}" to fork.', True)
            try:
                made = fork_session(journal, session_id, last[0].seq if at is None else at, new_session_id())
            except ValueError as exc:
                return Said(session_id, f"Not forked: {exc}.", True)
            forked_at = journal.read_last(made, 1)[0].event
    except click.ClickException as exc:  # the journal could not be opened for writing
        return Said(session_id, f"Not forked: {exc.message}", True)
    assert isinstance(forked_at, SessionForked)
    return Said(made, f"Forked from session {session_id} at #{forked_at.parent_seq}: resume it to take another "
                      f"path (zagent resume {made} \"...\").")


def audit(request: Request) -> Response:
    tool = request.query_params.get("tool", "").strip()
    status = request.query_params.get("status", "")
    filters: dict[str, Any] = {name: status == name for name in AUDIT_FILTERS}
    rows = _console(request).journal.audit(tool=tool or None, limit=AUDIT_LIMIT, **filters)
    return HTMLResponse(pages.audit_page(rows, tool, status, AUDIT_FILTERS, AUDIT_LIMIT))


def _journal_failed(request: Request, exc: Exception) -> Response:
    """The journal failed under a page (locked too long, damaged, a newer schema): said on the page."""
    return HTMLResponse(pages.layout("the journal failed", f'<h1>The journal failed</h1><p class="problem">'
                                                           f'{escape(str(exc))}</p>'), 500)


def make_app(console: Console) -> ASGIApp:
    """The console's ASGI application, every route behind the token."""
    from zagent_core.errors import ZagentError

    app = Starlette(exception_handlers={ZagentError: _journal_failed}, routes=[
        Route("/", sessions),
        Route("/events", sessions_events),
        Route("/sessions/{session_id}", session),
        Route("/sessions/{session_id}/events", session_events),
        Route("/sessions/{session_id}/export", export),
        Route("/sessions/{session_id}/fork", fork, methods=["POST"]),
        Route("/sessions/{session_id}/{what:str}", decide, methods=["POST"]),
        Route("/audit", audit),
    ])
    app.state.console = console
    return TokenGate(app, console)
