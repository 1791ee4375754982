"""An example reward for RL training on kernels: a batch of sources in, one float each out.

`KernelReward` submits the whole batch in one go (the service spreads it over its GPUs and
answers repeats from its verdict cache), waits, and scores each verdict. `reward_fn` shows the
per-sample `compute_score(data_source, solution_str, ground_truth, extra_info)` shape that
verl-style trainers call (TRL's reward functions take lists the same way); it imports neither.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .client import Client
from .errors import Timeout
from .models import NewSubmission, Submission

TRANSFORMS = ("speedup", "log_speedup")


class KernelReward:
    """`reward(sources, problems) -> (floats, details)`, one of each per source.

    A correct, unflagged kernel scores its speedup (`transform="speedup"`) or log(speedup)
    (`"log_speedup"`, 0 at parity); a correct one that was not timed scores parity (1.0 or 0.0).
    A flagged kernel (an integrity check failed it) scores `flagged`; a wrong one (any other
    outcome: compile error, mismatch, crash, ...) or one not done within `timeout` seconds
    scores `wrong`. Errors of the service itself (unreachable, auth, quota) are raised.
    """

    def __init__(self, client: Client, *, timeout: float = 900, wrong: float = 0.0,
                 flagged: float = 0.0, transform: str = "speedup") -> None:
        if transform not in TRANSFORMS:
            raise ValueError(f"transform must be one of {TRANSFORMS}, not {transform!r}")
        self.client = client
        self.timeout = timeout
        self.wrong = wrong
        self.flagged = flagged
        self.transform = transform

    def score(self, sub: Submission) -> float:
        v = sub.verdict
        if not sub.done or v is None:
            return self.wrong
        if v.flagged:
            return self.flagged
        if not v.correct:
            return self.wrong
        if v.speedup is None:
            return 1.0 if self.transform == "speedup" else 0.0
        if self.transform == "speedup":
            return v.speedup
        return math.log(v.speedup) if v.speedup > 0 else self.wrong

    def details(self, sub: Submission) -> Dict[str, Any]:
        v = sub.verdict
        message = v.message if v else None
        if not sub.done:
            message = f"not done within {self.timeout:g} s (state {sub.state})"
        return {
            "id": sub.id, "outcome": v.outcome if v else None,
            "correct": v.correct if v else False, "flagged": v.flagged if v else False,
            "flags": list(v.flags) if v else [], "speedup": v.speedup if v else None,
            "cached": sub.cached, "message": message,
        }

    def __call__(self, sources: Sequence[str],
                 problems: Sequence[str]) -> Tuple[List[float], List[Dict[str, Any]]]:
        if len(sources) != len(problems):
            raise ValueError(f"{len(sources)} sources but {len(problems)} problems")
        items = [NewSubmission(p, s) for s, p in zip(sources, problems)]
        try:
            subs = self.client.submit_and_wait(items, timeout=self.timeout)
        except Timeout as e:
            subs = e.submissions  # score what finished; the rest score `wrong`
        return [self.score(s) for s in subs], [self.details(s) for s in subs]


_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str:
    """The last fenced code block of a model's answer, or the whole answer without one."""
    blocks = _FENCE.findall(text)
    return blocks[-1] if blocks else text


_default: Optional[KernelReward] = None


def default_reward() -> KernelReward:
    """A `KernelReward` on the service named by `KBENCH_SERVE_URL` and `KBENCH_SERVE_TOKEN`
    (made once per process), scoring log(speedup)."""
    global _default
    if _default is None:
        client = Client(os.environ["KBENCH_SERVE_URL"], os.environ["KBENCH_SERVE_TOKEN"])
        _default = KernelReward(client, transform="log_speedup")
    return _default


def reward_fn(data_source: Any, solution_str: Union[str, Sequence[str]],
              ground_truth: Union[str, Sequence[str]],
              extra_info: Any = None) -> Union[float, List[float]]:
    """A trainer's `compute_score`: `solution_str` is the model's answer (its last fenced code
    block is the kernel) and `ground_truth` the problem id, e.g. `smoke/L1/1` (kbench checks
    against the problem's own reference, so the data set needs no answer). Given lists, as a
    batched reward manager passes them, it scores the whole batch in one submission.

        # in the trainer's config: custom_reward_function.path = kbench_client/reward.py,
        # name = reward_fn; each row's reward_model.ground_truth = its problem id.
    """
    reward = default_reward()
    if isinstance(solution_str, str):
        scores, _ = reward([extract_code(solution_str)], [str(ground_truth)])
        return scores[0]
    scores, _ = reward([extract_code(s) for s in solution_str], [str(g) for g in ground_truth])
    return scores
