"""The console's list of sessions with its cost column, on a big journal (issue 28).

Builds a journal with ``journal_scale.py``'s generator (default 1,000,000 events, about
10,000 sessions, the most recently active of them ``--long`` sessions of ``--long-events`` events
each, so the first page holds sessions a thousand turns long), with the snapshots the engine
leaves, and a catalog that prices its model. Then times, in this process, the first page
(:data:`zagent_cli.ui.listing.PAGE_SIZE` rows):

* without a catalog (no cost column: what the list cost before it);
* with costs, first shown (every session's replies tallied: the console just started);
* with costs, shown again (the tallies kept: nothing read for a session that did not move);
* with costs, after one more reply appended to each long session (only those events read).

Medians of ``-n`` rounds, each running the four in turn; the first-shown case gets a fresh
:class:`Tallies` each round.

    $PY bench/ui_list.py [--events N] [--long K] [--long-events E] [-n RUNS]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import journal_scale  # noqa: E402  (the generator: bench/journal_scale.py)


def ms(fn: Callable[[], Any]) -> float:
    return float(journal_scale.ms(fn)[0])


def main() -> None:
    from zagent_cli.ui.listing import PAGE_SIZE, Pricing, Tallies, sessions_page
    from zagent_core.config import CatalogModel
    from zagent_core.journal.events import ModelReplied
    from zagent_store import SQLiteJournal

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--long", type=int, default=10, help="long sessions on the first page")
    parser.add_argument("--long-events", type=int, default=10_000, help="events of each long session")
    parser.add_argument("-n", "--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "journal.db"
        start = time.perf_counter()
        built = journal_scale.build(path, args.events, 1130, extra=[(args.long_events, "idle")] * args.long)
        journal_scale.snapshot_sessions(path, built["session_ids"])
        print(f"built {built['events']:,} events, {built['sessions']:,} sessions ({args.long} of "
              f"{args.long_events:,} events) in {time.perf_counter() - start:.0f} s")
        entry = CatalogModel(id="mini", spec="openai:gpt-4.1-mini", price_in=0.4, price_out=1.6)
        prices = {entry.spec: entry, "gpt-4.1-mini": entry}
        with SQLiteJournal(path) as journal:

            def one_more_reply() -> None:
                for sid in built["extra_ids"]:
                    journal.append(sid, [ModelReplied(model="gpt-4.1-mini", text="more", stop_reason="stop",
                                                      input_tokens=10, output_tokens=2)], journal.head(sid))

            one_more_reply()  # the long sessions, written first, are now the most recently active
            kept = Tallies()
            first = sessions_page(journal, pricing=Pricing(prices, kept))
            assert len(first.rows) == PAGE_SIZE and all(row.spend and row.spend.usd for row in first.rows)
            shown = set(row.session_id for row in first.rows)
            print(f"first page: {len(first.rows)} rows, {len(shown & set(built['extra_ids']))} of them long")
            # Rounds alternate the four cases, so a busy moment of a shared machine falls on all of them.
            times: dict[str, list[float]] = {"plain": [], "cold": [], "warm": [], "moved": []}
            for _ in range(args.runs):
                times["plain"].append(ms(lambda: sessions_page(journal)))
                times["cold"].append(ms(lambda: sessions_page(journal, pricing=Pricing(prices, Tallies()))))
                times["warm"].append(ms(lambda: sessions_page(journal, pricing=Pricing(prices, kept))))
                one_more_reply()
                times["moved"].append(ms(lambda: sessions_page(journal, pricing=Pricing(prices, kept))))
    plain, cold, warm, moved = (statistics.median(times[case]) for case in ("plain", "cold", "warm", "moved"))
    print(f"| first page, no catalog (no costs) | {plain:.0f} ms |")
    print(f"| first page with costs, first shown | {cold:.0f} ms |")
    print(f"| first page with costs, shown again | {warm:.0f} ms |")
    print(f"| first page with costs, {args.long} long sessions moved on | {moved:.0f} ms |")


if __name__ == "__main__":
    main()
