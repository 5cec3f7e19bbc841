"""The one check runner: the CLI, the notebook, `make grade` and the progress view all call run_checks.

    report = run_checks(get_exercise("02_ddp_basics"), read_submission("answers.ipynb"))
    print("\\n".join(report.lines()), report.score)

Rules it applies to every check, wherever it is run from:
- a missing or crashing task fails its own checks only;
- a check that could not run on this hardware (CheckSkipped) is credited only
  when every other check of its task passes, and says so;
- one mistake, one reason (grader/reasons.py): a failed check whose declared dependency failed in the same
  run points to it instead of diagnosing again;
- a run that hangs is answered once: the task's other checks asking for the same run get that hang
  (the same message, 0 points; shared_runs.py), and its stacks show in the first of them only; a check
  that asks for a different run still runs it (hung_in: a task that hung in an earlier phase);
- a submission that changed the grader while a check ran gets 0 for that check;
- a hidden check's message comes from the parent only, never from what student code raised or printed,
  and its ranks' output is not kept; a public check's message and output are capped (grader.feedback_filter).

side_by_side > 1 runs up to that many checks at once, in threads: a check's
parent-side code (its single-process reference, seeded through torch's global
RNG) holds a lock released only while it waits for its ranks, so references
never interleave; only the multi-process runs overlap.
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from grader import feedback_filter
from grader.checks import Check, CheckFailed, CheckResult, CheckSkipped, Exercise, Report
from grader.grading import Grading, MachineFailed, RunCheckFailed
from grader.i18n import _
from grader.reasons import Reasons
from grader.shared_runs import SharedRuns
from grader.submission import Submission


SIDE_BY_SIDE = 3  # checks of one task at once in a notebook: their ranks mostly wait (barriers, startup)


def run_checks(
    exercise: Exercise,
    submission: Submission,
    task: str | None = None,
    hidden: bool | None = None,
    world_size: int = 2,
    timeout: float = 30.0,
    on_result: Callable[[CheckResult], None] | None = None,
    side_by_side: int = 1,
    keep_output: bool = False,
    tasks: list[str] | None = None,
    hung_in: dict[str, str] | None = None,
    credit: bool = True,
) -> Report:
    """Run the selected checks (one task, several `tasks`, or all); on_result sees each final
    result, in the checks' order. hung_in: task -> a check of it that already hung elsewhere (an
    earlier phase); credit=False leaves skipped checks uncredited, for credit_skipped() after merging."""
    checks = (
        [c for t in tasks for c in exercise.checks_for(t, hidden)]
        if tasks is not None
        else exercise.checks_for(task, hidden)
    )
    submission.register_sources()  # here too: messages quote the student's lines (engine/source_lines.py)
    load_report, load_failure, load_tampered, load_texts = _definitions(submission, world_size, timeout)
    parallel = max(1, min(len(checks), side_by_side if exercise.side_by_side else 1))
    lock = threading.Lock() if parallel > 1 else None
    hung_in = dict(hung_in or {})  # task -> the check whose run hung
    runs = SharedRuns()  # checks asking for the same run share one launch (shared_runs.py)
    hangs: dict[str, tuple[str, str]] = {}  # check -> (details of a run that hung or aborted, the message without)

    run_tasks = tuple(dict.fromkeys(c.task for c in checks))

    def grading_for(check: Check, share: bool) -> Grading:
        grading = Grading(submission, world_size, timeout, parent_lock=lock, keep_output=keep_output, runs=runs)
        grading.load_report, grading.load_failure, grading.tampered = load_report, load_failure, load_tampered
        grading.rank_texts = list(load_texts)  # what loading the answers printed or raised: never in a hidden check
        grading.tasks, grading.task, grading.share_launches = run_tasks, check.task, share
        grading.declared_runs = exercise.declared_runs
        return grading

    def one(check: Check) -> CheckResult:
        with lock or contextlib.nullcontext():
            grading = grading_for(check, share=True)
            result = _run_one(check, grading, hung_in.get(check.task))
            if grading.read_shared_launch and not result.passed:
                # A failure seen in a launch shared with other runs is confirmed by the check's own runs, which
                # alone decide: nothing another run left in those ranks can cost a check its points.
                grading = grading_for(check, share=False)
                result = _run_one(check, grading, hung_in.get(check.task))
        if grading.hang:
            hangs[check.name] = grading.hang
        return result

    try:
        results = _in_order(checks, one, parallel, credit, hangs, on_result)
    finally:
        runs.close()
    return Report(exercise.id, results)


def _in_order(checks: list[Check], one, parallel: int, credit: bool, hangs: dict, on_result) -> list[CheckResult]:
    """one(check) for every check, up to `parallel` at once; each result is final (and given to on_result) in the
    checks' order, a skipped one once its task's others are known."""
    pending = [None] * len(checks)
    results: list[CheckResult] = []
    stacks_shown: dict[tuple[str, str], str] = {}  # (task, stacks) -> the check that shows them
    reasons = Reasons()  # each reason said once: later checks point to it (grader/reasons.py)
    pool = ThreadPoolExecutor(parallel, thread_name_prefix="grader-check")
    try:
        futures = [pool.submit(one, check) for check in checks] if parallel > 1 else None
        for i, check in enumerate(checks):
            pending[i] = futures[i].result() if futures else one(check)
            for final in _finalize(checks, pending, len(results), credit):
                hang = hangs.get(final.name)
                reasons.point(checks[len(results)], final, hung=hang is not None)
                _show_stacks_once(final, hang, stacks_shown)
                results.append(final)
                if on_result:
                    on_result(final)
    finally:
        # Interrupted (a kernel's stop button): return now; runs already started end within their timeout.
        pool.shutdown(wait=False, cancel_futures=True)
    return results


def _show_stacks_once(result: CheckResult, hang: tuple[str, str] | None, shown: dict) -> None:
    """A hang or an abort whose reason an earlier check of the task gave: its headline and one line pointing to
    that check, not the reason's details again (nor the ranks' output: the same run printed the same)."""
    if hang is None or result.hidden or result.tampered:
        return
    stack_text, without = hang
    first = shown.setdefault((result.task, stack_text), result.name)
    if first != result.name:
        pointer = (
            _(
                "`{task}` already hung in {check} (above, with the stacks): this check asks for the same run and is "
                "answered from that hang",
                task=result.task,
                check=first,
            )
            if result.hung
            else _(
                "the same run failed the same way in {check} (above, with each rank's details and output)",
                check=first,
            )
        )
        result.message = without.split("\n", 1)[0] + "\n" + pointer
        result.outputs = []


def _definitions(submission: Submission, world_size: int, timeout: float):
    """What the answers define: known without running them (a live kernel), or by one run alone."""
    known = submission.known_definitions()
    if known is not None:
        return known, None, False, []
    grading = Grading(submission, world_size, timeout)
    grading.preflight()
    return grading.load_report, grading.load_failure, grading.tampered, grading.rank_texts


def credit_skipped(results: list[CheckResult]) -> None:
    """Apply the skipped-check rule to results run with credit=False (phases merged, in order)."""
    for result in results:
        if result.skipped:
            _credit_skipped(result, [o for o in results if o.task == result.task and o is not result])


def _finalize(checks: list[Check], pending: list, done: int, credit: bool = True) -> list[CheckResult]:
    """The results from index `done` on that are final: a skipped check waits for its task."""
    final = []
    for i in range(done, len(checks)):
        result = pending[i]
        if result is None:
            break
        if result.skipped and credit:
            others = [pending[j] for j, c in enumerate(checks) if c.task == result.task and j != i]
            if any(o is None for o in others):
                break
            _credit_skipped(result, others)
        final.append(result)
    return final


def _credit_skipped(result: CheckResult, others: list[CheckResult]) -> None:
    reason = result.message
    if others and all(o.passed for o in others):
        result.passed, result.points, result.message = True, result.max_points, ""
        result.notes.append(
            _("skipped: {reason}; credited because every other check of {task} passed", reason=reason, task=result.task)
        )
    else:
        result.message = _(
            "not run on this machine: {reason}\n(a check that cannot run here is credited only when "
            "every other check of {task} passes)",
            reason=reason,
            task=result.task,
        )


def _run_one(check: Check, grading: Grading, hung_in: str | None = None) -> CheckResult:
    start = time.monotonic()
    grading.hidden = check.hidden
    not_run = _not_runnable(check, grading, hung_in)
    if not_run is not None:
        (message, kind), passed, skipped = not_run, False, False
    else:
        message, passed, skipped, kind = _call(check, grading)
    message = _shown_message(check, grading, message, kind)
    passed = passed and not grading.tampered and not grading.machine_failure
    outputs = [] if check.hidden else [[feedback_filter.public_output(o) for o in run] for run in grading.outputs]
    return CheckResult(
        check.name,
        check.task,
        passed,
        check.points if passed else 0,
        check.points,
        message,
        check.hidden,
        list(grading.notes),
        round(time.monotonic() - start, 3),
        plan="; ".join(grading.plans),
        skipped=skipped and not grading.tampered,
        tampered=grading.tampered,
        hung=grading.hung and not passed,
        outputs=outputs,
        unrunnable=bool(grading.machine_failure),
    )


def _not_runnable(check: Check, grading: Grading, hung_in: str | None) -> tuple[str, str] | None:
    """(message, kind) when the check cannot run: the answers did not load, its task is not defined in them, or
    the task already hung elsewhere; None when it can."""
    if grading.load_failure:
        return grading.load_failure, "load_failed"
    if check.task not in grading.load_report.defined:
        message = _("`{task}` is not defined in your answers", task=check.task)
        stopped = grading.load_report.unreached.get(check.task)
        if stopped:  # its own cell raised: that error is the reason, whatever else raised
            return message + _(": the cell that defines it stopped before it ({why})", why=stopped), "not_defined"
        if grading.load_report.problems:
            message += _("; while loading them: {problems}", problems="; ".join(grading.load_report.problems))
        return message, "not_defined"
    if hung_in:
        return (
            _(
                "not run: `{task}` already hung in {check} (above, with the stack); "
                "fix that hang first, these checks would wait the same way",
                task=check.task,
                check=hung_in,
            ),
            "not_run",
        )
    return None


def _call(check: Check, grading: Grading) -> tuple[str, bool, bool, str]:
    """Run the check itself: (message, passed, skipped, kind of failure)."""
    message, passed, skipped, kind = "", False, False, "wrong"
    grading.world_size = check.world_size or grading.world_size
    try:
        check.fn(grading)
        passed = True
    except MachineFailed:
        pass  # said below, whatever the check did with it
    except RunCheckFailed as exc:
        message, kind = str(exc), exc.kind
        if exc.hang:
            grading.hang = exc.hang[0], feedback_filter.public_message(exc.hang[1])
    except CheckFailed as exc:
        message = str(exc)
    except CheckSkipped as exc:
        message, skipped, kind = str(exc), True, "skipped"
    except Exception as exc:  # a bug in a check must not pass or crash the batch
        message, kind = (
            _(
                "the check itself failed ({error}); please tell the instructor",
                error=type(exc).__name__ + ": " + str(exc),
            ),
            "check_bug",
        )
    return message, passed, skipped, kind


def _shown_message(check: Check, grading: Grading, message: str, kind: str) -> str:
    """The message the student sees: filtered (a hidden check's from the parent only), and replaced when the
    submission changed the grader or the machine failed the run."""
    if message and check.hidden:
        message = feedback_filter.hidden_message(message, kind, check.task, check.feedback, grading.rank_texts)
    elif message:
        message = feedback_filter.public_message(message)
    said = message.startswith(
        ("your code changed the grader", _("your code changed the grader or torch in a hidden test, so it scores 0"))
    )
    if grading.tampered and not said:
        message = _("your code changed the grader or torch while this check ran, so it scores 0") + (
            f"\n{message}" if message and not check.hidden else ""
        )
    if grading.machine_failure and not grading.tampered:
        message = _(
            "could not run on this machine: {why}\n(nothing is paid for it; the submission is listed for regrading)",
            why=grading.machine_failure,
        )
    return message
