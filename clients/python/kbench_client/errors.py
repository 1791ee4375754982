"""The client's exceptions: every failure it raises is a `KbenchError`."""

from __future__ import annotations

from typing import Optional


class KbenchError(Exception):
    """A request failed. `status` is the HTTP status (None when no answer came back), `code` and
    `message` the server's `{"error": {"code", "message"}}` (or the client's own words)."""

    def __init__(self, message: str, *, status: Optional[int] = None,
                 code: Optional[str] = None) -> None:
        super().__init__(f"{status} {code}: {message}" if status else message)
        self.status = status
        self.code = code
        self.message = message


class AuthError(KbenchError):
    """401 or 403: the token is missing, wrong, or not allowed this."""


class NotFound(KbenchError):
    """404: no such submission (or route: /v1/leaderboard outside leaderboard mode)."""


class RateLimited(KbenchError):
    """429 on every try: over the client's rate limit or quota. `retry_after` is the server's
    last `Retry-After` in seconds (None without one)."""

    def __init__(self, message: str, *, retry_after: Optional[float] = None, **kw) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class Busy(RateLimited):
    """503 on every try: the service's queue is full or it is not serving."""


class Unreachable(KbenchError):
    """No answer on any try: connection refused or reset, or the socket timed out."""


class BadResponse(KbenchError):
    """The server answered something the contract does not allow (not JSON, a required field
    missing or of the wrong type)."""


class Timeout(KbenchError):
    """Waiting ran out before every submission was done. `unfinished` lists their ids;
    `submissions` holds the latest state of every id waited on, in the order asked."""

    def __init__(self, message: str, *, unfinished: list, submissions: list) -> None:
        super().__init__(message, code="timeout")
        self.unfinished = unfinished
        self.submissions = submissions
