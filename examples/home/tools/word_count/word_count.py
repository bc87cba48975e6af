"""word_count: count words and list the most frequent ones (stdin_json in, json out)."""
import json
import re
import sys
from collections import Counter

WORD = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*")


def reply(output, is_error=False):
    sys.stdout.write(json.dumps({"output": output, "is_error": is_error}) + "\n")
    return 0


def main():
    raw = sys.stdin.read()
    try:
        args = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as e:
        return reply(f"arguments are not valid JSON ({e}); send an object like {{\"text\": \"...\"}}", True)
    if not isinstance(args, dict):
        return reply("arguments must be a JSON object like {\"text\": \"...\", \"top\": 5}", True)
    text = args.get("text")
    if not isinstance(text, str):
        return reply("missing or non-string \"text\"; pass the text to analyse as a string", True)
    top = args.get("top", 5)
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        return reply(f"\"top\" must be an integer >= 1 (got {top!r}); omit it for the default of 5", True)

    words = [w.lower() for w in WORD.findall(text)]
    if not words:
        return reply("The text contains no words (0 words, %d characters)." % len(text))
    counts = Counter(words)
    common = counts.most_common(top)
    width = max(len(w) for w, _ in common)
    lines = [
        f"{len(words)} words, {len(counts)} distinct, {len(text)} characters.",
        f"Top {len(common)} word{'s' if len(common) != 1 else ''}:",
    ]
    for i, (w, n) in enumerate(common, 1):
        lines.append(f"{i:>3}. {w.ljust(width)}  {n}")
    return reply("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
