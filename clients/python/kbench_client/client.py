"""The HTTP client of `kbench serve`.

Standard library only (urllib, json): RL training images install this package with nothing
else, so it must not pull in requests, httpx or aiohttp. Each request opens its own
connection; proxies come from the environment (`http_proxy`, `no_proxy`) as urllib reads them.

Retries. A request is tried again, after an exponential backoff with full jitter
(`uniform(0, min(max_backoff, backoff * 2**attempt))`), up to `retries` times, when:

- no answer came back: connection refused or reset, the socket timed out, the connection
  closed before a full response;
- the answer was 429 or 503: the server did not take the request. Its `Retry-After` (seconds)
  is waited instead of the backoff, capped by `max_backoff`;
- a GET was answered 502 or 504 (a proxy in front of the service).

Every other 4xx is final at once. A POST is retried only without an answer or on 429/503: a
POST whose answer was lost on the way back may have been queued, so its retry can submit the
same kernel twice. That costs little: the server's verdict cache answers the second copy with
the first one's verdict (`cached: true`) instead of measuring again.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from . import __version__
from .errors import (AuthError, BadResponse, Busy, KbenchError, NotFound, RateLimited, Timeout,
                     Unreachable)
from .models import Board, Health, NewSubmission, Problem, Submission

MAX_BATCH = 256  # submissions in one POST, ids in one GET (the contract's maxItems)
MAX_WAIT = 60.0  # seconds one long poll may wait
EXPORT_FORMATS = ("jsonl", "csv", "markdown")

Item = Union[NewSubmission, Dict[str, Any]]


def _chunks(seq: Sequence, n: int) -> Iterator[Sequence]:
    for i in range(0, len(seq), n):
        yield seq[i:i + n]


def _seconds(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.3f}"


def _retry_after(value: Optional[str]) -> Optional[float]:
    """`Retry-After` as seconds: a number, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def _error(status: int, body: bytes, retry_after: Optional[float]) -> KbenchError:
    """The exception for an error answer, from its `{"error": {"code", "message"}}`."""
    code, message = f"http_{status}", body.decode("utf-8", "replace").strip()[:500]
    try:
        err = json.loads(body)["error"]
        code, message = str(err["code"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        pass
    if status in (401, 403):
        return AuthError(message, status=status, code=code)
    if status == 404:
        return NotFound(message, status=status, code=code)
    if status == 429:
        return RateLimited(message, status=status, code=code, retry_after=retry_after)
    if status == 503:
        return Busy(message, status=status, code=code, retry_after=retry_after)
    return KbenchError(message, status=status, code=code)


def _item(x: Item) -> NewSubmission:
    if isinstance(x, NewSubmission):
        return x
    if isinstance(x, dict):
        return NewSubmission(**x)  # an unknown key is a TypeError here, not a 400 later
    raise TypeError(f"a submission is a NewSubmission or a dict, not {type(x).__name__}")


class Client:
    """A client of one `kbench serve` at `base_url` (e.g. http://127.0.0.1:8470), holding the
    bearer `token` (None is enough for `health()` alone). `timeout` is the socket timeout of a
    request, beyond the long-poll wait it asks for."""

    def __init__(self, base_url: str, token: Optional[str], *, timeout: float = 30.0,
                 retries: int = 6, backoff: float = 0.5, max_backoff: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._opener = urllib.request.build_opener()
        self._random = random.Random()

    def __repr__(self) -> str:
        return f"Client({self.base_url!r})"

    # -- transport -----------------------------------------------------------------------

    def _delay(self, attempt: int, retry_after: Optional[float]) -> float:
        if retry_after is not None:
            return min(self.max_backoff, retry_after)
        return self._random.uniform(0, min(self.max_backoff, self.backoff * 2 ** attempt))

    def _request(self, method: str, path: str, query: Optional[Dict[str, Any]] = None,
                 body: Any = None, *, auth: bool = True, wait: float = 0.0,
                 accept: str = "application/json") -> bytes:
        """The body of a 2xx answer to `method path?query`, retrying as the module says."""
        query = {k: v for k, v in (query or {}).items() if v is not None}
        url = self.base_url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Accept": accept, "User-Agent": f"kbench-client/{__version__}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if auth and self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        attempt = 0
        while True:
            request = urllib.request.Request(url, data=data, headers=headers, method=method)
            try:
                with self._opener.open(request, timeout=self.timeout + wait) as response:
                    return response.read()
            except urllib.error.HTTPError as e:
                try:
                    payload = e.read()
                except (OSError, http.client.HTTPException):
                    payload = b""
                finally:
                    e.close()
                retry_after = _retry_after(e.headers.get("Retry-After") if e.headers else None)
                err = _error(e.code, payload, retry_after)
                retry = e.code in (429, 503) or (method == "GET" and e.code in (502, 504))
                if not retry or attempt >= self.retries:
                    raise err from None
                delay = self._delay(attempt, retry_after)
            except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
                # No (full) answer: refused, reset, closed early, or the socket timed out.
                if attempt >= self.retries:
                    reason = getattr(e, "reason", None) or e
                    raise Unreachable(f"{method} {self.base_url}{path}: no answer after "
                                      f"{attempt + 1} tries: {reason!r}",
                                      code="unreachable") from e
                delay = self._delay(attempt, None)
            time.sleep(delay)
            attempt += 1

    def _json(self, method: str, path: str, query: Optional[Dict[str, Any]] = None,
              body: Any = None, **kw: Any) -> Any:
        raw = self._request(method, path, query, body, **kw)
        try:
            return json.loads(raw)
        except ValueError:
            raise BadResponse(f"{method} {path}: the answer is not JSON: {raw[:200]!r}") from None

    # -- the API -------------------------------------------------------------------------

    def health(self) -> Health:
        return Health.from_json(self._json("GET", "/v1/health", auth=False))

    def problems(self) -> List[Problem]:
        obj = self._json("GET", "/v1/problems")
        if not isinstance(obj, dict) or not isinstance(obj.get("problems"), list):
            raise BadResponse("/v1/problems: no list 'problems'")
        return [Problem.from_json(p) for p in obj["problems"]]

    def submit(self, problem: str, source: str, *, label: Optional[str] = None,
               remeasure: bool = False, ranked: bool = False) -> str:
        """Submit one kernel; its id."""
        return self.submit_many([NewSubmission(problem, source, label, remeasure, ranked)])[0]

    def submit_many(self, items: Iterable[Item]) -> List[str]:
        """Submit kernels (NewSubmission or dicts of its fields), 256 to a request; their ids
        in the order given."""
        subs = [_item(x).to_json() for x in items]
        ids: List[str] = []
        for chunk in _chunks(subs, MAX_BATCH):
            obj = self._json("POST", "/v1/submissions", body={"submissions": list(chunk)})
            got = obj.get("ids") if isinstance(obj, dict) else None
            if (not isinstance(got, list) or len(got) != len(chunk)
                    or not all(isinstance(i, str) for i in got)):
                raise BadResponse(f"POST /v1/submissions: expected {len(chunk)} ids, got {obj!r:.200}")
            ids.extend(got)
        return ids

    def get(self, id: str, wait: float = 0) -> Submission:
        """One submission; with `wait` (at most 60 s), the server holds the answer until it is
        done or `wait` passes."""
        if not 0 <= wait <= MAX_WAIT:
            raise ValueError(f"wait must be within 0..{MAX_WAIT:g} s, not {wait}")
        path = "/v1/submissions/" + urllib.parse.quote(id, safe="")
        query = {"wait": _seconds(wait)} if wait else None
        return Submission.from_json(self._json("GET", path, query, wait=wait))

    def _get_ids(self, ids: Sequence[str], wait: float) -> List[Submission]:
        query = {"ids": ",".join(ids), "wait": _seconds(wait) if wait else None}
        return self._page(self._json("GET", "/v1/submissions", query, wait=wait))

    @staticmethod
    def _page(obj: Any) -> List[Submission]:
        if not isinstance(obj, dict) or not isinstance(obj.get("submissions"), list):
            raise BadResponse("GET /v1/submissions: no list 'submissions'")
        return [Submission.from_json(s) for s in obj["submissions"]]

    def wait(self, ids: Sequence[str], timeout: float = 600, poll: float = 30) -> List[Submission]:
        """Long-poll until every submission of `ids` is done; them, in the order of `ids`.
        Raises `Timeout` (with the unfinished ids) when `timeout` seconds pass first."""
        ids = list(ids)
        deadline = time.monotonic() + timeout
        latest: Dict[str, Submission] = {}
        pending = list(dict.fromkeys(ids))
        while pending:
            started = time.monotonic()
            for chunk in _chunks(pending, MAX_BATCH):
                left = max(0.0, deadline - time.monotonic())
                for s in self._get_ids(chunk, min(poll, MAX_WAIT, left)):
                    latest[s.id] = s
                missing = [i for i in chunk if i not in latest]
                if missing:
                    raise NotFound(f"the server did not return submission(s) {missing[:5]}",
                                   code="not_returned")
            pending = [i for i in pending if not latest[i].done]
            now = time.monotonic()
            if pending and now >= deadline:
                raise Timeout(f"{len(pending)} of {len(set(ids))} submissions not done after "
                              f"{timeout:g} s", unfinished=pending,
                              submissions=[latest[i] for i in ids])
            if pending and now - started < 1.0:
                # The server answered at once with work left: don't spin.
                time.sleep(min(1.0 - (now - started), deadline - now))
        return [latest[i] for i in ids]

    def submit_and_wait(self, items: Iterable[Item], timeout: float = 600) -> List[Submission]:
        return self.wait(self.submit_many(items), timeout=timeout)

    def list(self, problem: Optional[str] = None, state: Optional[str] = None,
             after: Optional[int] = None, limit: Optional[int] = None) -> List[Submission]:
        """One page of the client's submissions, oldest first, those with `seq` > `after`."""
        query = {"problem": problem, "state": state, "after": after, "limit": limit}
        return self._page(self._json("GET", "/v1/submissions", query))

    def iter_all(self, problem: Optional[str] = None, state: Optional[str] = None,
                 after: Optional[int] = None, limit: Optional[int] = None) -> Iterator[Submission]:
        """Every submission of the client, page after page (`after` = the last `seq` seen)."""
        while True:
            page = self.list(problem=problem, state=state, after=after, limit=limit)
            if not page:
                return
            yield from page
            after = page[-1].seq

    def export(self, format: str = "jsonl") -> str:
        """The client's finished records: `jsonl` (signed records, for `kbench report`), `csv`
        or `markdown`."""
        if format not in EXPORT_FORMATS:
            raise ValueError(f"format must be one of {EXPORT_FORMATS}, not {format!r}")
        raw = self._request("GET", "/v1/export", {"format": format}, accept="*/*")
        return raw.decode("utf-8")

    def leaderboard(self) -> Board:
        """Leaderboard mode's board (`NotFound` when the service is not in that mode)."""
        return Board.from_json(self._json("GET", "/v1/leaderboard"))
