"""A background tool: progress notes while it works, a report file and a JSON result at the end."""

import json
import os
import sys
import time


def note(text, wake=False):
    with open(os.environ["ZAGENT_NOTIFY_FILE"], "a", encoding="utf-8") as notify:
        notify.write(json.dumps({"text": text, "wake": wake}) + "\n")


args = json.load(sys.stdin)
topic, seconds = args["topic"], int(args.get("seconds", 6))
for second in range(1, seconds + 1):
    time.sleep(1)
    note(f"{topic}: {second}/{seconds} s of work done")

report = os.path.join(os.environ["ZAGENT_OUTPUT_DIR"], "report.md")
with open(report, "w", encoding="utf-8") as handle:
    handle.write(f"# Report on {topic}\n\nIt took {seconds} seconds of careful work.\n")
print(json.dumps({"output": f"report on {topic} written to {report}"}))
