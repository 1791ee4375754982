"""Where each record's time went, one problem per block: its phases, every case's times
(reference, candidate, judge) and the candidate's wall, the timing summary's scalars and
the notes. Used by the profiling and integrity suites: python3 tests/gpu/case_times.py RECORDS.jsonl"""

import json
import sys

for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["problem"]["name"], r["outcome"]["kind"], "wall", round(r["wall_s"], 1),
          {k: round(v, 2) for k, v in (r.get("phases") or {}).items()})
    for c in r["cases"]:
        t = c.get("times") or {}
        print("  ", c["case"]["family"], c["case"]["index"], "n/a" if c.get("not_applicable") else "",
              {k: round(v, 3) for k, v in t.items()}, "cand", round(c["wall_s"], 3))
    tm = r.get("timing") or {}
    print("   timing:", {k: v for k, v in tm.items() if not isinstance(v, (list, dict))})
    for n in r.get("notes", []):
        print("   note:", n[:240])
