"""make demo: the instructor's whole loop on the bundled sample submissions.

A throwaway course in build/demo (its own exchange and SQLite gradebook):
release 02_ddp_basics, each sample student (samples/submitted/<student>/)
fetches it, answers and submits, the instructor collects, grades in parallel
into the gradebook (each submission in a bubblewrap sandbox when
bwrap is installed, else unsandboxed, saying so), generates feedback, exports grades.csv and writes the
class report. samples/make_samples.py rebuilds the samples from the solution;
gwen's notebook still shows the ✓ of a check she ran before breaking her
answer, so she is flagged (formgrader and report).
"""

from __future__ import annotations

import glob
import os
import shutil
import time

from grader.gradebook import roundtrip
from grader.isolation import sandbox as sandboxes
from grader.gradebook.batch import grade_assignment
from grader.gradebook.commands import format_grades
from grader.gradebook.inject import gradebook_marks, gradebook_scores, write_results
from grader.gradebook.report import write_report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the course repository
SAMPLES = os.path.join(ROOT, "samples", "submitted")


def sample_students(assignment: str) -> dict[str, str]:
    return {
        path.split(os.sep)[-3]: path
        for path in sorted(glob.glob(os.path.join(SAMPLES, "*", assignment, f"{assignment}.ipynb")))
    }


def main(assignment: str = "02_ddp_basics", root: str | None = None, jobs: int | None = None) -> int:
    start = time.monotonic()
    root = root or os.path.join(ROOT, "build", "demo")
    shutil.rmtree(root, ignore_errors=True)
    step = lambda text: print(f"[{time.monotonic() - start:5.1f} s] {text}", flush=True)  # noqa: E731

    course = roundtrip.make_course(root, [assignment])
    step(f"course in {root}: nbgrader generate_assignment + release_assignment {assignment}")
    roundtrip.release(course, assignment)
    students = sample_students(assignment)
    for student, answers in students.items():
        notebook = roundtrip.fetch(course, assignment, student)
        shutil.copy(answers, notebook)  # the student's work
        roundtrip.submit(course, assignment, student)
    step(f"{len(students)} students fetched, answered and submitted: {', '.join(students)}")
    roundtrip.collect(course, assignment)
    sandbox = sandboxes.available()
    step(
        "collected; grading in parallel with real 2-process runs (gloo on CPU, nccl with enough GPUs), "
        + (
            "each submission in a bubblewrap sandbox"
            if sandbox
            else f"UNSANDBOXED: bwrap is not installed ({sandboxes.INSTALL_HINT}; make grade needs it)"
        )
    )
    results = grade_assignment(course, assignment, jobs=jobs, sandbox=sandbox)  # None: per core, or per GPU group
    problems = write_results(course, assignment, results)
    feedback = roundtrip.feedback(course, assignment)
    csv = roundtrip.export(course)
    report, plot = write_report(course, assignment)
    step("graded, feedback generated, grades exported")
    print()
    marks = gradebook_marks(course, assignment)
    print(format_grades(results, gradebook_scores(course, assignment), problems, marks))
    print()
    for student, result in sorted(results.items()):
        failed = [c for c in (result.get("report") or {}).get("checks", []) if not c["passed"] and not c["hidden"]]
        if failed:
            print(f"{student}: first failed check {failed[0]['name']}: {failed[0]['message'].splitlines()[0]}")
    print()
    flagged = sorted(s for s, m in marks.items() if m["flagged"])
    print(
        f'flagged in the gradebook (the formgrader\'s "Flagged?" column): {", ".join(flagged) or "nobody"}; '
        f"the class report lists them first, with the reason"
    )
    print(f"gradebook (formgrader):  {course.db_url}")
    print(f"feedback for students:   {feedback}/<student>/{assignment}/{assignment}.html")
    print(f"grades:                  {csv}")
    print(f"class report:            {report}\n                         {plot}")
    return 0
