"""slow_count: count to n with a delay, posting progress to $ZAGENT_NOTIFY_FILE (stdin_json in, text out)."""
import json
import os
import sys
import time


def fail(msg):
    print(msg, file=sys.stderr)
    return 2


def note(path, line):
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError:
        pass  # progress notes are best-effort; never fail the count because of them


def main():
    raw = sys.stdin.read()
    try:
        args = json.loads(raw)
    except json.JSONDecodeError as e:
        return fail(f"arguments are not valid JSON ({e}); send an object like {{\"n\": 5}}")
    if not isinstance(args, dict):
        return fail("arguments must be a JSON object like {\"n\": 5, \"delay\": 0.2}")
    n = args.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 20:
        return fail(f"\"n\" must be an integer from 1 to 20 (got {n!r})")
    delay = args.get("delay", 0.2)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay <= 2:
        return fail(f"\"delay\" must be a number of seconds from 0 to 2 (got {delay!r}); omit it for 0.2")

    notify = os.environ.get("ZAGENT_NOTIFY_FILE")
    for i in range(1, n + 1):
        print(i, flush=True)
        note(notify, f"{i}/{n} counted")
        if i < n and delay:
            time.sleep(delay)
    print(f"Done: counted to {n}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
