"""The program's entry (``zagent``, ``python -m zagent_cli``).

Loading the CLI (click and the command modules) takes a moment. A Ctrl-C in it is the
user's "stop", said as every command says it (one line, exit 130), never a
``KeyboardInterrupt`` traceback; so this module imports next to nothing before its guard.
"""

from __future__ import annotations

from zagent_cli.stop import exit_stopped


def main() -> None:
    try:
        from zagent_cli.main import main as run_cli
    except KeyboardInterrupt:
        exit_stopped("[stopped]")
    run_cli()
