"""make demo's sample class (samples/submitted/) is what samples/make_samples.py builds from today's release and
solution: a stale sample would show students an older notebook, and a mistake the solution no longer contains would
leave a "wrong" sample silently right."""

import copy
import json

import pytest

from samples import make_samples


@pytest.fixture(scope="module")
def built():
    return make_samples.build()


def test_committed_samples_are_built_from_the_current_release(built):
    stale = [s for s, nb in built.items() if make_samples.committed(s) != make_samples.serialized(nb)]
    assert not stale, f"stale samples {stale}: run make exercises (or .venv/bin/python samples/make_samples.py)"


def test_every_sample_but_ada_differs_from_the_solution_in_its_answers(built):
    def answers(nb):
        return {
            c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"])
            for c in nb["cells"]
            if c["metadata"].get("nbgrader", {}).get("solution")
        }

    right = answers(built["ada"])
    assert right == {k: v for k, v in make_samples.solution_answers().items() if k in right}
    for student, nb in built.items():
        if student != "ada":
            assert answers(nb) != right, f"{student}'s sample has no mistake"


def test_a_mistake_the_solution_lost_is_an_error(monkeypatch):
    students = copy.deepcopy(make_samples.STUDENTS)
    students["ben"] = students["ben"] + [("a line no solution has\n", "")]
    monkeypatch.setattr(make_samples, "STUDENTS", students)
    with pytest.raises(ValueError, match="ben's mistake is no longer in the solution"):
        make_samples.build()


def test_gwen_keeps_the_stale_pass_display(built):
    shown = [
        json.dumps(c["outputs"], ensure_ascii=False)
        for c in built["gwen"]["cells"]
        if c["metadata"].get("nbgrader", {}).get("grade_id") == "make_dataloader_check"
    ]
    assert shown and "✓ make_dataloader" in shown[0]
