"""The console's pages, drawn on the server as HTML: everything the journal says is escaped.

Each function returns a whole page (:func:`layout`) or the part of a session's page that
its live script swaps in (:func:`session_main`). The pages carry no script but that one,
inline: no build step, nothing fetched from elsewhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

if TYPE_CHECKING:
    from zagent_cli.session_view import Entry
    from zagent_cli.ui.listing import Page
    from zagent_cli.ui.said import Said
    from zagent_core.history.costs import Spend
    from zagent_core.journal.views import ApprovalView, QuestionView, SessionState

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d232a;background:#f6f7f9}
header{background:#1d2733;color:#fff;padding:8px 20px;display:flex;gap:18px;align-items:baseline}
header a{color:#cfe3ff;text-decoration:none}header strong{font-size:16px}
main{padding:16px 20px;max-width:1200px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #e3e6ea;vertical-align:top}
th{background:#eef1f4;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.status{display:inline-block;padding:0 7px;border-radius:9px;background:#e3e6ea;white-space:nowrap}
.status.running{background:#cde8ff}.status.failed,.status.interrupted{background:#ffd6d6}
.status.waiting{background:#fff0c2}.status.ended{background:#e9e9e9;color:#555}.status.idle{background:#dff5dc}
form.filter{margin:0 0 12px;display:flex;gap:8px}
.facts td:first-child{width:160px;color:#555}
.section{margin:14px 0 4px;background:#fff;border:1px solid #e3e6ea;border-radius:6px;padding:8px 12px}
.section h3{margin:0 0 4px;font-size:14px}.section h3 time{color:#777;font-weight:normal;margin-left:8px}
.section h3 .seq{float:right;color:#999;font-weight:normal;font-size:12px}
.user{border-left:4px solid #3b82f6}.assistant{border-left:4px solid #10b981}
.item{margin:6px 0 0 14px}.item b{font-weight:600}
pre{background:#f3f4f6;padding:6px 8px;margin:4px 0;white-space:pre-wrap;word-break:break-word;max-height:24em;
overflow:auto}
.text{white-space:pre-wrap}
.pending{background:#fff8e1;border:1px solid #f0d37a;border-radius:6px;padding:10px 14px;margin:12px 0}
.pending form{display:inline-flex;gap:6px;margin:4px 8px 4px 0}
button{padding:4px 12px;border-radius:4px;border:1px solid #888;background:#fff;cursor:pointer}
button.approve{background:#16a34a;color:#fff;border-color:#16a34a}button.deny{background:#dc2626;color:#fff;
border-color:#dc2626}
svg.timeline{background:#fff;border:1px solid #e3e6ea;border-radius:6px}
svg.timeline rect{fill:#60a5fa}svg.timeline .error rect,svg.timeline .rejected rect,
svg.timeline .interrupted rect{fill:#f87171}svg.timeline .task rect{fill:#a78bfa}
svg.timeline .running rect{fill:#fbbf24}svg.timeline text{font-size:11px;fill:#333}
.problem{background:#ffd6d6;border:1px solid #e99;padding:8px 12px;border-radius:6px}
.outcome{background:#dff5dc;border:1px solid #9c9;padding:8px 12px;border-radius:6px}
a.button{padding:3px 12px;border-radius:4px;border:1px solid #888;background:#fff;color:inherit;text-decoration:none;
font-size:13.33px}
.more{margin:12px 0}table.sessions td:first-child{white-space:nowrap}
details.thinking{margin:2px 0 6px;color:#555}details.thinking summary{cursor:pointer;font-style:italic}
.section.compaction{border:1px dashed #b45309;border-left:4px solid #b45309;background:#fffbeb}
.section.compaction h3::before{content:"✂ ";color:#b45309}
.actions{display:flex;gap:8px;align-items:center;margin:8px 0}.actions form{display:inline-flex;gap:6px}
"""

#: The session page's one script: the server says when the session's journal moved on
#: (server-sent events); the page then fetches its main part again and swaps it in. The page's
#: ``data-live`` says once its stream follows the session (the first ``head``), for tests.
_LIVE = """
(function(){
  const main=document.getElementById('live');
  const source=new EventSource(main.dataset.events);
  source.addEventListener('head', async function(message){
    document.documentElement.dataset.live='following';
    if(Number(message.data)<=Number(main.dataset.version)) return;
    const reply=await fetch(main.dataset.part,{credentials:'same-origin'});
    if(!reply.ok) return;
    const fresh=new DOMParser().parseFromString(await reply.text(),'text/html').getElementById('live');
    if(fresh){main.innerHTML=fresh.innerHTML;main.dataset.version=fresh.dataset.version;}
  });
})();
"""


#: The list's one script: the server names the sessions that moved (server-sent events); the page
#: fetches itself again when one is on it, or on its first page (a session that moved comes to the
#: top), and swaps in what follows its filter form, which keeps what a person is typing.
_LIST_LIVE = """
(function(){
  const main=document.querySelector('main');
  const source=new EventSource('/events');
  let busy=false, again=false;
  async function redraw(){
    if(busy){again=true;return;}
    busy=true;
    try{
      const reply=await fetch(location.href,{credentials:'same-origin'});
      if(!reply.ok) return;
      const fresh=new DOMParser().parseFromString(await reply.text(),'text/html').querySelector('main');
      const form=main.querySelector('form.filter'), freshForm=fresh&&fresh.querySelector('form.filter');
      if(!form||!freshForm) return;
      while(form.nextSibling) form.nextSibling.remove();
      while(freshForm.nextSibling) main.appendChild(freshForm.nextSibling);
    }finally{busy=false;if(again){again=false;redraw();}}
  }
  source.addEventListener('following', function(){document.documentElement.dataset.live='following';});
  source.addEventListener('moved', function(message){
    const moved=JSON.parse(message.data);
    const first=!new URLSearchParams(location.search).has('after');
    const shown=new Set(Array.from(main.querySelectorAll('table.sessions tbody tr td:first-child a'),
                                   function(a){return a.textContent;}));
    if(first||moved.all||moved.ids.some(function(id){return shown.has(id);})) redraw();
  });
})();
"""


def layout(title: str, body: str, *, script: str = "") -> str:
    """A whole page: the console's header, then ``body``."""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)} · zagent</title>'
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{_STYLE}</style></head>'
            f'<body><header><strong>zagent</strong><a href="/">sessions</a><a href="/audit">audit</a></header>'
            f'<main>{body}</main>{f"<script>{script}</script>" if script else ""}</body></html>')


def status_badge(status: str) -> str:
    kind = "waiting" if status.startswith("waiting") or status == "queued" else status.partition(" ")[0]
    return f'<span class="status {escape(kind)}">{escape(status)}</span>'


def _when(at: datetime | None) -> str:
    return f'<time datetime="{at.isoformat()}">{at:%Y-%m-%d %H:%M:%S}Z</time>' if at else ""


def _short(text: str | None, most: int = 120) -> str:
    line = (text or "").strip().replace("\n", " ")
    return escape(line if len(line) <= most else line[: most - 1] + "…")


def session_link(session_id: str) -> str:
    return f'<a href="/sessions/{quote(session_id)}">{escape(session_id)}</a>'


#: What the list's cost column holds (its header's tooltip).
_COST_HEAD = ("its own model replies, priced by config.json's models (US dollars); its page gives it with its "
              "sub-agents")


def _cost_cell(spend: Spend | None) -> str:
    """A row's cost, or a dash with the reason when it is unknown (no catalog, a model it does not price)."""
    if spend is None:
        return '<td class="num cost" title="config.json has no models with prices">—</td>'
    if spend.usd is None:
        return (f'<td class="num cost" title="{escape(", ".join(spend.unpriced))} not priced in config.json\'s '
                f'models">—</td>')
    return f'<td class="num cost">${spend.usd:,.4f}</td>'


def sessions_page(page: Page, status: str | None, search: str, statuses: Iterable[str]) -> str:
    """The list of sessions, with its filter form and the link to the next page."""
    options = "".join(f'<option{" selected" if s == status else ""}>{escape(s)}</option>' for s in statuses)
    form = (f'<form class="filter" method="get" action="/"><select name="status"><option value="">any status</option>'
            f'{options}</select><input type="search" name="q" value="{escape(search)}" placeholder="id or prompt">'
            f'<button>filter</button></form>')
    rows = "".join(
        f'<tr><td>{session_link(row.session_id)}</td><td>{status_badge(row.status)}</td>'
        f'<td>{_short(row.first_prompt)}</td><td>{escape(row.model or "-")}</td><td class="num">{row.tokens:,}</td>'
        f'{_cost_cell(row.spend)}<td class="num">{row.children or ""}</td><td>{_when(row.last_at)}</td></tr>'
        for row in page.rows)
    table = (f'<table class="sessions"><thead><tr><th>session</th><th>status</th><th>first prompt</th><th>model</th>'
             f'<th>tokens</th><th title="{_COST_HEAD}">cost</th><th>sub-agents</th><th>last activity</th></tr></thead>'
             f'<tbody>{rows}</tbody></table>'
             if page.rows else f'<p class="empty">no sessions match (of {page.scanned} looked at)</p>')
    more = ""
    if page.next_after is not None:
        query = urlencode({k: v for k, v in (("status", status or ""), ("q", search),
                                              ("after", page.next_after)) if v})
        more = f'<p class="more"><a rel="next" href="/?{query}">older sessions →</a></p>'
    return layout("sessions", f"<h1>Sessions</h1>{form}{table}{more}", script=_LIST_LIVE)


def _linked(text: str, known: Iterable[str]) -> str:
    """``text`` escaped, with the ids of ``known`` sessions (children, the parent) made links."""
    shown = escape(text)
    ids = [escape(sid) for sid in known if sid]
    if not ids:
        return shown
    pattern = "|".join(re.escape(sid) for sid in sorted(ids, key=len, reverse=True))
    return re.sub(pattern, lambda m: f'<a href="/sessions/{quote(m.group(0))}">{m.group(0)}</a>', shown)


def _section_kind(entry: Entry) -> str:
    from zagent_cli.session_view import COMPACTION_TITLES

    if entry.title in ("user", "assistant"):
        return entry.title
    return "compaction" if entry.title.startswith(COMPACTION_TITLES) else "event"


def _entry(entry: Entry, known: list[str]) -> str:
    # Thinking is folded away (a reply is read for what it says); opened, it reads as the text does.
    parts = [f'<details class="thinking"><summary>thinking</summary><div class="text">{escape(thought)}</div>'
             f'</details>' for thought in entry.thinking]
    parts += [f'<div class="text">{_linked(entry.text, known)}</div>' if entry.text else "",
              f"<pre>{escape(entry.code)}</pre>" if entry.code is not None else ""]
    if entry.section:
        kind = _section_kind(entry)
        number = f'<span class="seq" title="fork here: give Fork this number">#{entry.seq}</span>' if entry.seq else ""
        return (f'<div class="section {kind}"><h3>{_linked(entry.title, known)}{_when(entry.at)}{number}</h3>'
                f'{"".join(parts)}')
    return f'<div class="item"><b>{_linked(entry.title, known)}</b>{"".join(parts)}</div>'


def conversation_html(entries: Iterable[Entry], known: list[str]) -> str:
    """The conversation: each section a box, its items (calls, results, notes) inside it."""
    html: list[str] = []
    opened = False
    for entry in entries:
        if entry.section and opened:
            html.append("</div>")
        html.append(_entry(entry, known))
        opened = opened or entry.section
    if opened:
        html.append("</div>")
    return "".join(html)


def _hidden(**fields: str) -> str:
    return "".join(f'<input type="hidden" name="{name}" value="{escape(value)}">' for name, value in fields.items())


def _question(sid: str, question: QuestionView, csrf: str) -> str:
    action = f"/sessions/{quote(sid)}/answer"
    chosen = "".join(f'<form method="post" action="{action}">{_hidden(csrf=csrf, call_id=question.call_id)}'
                     f'<button name="answer" value="{escape(choice)}">{escape(choice)}</button></form>'
                     for choice in question.choices or [])
    return (f'<div class="question"><p><b>The agent asks:</b> {escape(question.question)}</p>{chosen}'
            f'<form method="post" action="{action}">{_hidden(csrf=csrf, call_id=question.call_id)}'
            f'<input name="answer" required size="50" placeholder="your answer" aria-label="answer">'
            f'<button>Answer</button></form></div>')


def _approval(sid: str, approval: ApprovalView, csrf: str) -> str:
    fields = _hidden(csrf=csrf, call_id=approval.call_id)
    arguments = json.dumps(approval.arguments, ensure_ascii=False, indent=2)
    return (f'<div class="approval"><p><b>Approve {escape(approval.tool)}?</b> {escape(approval.why)} '
            f'(call {escape(approval.call_id)})</p><pre>{escape(arguments)}</pre>'
            f'<form method="post" action="/sessions/{quote(sid)}/approve">{fields}'
            f'<button class="approve">Approve</button></form>'
            f'<form method="post" action="/sessions/{quote(sid)}/deny">{fields}'
            f'<input name="reason" size="40" placeholder="why not (the model is told)" aria-label="reason">'
            f'<button class="deny">Deny</button></form></div>')


def _actions(sid: str, csrf: str) -> str:
    """Export (a download, as ``zagent sessions export``) and Fork (a POST, as ``zagent sessions fork``)."""
    return (f'<div class="actions"><a class="button" href="/sessions/{quote(sid)}/export" download>Export</a>'
            f'<form method="post" action="/sessions/{quote(sid)}/fork">{_hidden(csrf=csrf)}'
            f'<button class="fork">Fork</button><input name="at" size="14" inputmode="numeric" '
            f'placeholder="at event #N" aria-label="fork at event" title="the #N beside a part of the conversation '
            f'(up to and with that event); blank: the last event"></form></div>')


def session_main(state: SessionState, status: str, facts: list[tuple[str, str]], entries: Iterable[Entry],
                 timeline: str, csrf: str, *, earlier_turns: int = 0) -> str:
    """The live part of a session's page: its facts, its Export and Fork buttons, what waits for
    a person, the timeline of its calls and the conversation."""
    sid = state.session_id
    known = [child.session_id for child in state.children.values()]
    known += [state.parent.session_id] if state.parent else []
    known += [state.forked_from] if state.forked_from else []
    rows = "".join(f"<tr><td>{escape(name)}</td><td>{_linked(value, known)}</td></tr>" for name, value in facts)
    waiting = [_question(sid, q, csrf) for q in state.questions.values()]
    waiting += [_approval(sid, a, csrf) for a in state.waiting_approvals.values()]
    pending = f'<section class="pending"><h2>Waiting for you</h2>{"".join(waiting)}</section>' if waiting else ""
    drawn = f"<h2>Timeline</h2>{timeline}" if timeline else ""
    skipped = (f'<p class="more">{earlier_turns} earlier turns not shown: <a href="/sessions/{quote(sid)}?all=1">the whole session</a></p>'
               if earlier_turns else "")
    return (f'<h1>Session {escape(sid)} {status_badge(status)}</h1>{_actions(sid, csrf)}{pending}'
            f'<table class="facts">{rows}</table>{drawn}<h2>Conversation</h2>{skipped}'
            f'<div class="conversation">{conversation_html(entries, known)}</div>')


def session_page(state: SessionState, main: str, *, whole: bool = False, said: Said | None = None) -> str:
    """A session's page: what the form that sent the browser here found (``said``, above the
    box, so it stays while the session goes on), then :func:`session_main` in the box its live
    script refreshes (with the whole conversation again when ``whole``)."""
    sid = quote(state.session_id)
    told = f'<p class="{"problem" if said.problem else "outcome"}" role="status">{escape(said.text)}</p>' if said else ""
    box = (f'<div id="live" data-version="{state.version}" data-events="/sessions/{sid}/events" '
           f'data-part="/sessions/{sid}{"?all=1" if whole else ""}">{main}</div>')
    return layout(f"session {state.session_id}", told + box, script=_LIVE)


def _audit_row(row: dict[str, Any]) -> str:
    from zagent_cli.show import asked_line, call_outcome

    took = "-" if row["duration_ms"] is None else f"{row['duration_ms']} ms"
    asked = f"<br><i>{escape(asked_line(row['asked']))}</i>" if row.get("asked") else ""
    return (f'<tr><td>{escape(str(row["requested_at"]))}</td><td>{session_link(row["session_id"])}</td>'
            f'<td>{escape(row["tool"] or "?")}</td><td>{escape(call_outcome(row))}</td><td class="num">{took}</td>'
            f'<td>{_short(json.dumps(row["arguments"], ensure_ascii=False), 80)}</td>'
            f'<td>{_short(row["output_head"], 110)}{asked}</td></tr>')


def audit_page(rows: list[dict[str, Any]], tool: str, status: str, statuses: Iterable[str],
               limit: int) -> str:
    """The calls of every session, as ``zagent audit`` lists them, with its filters."""
    options = "".join(f'<option{" selected" if s == status else ""}>{escape(s)}</option>' for s in statuses)
    form = (f'<form class="filter" method="get" action="/audit"><input name="tool" value="{escape(tool)}" '
            f'placeholder="tool"><select name="status"><option value="">any call</option>{options}</select>'
            f'<button>filter</button></form>')
    body = "".join(_audit_row(row) for row in rows)
    table = (f'<table class="audit"><thead><tr><th>requested</th><th>session</th><th>tool</th><th>outcome</th>'
             f'<th>took</th><th>arguments</th><th>output</th></tr></thead><tbody>{body}</tbody></table>'
             if rows else '<p class="empty">no calls match</p>')
    return layout("audit", f"<h1>Audit</h1>{form}<p>{len(rows)} calls (the {limit} most recent at most)</p>{table}")
