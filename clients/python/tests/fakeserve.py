"""A fake `kbench serve` for the client's tests: the routes of harness/src/serve/openapi.json on
a real HTTP server (127.0.0.1, a free port), with canned verdicts and injectable failures.

A source's verdict comes from its `# verdict:` line: `ok 2.5` (correct, speedup 2.5), `ok`
(correct, untimed), `mismatch`, `flagged` (correct and fast, but an integrity check failed it)
or `never` (stays queued). Each evaluation takes `finish_after` seconds; a source already
evaluated for the same problem is answered at once from the cache (`cached: true`).
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "secret"
PROBLEMS = [{"id": "smoke/L1/1", "level": 1, "name": "matmul"},
            {"id": "smoke/L1/2", "level": 1, "name": "relu"}]


def _verdict(source: str):
    m = re.search(r"# verdict: (\w+)(?: ([\d.]+))?", source)
    kind, speedup = (m.group(1), m.group(2)) if m else ("ok", "1.0")
    if kind == "never":
        return None
    if kind == "ok":
        return {"outcome": "ok", "correct": True, "flagged": False, "flags": [],
                "speedup": float(speedup) if speedup else None, "message": None}
    if kind == "flagged":
        return {"outcome": "ok", "correct": True, "flagged": True, "flags": ["forged_clock"],
                "speedup": 40.0, "message": "the kernel's clock disagrees with the harness's"}
    return {"outcome": kind, "correct": False, "flagged": False, "flags": [], "speedup": None,
            "message": "output 0 differs at [3, 1]"}


class FakeService:
    def __init__(self, finish_after: float = 0.1, leaderboard: bool = False) -> None:
        self.finish_after = finish_after
        self.leaderboard = leaderboard
        self.lock = threading.Lock()
        self.subs = {}  # id -> the Submission JSON, plus a private "_done_at"
        self.cache = {}  # (problem, source) -> verdict
        self.evaluations = 0
        self.requests = []  # (method, path, query, body, headers)
        self.script = []  # [method, path, action]: the next matching request gets the action
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def inject(self, method: str, path: str, *actions) -> None:
        """The next requests `method path` get `actions`, one each: a status (int), `(status,
        headers)`, `(status, headers, raw body)`, "drop" (close without an answer) or ("sleep",
        s) (answer normally after s seconds)."""
        with self.lock:
            self.script.extend([method, path, a] for a in actions)

    def calls(self, method: str, path: str) -> list:
        with self.lock:
            return [r for r in self.requests if r[0] == method and r[1] == path]

    # -- the service's state ------------------------------------------------------------

    def _refresh(self, s: dict) -> dict:
        now = time.time()
        if s["state"] != "done" and s["_verdict"] is not None:
            if now >= s["_done_at"]:
                s.update(state="done", verdict=s["_verdict"], finished_unix_s=now,
                         record={"problem": s["problem"], "outcome": s["_verdict"]["outcome"],
                                 "signature": "ed25519:fake"})
                self.cache[(s["problem"], s["_source"])] = s["_verdict"]
                self.evaluations += 1
            elif now >= s["_done_at"] - self.finish_after / 2:
                s["state"] = "running"
        return {k: v for k, v in s.items() if not k.startswith("_")}

    def submit(self, items: list) -> list:
        ids = []
        with self.lock:
            for it in items:
                seq = len(self.subs) + 1
                now = time.time()
                key = (it["problem"], it["source"])
                cached = key in self.cache and not it.get("remeasure", False)
                verdict = self.cache[key] if cached else _verdict(it["source"])
                s = {"id": f"sub-{seq:05d}", "seq": seq, "problem": it["problem"],
                     "label": it.get("label"), "state": "queued", "cached": cached,
                     "ranked": it.get("ranked", False), "submitted_unix_s": now,
                     "finished_unix_s": None, "verdict": None, "ranked_verdict": None,
                     "record": None, "_source": it["source"], "_verdict": verdict,
                     "_done_at": now if cached else now + self.finish_after,
                     "extra_field_from_a_newer_server": {"ignored": True}}
                if cached:
                    s.update(state="done", verdict=verdict, finished_unix_s=now,
                             record={"problem": it["problem"], "cached": True})
                self.subs[s["id"]] = s
                ids.append(s["id"])
        return ids

    def view(self, ids: list, wait: float) -> list:
        deadline = time.time() + wait
        while True:
            with self.lock:
                out = [self._refresh(self.subs[i]) for i in ids]
            if all(s["state"] == "done" for s in out) or time.time() >= deadline:
                return out
            time.sleep(0.02)


def _handler(svc: FakeService):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _send(self, status: int, obj=None, headers=None, raw=None, ctype="application/json"):
            body = raw if raw is not None else json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, code: str, message: str, headers=None) -> None:
            self._send(status, {"error": {"code": code, "message": message}}, headers)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def _serve(self, method: str) -> None:
            url = urllib.parse.urlsplit(self.path)
            path, query = url.path, dict(urllib.parse.parse_qsl(url.query))
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else None
            with svc.lock:
                svc.requests.append((method, path, query, body, dict(self.headers)))
                action = None
                for i, (m, p, a) in enumerate(svc.script):
                    if m == method and p == path:
                        action = svc.script.pop(i)[2]
                        break
            if action == "drop":
                self.close_connection = True
                return
            if isinstance(action, tuple) and action[0] == "sleep":
                time.sleep(action[1])
            elif isinstance(action, int):
                return self._error(action, "injected", f"injected {action}")
            elif isinstance(action, tuple):
                status, headers, *raw = action
                if raw:
                    return self._send(status, headers=headers, raw=raw[0])
                return self._error(status, "injected", f"injected {status}", headers)
            try:
                self._route(method, path, query, body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _route(self, method, path, query, body) -> None:
            if (method, path) == ("GET", "/v1/health"):
                with svc.lock:
                    queued = sum(s["state"] != "done" for s in svc.subs.values())
                return self._send(200, {"status": "ok", "version": "0.0-fake",
                                        "queued": queued, "running": 0})
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._error(401, "unauthorized", "a bearer token is required")
            if (method, path) == ("POST", "/v1/submissions"):
                return self._post(body)
            if method == "GET" and path == "/v1/submissions":
                return self._list(query)
            if method == "GET" and path.startswith("/v1/submissions/"):
                sid = urllib.parse.unquote(path[len("/v1/submissions/"):])
                if sid not in svc.subs:
                    return self._error(404, "not_found", f"no submission {sid}")
                return self._send(200, svc.view([sid], float(query.get("wait", 0)))[0])
            if (method, path) == ("GET", "/v1/problems"):
                return self._send(200, {"problems": PROBLEMS})
            if (method, path) == ("GET", "/v1/export"):
                return self._export(query.get("format", "jsonl"))
            if (method, path) == ("GET", "/v1/leaderboard") and svc.leaderboard:
                return self._send(200, {"problems": [p["id"] for p in PROBLEMS], "entries": [
                    {"client": "alice", "problem": "smoke/L1/1", "submission": "sub-00001",
                     "label": None, "speedup": 3.5, "note": "an unknown field"}]})
            self._error(404, "not_found", f"no route {method} {path}")

        def _post(self, body) -> None:
            if self.headers.get("Content-Type") != "application/json":
                return self._error(415, "unsupported_media_type", "send application/json")
            try:
                req = json.loads(body)
            except (TypeError, ValueError):
                return self._error(400, "bad_json", "the body is not JSON")
            items = req.get("submissions") if isinstance(req, dict) else None
            if set(req) != {"submissions"} or not isinstance(items, list):
                return self._error(400, "bad_request", "expected {\"submissions\": [...]}")
            if not 1 <= len(items) <= 256:
                return self._error(400, "batch_size", f"{len(items)} submissions: 1..256")
            allowed = {"problem", "source", "label", "remeasure", "ranked"}
            for it in items:
                if not isinstance(it, dict) or not set(it) <= allowed or \
                        not isinstance(it.get("problem"), str) or \
                        not isinstance(it.get("source"), str):
                    return self._error(400, "bad_submission", f"bad submission {it!r:.80}")
                if it["problem"] not in {p["id"] for p in PROBLEMS}:
                    return self._error(422, "unknown_problem", f"no problem {it['problem']}")
            self._send(202, {"ids": svc.submit(items)})

        def _list(self, query) -> None:
            wait = float(query.get("wait", 0))
            if not 0 <= wait <= 60:
                return self._error(400, "bad_wait", "wait is 0..60")
            if "ids" in query:
                ids = query["ids"].split(",")
                if len(ids) > 256:
                    return self._error(400, "too_many_ids", "at most 256 ids")
                unknown = [i for i in ids if i not in svc.subs]
                if unknown:
                    return self._error(404, "not_found", f"no submission {unknown[0]}")
                return self._send(200, {"submissions": svc.view(ids, wait)})
            with svc.lock:
                subs = [svc._refresh(s) for s in svc.subs.values()]
            after, limit = int(query.get("after", 0)), int(query.get("limit", 100))
            subs = [s for s in subs if s["seq"] > after
                    and query.get("problem", s["problem"]) == s["problem"]
                    and query.get("state", s["state"]) == s["state"]]
            self._send(200, {"submissions": subs[:limit]})

        def _export(self, fmt: str) -> None:
            with svc.lock:
                done = [svc._refresh(s) for s in svc.subs.values()]
            done = [s for s in done if s["state"] == "done" and not s["cached"]]
            if fmt == "jsonl":
                text = "".join(json.dumps(s["record"]) + "\n" for s in done)
                return self._send(200, raw=text.encode(), ctype="application/x-ndjson")
            if fmt == "csv":
                text = "id,outcome\n" + "".join(f"{s['id']},{s['verdict']['outcome']}\n"
                                                for s in done)
                return self._send(200, raw=text.encode(), ctype="text/csv")
            if fmt == "markdown":
                return self._send(200, raw=b"| id |\n| --- |\n", ctype="text/markdown")
            self._error(400, "bad_format", f"no format {fmt}")

    return Handler
