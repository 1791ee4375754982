#!/usr/bin/env python3
"""A stand-in `kbench` for testing the serve benchmark without a GPU, torch or a built kbench
(Python 3 standard library). It fakes only what the benchmark uses of `kbench serve`, after
harness/src/serve/openapi.json: `--version`, `serve --new-token NAME`, and `serve ... --listen
ADDR --tokens FILE` answering /v1/health, /v1/problems, POST and GET /v1/submissions (ids,
wait), GET /v1/submissions/{id}, /metrics, with a verdict cache keyed by (problem, source).
One evaluator thread "evaluates" each submission in FAKE_EVAL_S seconds (default 0.05): `ok`,
speedup 1.0, when the source defines ModelNew, else `compile_error`. FAKE_429_EVERY=N answers
every Nth POST with 429 and Retry-After: 1. SIGTERM stops it. Nothing here measures kbench."""

import hashlib
import json
import os
import re
import secrets
import signal
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

VERSION = "0.0-stand-in"


def opt(argv, name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default


def read_tokens(path):
    """{sha256: name} from a tokens file's [[client]] entries (name and token_sha256 only)."""
    out, name = {}, None
    for line in Path(path).read_text().splitlines():
        m = re.match(r'\s*name\s*=\s*"([^"]*)"', line)
        if m:
            name = m.group(1)
        m = re.match(r'\s*token_sha256\s*=\s*"([0-9a-f]{64})"', line)
        if m:
            out[m.group(1)] = name
    return out


def problems_of(argv):
    kb = opt(argv, "--kernelbench")
    levels = [int(x) for x in opt(argv, "--levels", "1,2,3").split(",")]
    out = []
    for level in levels:
        for d in (Path(kb) / "KernelBench" / f"level{level}", Path(kb) / f"level{level}"):
            if d.is_dir():
                for p in sorted(d.glob("*.py")):
                    m = re.match(r"(\d+)_(.+)\.py$", p.name)
                    if m:
                        out.append({"id": f"kernelbench/L{level}/{int(m.group(1))}", "level": level, "name": m.group(2)})
                break
    return out


class State:
    def __init__(self, problems, tokens):
        self.problems = {p["id"] for p in problems}
        self.problem_list = problems
        self.tokens = tokens
        self.subs = {}  # id -> submission (plus "_client", "_source", "_remeasure")
        self.queue = []
        self.cache = {}
        self.cond = threading.Condition()
        self.seq = 0
        self.posts = 0
        self.evaluations = 0
        self.cache_hits = 0
        self.busy_s = 0.0
        self.started = time.time()
        self.api_lat = []

    def public(self, s):
        return {k: v for k, v in s.items() if not k.startswith("_")}


def evaluator(st, eval_s):
    while True:
        with st.cond:
            while not st.queue:
                st.cond.wait()
            sid = st.queue.pop(0)
            s = st.subs[sid]
            s["state"] = "running"
        t0 = time.time()
        time.sleep(eval_s)
        ok = "class ModelNew" in s["_source"]
        verdict = {
            "outcome": "ok" if ok else "compile_error",
            "correct": ok,
            "speedup": 1.0 if ok else None,
            "flagged": False,
            "flags": [],
            "message": None if ok else "no ModelNew",
        }
        with st.cond:
            st.busy_s += time.time() - t0
            st.evaluations += 1
            s.update(state="done", verdict=verdict, finished_unix_s=time.time())
            st.cache[(s["problem"], s["_source"])] = verdict
            st.cond.notify_all()


def handler(st):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            sys.stderr.write("stand-in serve: " + fmt % args + "\n")

        def send(self, code, body, ctype="application/json", headers=None):
            data = (json.dumps(body) if ctype == "application/json" else body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def error(self, code, kind, msg, headers=None):
            self.send(code, {"error": {"code": kind, "message": msg}}, headers=headers)

        def client(self):
            auth = self.headers.get("Authorization", "")
            if not auth.startswith("Bearer "):
                return None
            return st.tokens.get(hashlib.sha256(auth[7:].encode()).hexdigest())

        def wait_done(self, ids, wait):
            end = time.time() + min(float(wait or 0), 60.0)
            with st.cond:
                while any(st.subs[i]["state"] != "done" for i in ids) and time.time() < end:
                    st.cond.wait(max(0.0, end - time.time()))
                return [st.public(st.subs[i]) for i in ids]

        def do_GET(self):
            t0 = time.time()
            u = urllib.parse.urlparse(self.path)
            q = dict(urllib.parse.parse_qsl(u.query))
            if u.path == "/v1/health":
                with st.cond:
                    queued = sum(s["state"] == "queued" for s in st.subs.values())
                    running = sum(s["state"] == "running" for s in st.subs.values())
                return self.send(200, {"status": "ok", "version": VERSION, "queued": queued, "running": running})
            if u.path == "/metrics":
                with st.cond:
                    states = {k: sum(s["state"] == k for s in st.subs.values()) for k in ("queued", "running", "done")}
                    up = time.time() - st.started
                    lines = [f"kbench_serve_queue_depth {states['queued']}"]
                    lines += [f'kbench_serve_submissions{{state="{k}"}} {v}' for k, v in states.items()]
                    lines += [f"kbench_serve_evaluations_total {st.evaluations}", f"kbench_serve_cache_hits_total {st.cache_hits}",
                              f'kbench_serve_gpu_busy_ratio{{gpu="0"}} {st.busy_s / up if up > 0 else 0}']
                    lat = sorted(st.api_lat) or [0.0]
                    lines += [f'kbench_serve_api_latency_seconds{{quantile="{q_}"}} {lat[min(len(lat) - 1, int(q_ * len(lat)))]}' for q_ in (0.5, 0.9, 0.99)]
                return self.send(200, "\n".join(lines) + "\n", "text/plain; version=0.0.4")
            who = self.client()
            if who is None:
                return self.error(401, "unauthorized", "a Bearer token is needed")
            if u.path == "/v1/problems":
                return self.send(200, {"problems": st.problem_list})
            if u.path == "/v1/submissions" and "ids" in q:
                ids = [i for i in q["ids"].split(",") if i]
                with st.cond:
                    ids = [i for i in ids if i in st.subs and st.subs[i]["_client"] == who]
                out = self.wait_done(ids, q.get("wait"))
                st.api_lat.append(time.time() - t0)
                return self.send(200, {"submissions": out})
            m = re.fullmatch(r"/v1/submissions/([^/]+)", u.path)
            if m:
                sid = m.group(1)
                with st.cond:
                    if sid not in st.subs or st.subs[sid]["_client"] != who:
                        return self.error(404, "not_found", "no such submission")
                out = self.wait_done([sid], q.get("wait"))[0]
                st.api_lat.append(time.time() - t0)
                return self.send(200, out)
            return self.error(404, "not_found", "no such route")

        def do_POST(self):
            t0 = time.time()
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n)
            who = self.client()
            if who is None:
                return self.error(401, "unauthorized", "a Bearer token is needed")
            if urllib.parse.urlparse(self.path).path != "/v1/submissions":
                return self.error(404, "not_found", "no such route")
            every = int(os.environ.get("FAKE_429_EVERY") or 0)
            with st.cond:
                st.posts += 1
                refuse = every and st.posts % every == 0
            if refuse:
                return self.error(429, "rate_limited", "over submissions_per_minute", {"Retry-After": "1"})
            try:
                req = json.loads(body)
                items = req["submissions"]
                assert isinstance(items, list) and 1 <= len(items) <= 256
            except Exception:
                return self.error(400, "bad_request", "expected {\"submissions\": [...]} of 1 to 256")
            ids = []
            with st.cond:
                for it in items:
                    if it.get("problem") not in st.problems:
                        return self.error(422, "unknown_problem", f"no problem {it.get('problem')!r}")
                for it in items:
                    st.seq += 1
                    sid = f"s{st.seq:06d}-{secrets.token_hex(3)}"
                    now = time.time()
                    s = {"id": sid, "seq": st.seq, "problem": it["problem"], "label": it.get("label"), "state": "queued",
                         "cached": False, "ranked": bool(it.get("ranked")), "submitted_unix_s": now, "finished_unix_s": None,
                         "verdict": None, "ranked_verdict": None, "record": None,
                         "_client": who, "_source": it["source"]}
                    hit = st.cache.get((it["problem"], it["source"]))
                    if hit and not it.get("remeasure"):
                        s.update(state="done", cached=True, verdict=hit, finished_unix_s=now)
                        st.cache_hits += 1
                    else:
                        st.queue.append(sid)
                    st.subs[sid] = s
                    ids.append(sid)
                st.cond.notify_all()
            st.api_lat.append(time.time() - t0)
            return self.send(202, {"ids": ids})

    return H


def serve(argv):
    if "--new-token" in argv:
        name = opt(argv, "--new-token")
        tok = "kbs_" + secrets.token_urlsafe(24)
        print(f"token for {name} (shown once; the tokens file keeps only its hash): {tok}")
        print("\nadd to the tokens file:\n")
        print(f'[[client]]\nname = "{name}"\ntoken_sha256 = "{hashlib.sha256(tok.encode()).hexdigest()}"')
        return 0
    host, port = opt(argv, "--listen", "127.0.0.1:8470").rsplit(":", 1)
    st = State(problems_of(argv), read_tokens(opt(argv, "--tokens")))
    Path(opt(argv, "--out", "serve-run")).mkdir(parents=True, exist_ok=True)
    threading.Thread(target=evaluator, args=(st, float(os.environ.get("FAKE_EVAL_S", "0.05"))), daemon=True).start()
    httpd = ThreadingHTTPServer((host, int(port)), handler(st))
    httpd.daemon_threads = True

    def stop(*_):
        sys.stderr.write("stand-in serve: SIGTERM, stopping\n")
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    sys.stderr.write(f"stand-in serve: {len(st.problems)} problems, listening on {host}:{port}\n")
    httpd.serve_forever()
    return 0


def main(argv):
    if argv[:1] in (["--version"], ["-V"]):
        print(f"kbench {VERSION}")
        return 0
    if argv[:1] == ["serve"]:
        return serve(argv[1:])
    sys.stderr.write(f"stand-in kbench: only --version and serve, not {argv[:1]}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
