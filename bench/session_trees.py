"""Session trees (issue 11): listing top-level sessions, finding a subtree, reading a tree, beside raw sqlite3.

Builds a journal of ``-n`` sessions (default 20,000; two events each), 60% of them
sub-agents of one of the 50 sessions started before them (so trees of a few dozen
sessions, several levels deep), through ``SQLiteJournal.append``, then times, zagent and
raw alternating, medians of ``-r`` rounds:

* ``sessions(50)`` and ``sessions(50, top_level=True)`` (what ``zagent sessions list``
  and ``--all`` read) vs a raw ``SELECT`` of the 50 newest ``heads`` rows (of those
  without a parent, for the second);
* the subtree of a session (``audit --descendants``' recursive query on
  ``heads_parent``) vs raw: every ``heads`` row's parent read into Python and walked;
* ``session_tree`` of the largest tree (``sessions show --tree``: each session's state
  folded from its events, its status and the root's first prompt) vs raw: the events of
  the tree's sessions (known beforehand) selected and ``json.loads``-ed.

    $PY bench/session_trees.py [-n SESSIONS] [-r ROUNDS] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zagent_core.journal.events import ChildEnded, ChildSpawned, ParentLink, SessionStarted, SpawnStats, UserMessage
from zagent_core.history.trees import session_tree
from zagent_store import SQLiteJournal
from zagent_store.views import SUBTREE


def build(journal: SQLiteJournal, sessions: int) -> dict[str, str | None]:
    """The sessions, each with its parent (or None), as appended: a parent journals each
    child's ``child_spawned`` before the child starts, and its ``child_ended`` after."""
    rng = random.Random(11)
    parents: dict[str, str | None] = {}
    depth: dict[str, int] = {}
    versions: dict[str, int] = {}
    for n in range(sessions):
        sid = f"s{n:06d}"
        recent = list(parents)[-50:]
        parent = rng.choice(recent) if recent and rng.random() < 0.6 else None
        depth[sid] = depth[parent] + 1 if parent else 0
        link = None
        if parent:
            label = f"child-{n}"
            link = ParentLink(session_id=parent, call_id=f"call_{n}", label=label, depth=depth[sid])
            journal.append(parent, [ChildSpawned(call_id=link.call_id, label=label, child_session_id=sid,
                                                 task=f"task {n}", model="scripted:x")], versions[parent])
            versions[parent] += 1
        journal.append(sid, [SessionStarted(origin="spawn" if parent else "run", workspace="/w", zagent_version="0",
                                            parent=link), UserMessage(text=f"task {n}")], 0)
        versions[sid] = 2
        if link is not None and parent is not None:
            journal.append(parent, [ChildEnded(call_id=link.call_id, label=link.label, child_session_id=sid,
                                               status="completed", text="done", stats=SpawnStats(turns=1))],
                           versions[parent])
            versions[parent] += 1
        parents[sid] = parent
    return parents


def timed(rounds: int, zagent: Callable[[], Any], raw: Callable[[], Any]) -> tuple[float, float]:
    """Medians in ms, the two sides alternating (their order flipped each round)."""
    times: dict[int, list[float]] = {0: [], 1: []}
    for number in range(rounds):
        for side in ((0, 1) if number % 2 == 0 else (1, 0)):
            began = time.perf_counter()
            (zagent, raw)[side]()
            times[side].append((time.perf_counter() - began) * 1000)
    return statistics.median(times[0]), statistics.median(times[1])


def subtree_in_python(journal: SQLiteJournal, root: str) -> set[str]:
    children: dict[str, list[str]] = {}
    for sid, parent in journal.db.execute("SELECT session_id, parent_session_id FROM heads"):
        children.setdefault(parent, []).append(sid)
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--sessions", type=int, default=20_000)
    parser.add_argument("-r", "--rounds", type=int, default=21)
    parser.add_argument("--dir", help="where to put the journal (default: the system temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as folder, \
            SQLiteJournal(Path(folder) / "journal.db", synchronous="OFF") as journal:
        began = time.perf_counter()
        parents = build(journal, args.sessions)
        print(f"{args.sessions:,} sessions ({sum(p is not None for p in parents.values()):,} sub-agents) "
              f"appended in {time.perf_counter() - began:.1f} s")
        roots = [sid for sid, parent in parents.items() if parent is None]
        sizes = {root: len(subtree_in_python(journal, root)) for root in roots[-200:]}
        biggest = max(sizes, key=lambda root: sizes[root])
        tree = subtree_in_python(journal, biggest)
        newest = "SELECT * FROM heads {where} ORDER BY last_seq DESC LIMIT 50"
        rows: list[tuple[str, tuple[float, float]]] = [
            ("sessions(50)", timed(args.rounds, lambda: journal.sessions(50),
                                   lambda: journal.db.execute(newest.format(where="")).fetchall())),
            ("sessions(50, top_level=True)", timed(
                args.rounds, lambda: journal.sessions(50, top_level=True),
                lambda: journal.db.execute(newest.format(where="WHERE parent_session_id IS NULL")).fetchall())),
            (f"subtree of {biggest} ({sizes[biggest]} sessions)", timed(
                args.rounds, lambda: journal.db.execute(SUBTREE, [biggest]).fetchall(),
                lambda: subtree_in_python(journal, biggest))),
            (f"session_tree of {biggest}", timed(
                args.rounds, lambda: session_tree(journal, biggest),
                lambda: [json.loads(data) for sid in tree for (data,) in
                         journal.db.execute("SELECT data FROM events WHERE session_id = ?", [sid])])),
        ]
        def count(node: Any) -> int:
            return 1 + sum(count(child) for child in node.children)

        assert count(session_tree(journal, biggest)) == len(tree), "the tree read is not the subtree"
        print(f"{'what':<44} {'zagent ms':>10} {'raw ms':>9} {'ratio':>7}")
        for what, (ours, raw) in rows:
            print(f"{what:<44} {ours:>10.2f} {raw:>9.2f} {ours / raw:>6.2f}x")


if __name__ == "__main__":
    main()
