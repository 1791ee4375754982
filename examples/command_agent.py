#!/usr/bin/env python3
"""A minimal kbench command agent (protocol: README, "The command agent").

kbench starts it with the task as one JSON line on stdin. It answers with requests as JSON
lines on stdout and reads one JSON answer line per request. This agent needs no model: it
proposes the problem's own code with Model renamed to ModelNew, asks kbench to compile,
check and time it, and submits it. Replace `propose` with calls to your own model, and use
the answers (`log`, `report`, `speedup`) to decide what to try next.

Run it: kbench run --suite smoke --agent command --command "python3 examples/command_agent.py" --out runs/cmd
"""
import json
import re
import sys


def send(req):
    sys.stdout.write(json.dumps(req) + "\n")
    sys.stdout.flush()
    line = sys.stdin.readline()
    if not line:
        sys.exit("kbench closed the channel")
    return json.loads(line)


def propose(problem_source):
    # Rename the reference class to ModelNew (whole identifier only).
    return re.sub(r"\bModel\b", "ModelNew", problem_source)


def main():
    task = json.loads(sys.stdin.readline())
    source = propose(task["problem"]["source"])
    for tool in ("compile", "check", "time"):
        answer = send({"type": tool, "source": source})
        print(f"{tool}: {answer.get('outcome')} speedup={answer.get('speedup')}", file=sys.stderr)
        if not answer.get("compiled", False):
            break
    done = send({"type": "submit", "source": source})
    print(f"submitted: correct={done.get('correct')} speedup={done.get('speedup')}", file=sys.stderr)


if __name__ == "__main__":
    main()
