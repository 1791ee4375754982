"""Python client of `kbench serve`, kbench's HTTP evaluation service (standard library only)."""

__version__ = "0.1.0"

from .client import Client  # noqa: E402
from .errors import (AuthError, BadResponse, Busy, KbenchError, NotFound,  # noqa: E402
                     RateLimited, Timeout, Unreachable)
from .models import Board, BoardEntry, Health, NewSubmission, Problem, Submission, Verdict  # noqa: E402
from .reward import KernelReward  # noqa: E402

__all__ = [
    "Client", "NewSubmission", "Submission", "Verdict", "Problem", "Health", "Board",
    "BoardEntry", "KernelReward", "KbenchError", "AuthError", "NotFound", "RateLimited", "Busy",
    "Unreachable", "BadResponse", "Timeout",
]
