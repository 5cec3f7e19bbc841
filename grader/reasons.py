"""One mistake, one reason: each reason of a run is said by one check, the later checks point to it in one line.

The runner (grader.runner) gives every final result, in the checks' order, to Reasons.point(): a failed check
whose declared dependency (Exercise.check(depends_on=...)) failed earlier in the same run says only that: its
expectation rests on what the dependency found wrong, so its own diagnosis would blame code that may be right
("depends on `train_calls_set_epoch`, which failed: fix that first"). A dependency that itself points to an
earlier check passes that one on: the pointer names the check that states the reason.

A hang or an abort shared by several checks is said once by the runner's own rule (its stacks shown once), so
such results are left to it. A skipped, tampered or unrunnable result keeps its own message: it says something
else than a mistake.
"""

from __future__ import annotations

from grader.checks import Check, CheckResult
from grader.i18n import _


class Reasons:
    """What the run's earlier failed checks said: check -> the check that states its reason."""

    def __init__(self) -> None:
        self.stated_by: dict[str, str] = {}

    def point(self, check: Check, result: CheckResult, hung: bool = False) -> bool:
        """Rewrite a failed result's message as a pointer when an earlier check states its reason; True if so.
        hung: the result carries a hang or an abort (the runner's hang rule says those once)."""
        if result.passed or result.skipped or result.tampered or result.unrunnable:
            return False
        failed_first = next((d for d in check.depends_on if d in self.stated_by), None)
        if failed_first is not None and not hung:
            root = self.stated_by[failed_first]
            self.stated_by[result.name] = root
            result.message = _("depends on `{check}`, which failed: fix that first", check=root)
            return True
        self.stated_by[result.name] = result.name
        return False


__all__ = ["Reasons"]
