"""Typed results, parsed from the service's JSON (harness/src/serve/openapi.json).

Fields the contract does not name are ignored, so a newer server's additions do not break an
older client; a required field that is missing or of the wrong type raises `BadResponse`
naming the object and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .errors import BadResponse

_REQUIRED = object()
_NUMBER = (int, float)


def _get(obj: Any, key: str, types: tuple, where: str, default: Any = _REQUIRED) -> Any:
    """`obj[key]` checked against `types`; an absent or null optional field gives `default`."""
    if not isinstance(obj, dict):
        raise BadResponse(f"{where}: expected a JSON object, got {type(obj).__name__}")
    value = obj.get(key)
    if value is None:
        if default is _REQUIRED:
            raise BadResponse(f"{where}: required field {key!r} is missing or null")
        return default
    # bool is an int in Python; JSON's true is no number.
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = "/".join(t.__name__ for t in types)
        raise BadResponse(f"{where}: field {key!r} should be {names}, got {value!r:.80}")
    return value


def _strings(obj: Any, key: str, where: str) -> List[str]:
    values = _get(obj, key, (list,), where)
    if not all(isinstance(v, str) for v in values):
        raise BadResponse(f"{where}: field {key!r} should be a list of strings")
    return list(values)


def _objects(obj: Any, key: str, where: str) -> list:
    return _get(obj, key, (list,), where)


@dataclass(frozen=True)
class NewSubmission:
    """One kernel to submit: a problem id of `Client.problems()` and the kernel's Python
    source (defining `ModelNew`)."""

    problem: str
    source: str
    label: Optional[str] = None
    remeasure: bool = False
    ranked: bool = False

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"problem": self.problem, "source": self.source}
        if self.label is not None:
            out["label"] = self.label
        if self.remeasure:
            out["remeasure"] = True
        if self.ranked:
            out["ranked"] = True
        return out


@dataclass(frozen=True)
class Verdict:
    outcome: str  # ok, compile_error, runtime_error, timeout, mismatch, integrity, ...
    correct: bool
    flagged: bool
    flags: List[str]
    speedup: Optional[float] = None  # reference time over kernel time, when correct and timed
    message: Optional[str] = None

    @classmethod
    def from_json(cls, obj: Any, where: str = "verdict") -> "Verdict":
        speedup = _get(obj, "speedup", _NUMBER, where, None)
        return cls(
            outcome=_get(obj, "outcome", (str,), where),
            correct=_get(obj, "correct", (bool,), where),
            flagged=_get(obj, "flagged", (bool,), where),
            flags=_strings(obj, "flags", where),
            speedup=None if speedup is None else float(speedup),
            message=_get(obj, "message", (str,), where, None),
        )


@dataclass(frozen=True)
class Submission:
    id: str
    seq: int
    problem: str
    state: str  # queued, running or done
    cached: bool  # answered from the verdict cache
    ranked: bool
    submitted_unix_s: float
    label: Optional[str] = None
    finished_unix_s: Optional[float] = None
    verdict: Optional[Verdict] = None
    ranked_verdict: Optional[Verdict] = None
    record: Optional[Dict[str, Any]] = field(default=None, repr=False)  # the signed record

    @property
    def done(self) -> bool:
        return self.state == "done"

    @classmethod
    def from_json(cls, obj: Any) -> "Submission":
        where = "submission"
        if isinstance(obj, dict) and isinstance(obj.get("id"), str):
            where = f"submission {obj['id']}"
        verdict = _get(obj, "verdict", (dict,), where, None)
        ranked_verdict = _get(obj, "ranked_verdict", (dict,), where, None)
        finished = _get(obj, "finished_unix_s", _NUMBER, where, None)
        return cls(
            id=_get(obj, "id", (str,), where),
            seq=_get(obj, "seq", (int,), where),
            problem=_get(obj, "problem", (str,), where),
            state=_get(obj, "state", (str,), where),
            cached=_get(obj, "cached", (bool,), where),
            ranked=_get(obj, "ranked", (bool,), where),
            submitted_unix_s=float(_get(obj, "submitted_unix_s", _NUMBER, where)),
            label=_get(obj, "label", (str,), where, None),
            finished_unix_s=None if finished is None else float(finished),
            verdict=None if verdict is None else Verdict.from_json(verdict, f"{where}: verdict"),
            ranked_verdict=None if ranked_verdict is None
            else Verdict.from_json(ranked_verdict, f"{where}: ranked_verdict"),
            record=_get(obj, "record", (dict,), where, None),
        )


@dataclass(frozen=True)
class Problem:
    id: str  # e.g. smoke/L1/1
    level: int
    name: str

    @classmethod
    def from_json(cls, obj: Any) -> "Problem":
        return cls(id=_get(obj, "id", (str,), "problem"),
                   level=_get(obj, "level", (int,), "problem"),
                   name=_get(obj, "name", (str,), "problem"))


@dataclass(frozen=True)
class Health:
    status: str
    version: str
    queued: int
    running: int

    @classmethod
    def from_json(cls, obj: Any) -> "Health":
        return cls(status=_get(obj, "status", (str,), "health"),
                   version=_get(obj, "version", (str,), "health"),
                   queued=_get(obj, "queued", (int,), "health"),
                   running=_get(obj, "running", (int,), "health"))


@dataclass(frozen=True)
class BoardEntry:
    client: str
    problem: str
    submission: str
    speedup: float
    label: Optional[str] = None

    @classmethod
    def from_json(cls, obj: Any) -> "BoardEntry":
        where = "leaderboard entry"
        return cls(client=_get(obj, "client", (str,), where),
                   problem=_get(obj, "problem", (str,), where),
                   submission=_get(obj, "submission", (str,), where),
                   speedup=float(_get(obj, "speedup", _NUMBER, where)),
                   label=_get(obj, "label", (str,), where, None))


@dataclass(frozen=True)
class Board:
    problems: List[str]
    entries: List[BoardEntry]

    @classmethod
    def from_json(cls, obj: Any) -> "Board":
        return cls(problems=_strings(obj, "problems", "leaderboard"),
                   entries=[BoardEntry.from_json(e)
                            for e in _objects(obj, "entries", "leaderboard")])
