"""shared_runs.parent_job: a job the parent runs itself is made once for every check of a submission that asks with
the same key, unless it was cut by its bound (keep), and never shared with a check confirming its own failure."""

from grader.grading import Grading
from grader.shared_runs import SharedRuns, parent_job


def _grading(runs, share: bool = True) -> Grading:
    g = Grading(submission=None, runs=runs)
    g.share_launches = share
    return g


def test_one_job_per_key_for_every_check_of_a_submission():
    runs, made = SharedRuns(), []

    def make(tag):
        made.append(tag)
        return {"tag": tag, "state": [1, 2]}

    first = parent_job(_grading(runs), ("scenario", 1), lambda: make("a"))
    first["state"].append(3)  # a check that changes what it read changes nothing for the next
    second = parent_job(_grading(runs), ("scenario", 1), lambda: make("b"))
    other = parent_job(_grading(runs), ("scenario", 2), lambda: make("c"))
    assert made == ["a", "c"] and second == {"tag": "a", "state": [1, 2]} and other["tag"] == "c"


def test_a_job_cut_by_its_bound_is_not_shared_nor_read_by_a_confirmation():
    runs, made = SharedRuns(), []

    def make():
        made.append(len(made))
        return len(made)

    for _ in range(2):
        parent_job(_grading(runs), "timed out", make, keep=lambda value: False)
    parent_job(_grading(runs), "kept", make)
    parent_job(_grading(runs, share=False), "kept", make)  # the runner's confirmation: its own job
    assert made == [0, 1, 2, 3]
