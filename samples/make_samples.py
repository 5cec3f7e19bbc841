"""Rebuild the bundled sample submissions of 02_ddp_basics from the solution.

Each sample student is the released notebook with the solution's answers,
and a few realistic mistakes put in. `make exercises` runs it after the
release; by hand, from the repository root:

    .venv/bin/python samples/make_samples.py

tests/test_samples.py holds the committed notebooks to what this builds.
"""

import copy
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # grader, when run as a script
EXERCISE = "02_ddp_basics"

STUDENTS = {
    "ada": [],  # everything right
    "ben": [  # forgets set_epoch, returns his own rank's loss
        ("    loader.sampler.set_epoch(epoch)\n", ""),
        ("    dist.all_reduce(totals)\n", ""),
    ],
    "chloe": [  # no DistributedSampler, saves on every rank
        (
            "return DataLoader(dataset, batch_size=batch_size, sampler=sampler)",
            "return DataLoader(dataset, batch_size=batch_size, shuffle=True)",
        ),
        ("    if dist.get_rank() == 0:\n        torch.save", "    if True:\n        torch.save"),
    ],
    "dev": [  # MiniDDP sums instead of averaging, cleanup without a barrier
        ("        param.grad.div_(self.world_size)  # sum of (g / N) over ranks = the average\n", ""),
        ("    dist.barrier()\n    dist.destroy_process_group()", "    dist.destroy_process_group()"),
    ],
    "eve": [  # forgets the DDP wrapper and map_location
        ("    return DDP(model)\n", "    return model\n"),
        ("torch.load(path, map_location=device)", "torch.load(path)"),
    ],
    "finn": "unfinished",  # MiniDDP and train_one_epoch left as stubs
    "gwen": [  # saw ✓ on make_dataloader, then "simplified" it to shuffle=True and saved without re-running
        (
            "return DataLoader(dataset, batch_size=batch_size, sampler=sampler)",
            "return DataLoader(dataset, batch_size=batch_size, shuffle=True)",
        ),
    ],
}
STALE_CHECK_OUTPUT = {"gwen": "make_dataloader"}  # the ✓ display her earlier run left in the saved notebook
UNFINISHED = {"MiniDDP_answer", "train_one_epoch_answer"}


def solution_answers() -> dict[str, str]:
    with open(os.path.join(ROOT, "solutions", EXERCISE, f"{EXERCISE}.ipynb")) as f:
        cells = json.load(f)["cells"]
    answers = {}
    for cell in cells:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("solution"):
            source = "".join(cell["source"])
            answers[meta["grade_id"]] = re.sub(r"[ \t]*### (BEGIN|END) SOLUTION\n?", "", source)
    return answers


def passing_display(task: str) -> dict:
    """The display check(task) leaves in a notebook when every check of the task passes
    (text/plain and text/html, as grader.notebook.display writes them)."""
    from grader.exercises import get_exercise

    checks = [c for c in get_exercise(EXERCISE).checks if c.task == task and not c.hidden]
    lines = [f"✓ {task}: {c.name} ({c.points:g}/{c.points:g})" for c in checks]
    html = "".join(
        f'<div class="grader-pass" style="color:var(--jp-success-color1,#2e7d32)">{line}</div>' for line in lines
    )
    return {
        "output_type": "display_data",
        "metadata": {},
        "data": {"text/plain": "\n".join(lines), "text/html": f'<div class="grader-check">{html}</div>'},
    }


def _answer(source: str, mistakes: list[tuple[str, str]], applied: set[str]) -> str:
    for old, new in mistakes:
        if old in source:
            source = source.replace(old, new)
            applied.add(old)
    return source


def build() -> dict[str, dict]:
    """Each sample student's notebook: the current release with the solution's answers and the student's mistakes.
    A mistake the solution no longer contains is an error, never a silently correct sample."""
    with open(os.path.join(ROOT, "exercises", EXERCISE, f"{EXERCISE}.ipynb")) as f:
        release = json.load(f)
    answers = solution_answers()
    notebooks = {}
    for student, mistakes in STUDENTS.items():
        nb = copy.deepcopy(release)
        mistakes_made, applied = (mistakes if isinstance(mistakes, list) else []), set()
        for cell in nb["cells"]:
            grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
            if grade_id not in answers or (mistakes == "unfinished" and grade_id in UNFINISHED):
                continue
            cell["source"] = _answer(answers[grade_id], mistakes_made, applied).splitlines(True)
        missing = [old for old, _ in mistakes_made if old not in applied]
        if missing:
            raise ValueError(f"{student}'s mistake is no longer in the solution: {missing[0]!r}")
        if student in STALE_CHECK_OUTPUT:
            task = STALE_CHECK_OUTPUT[student]
            check = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == f"{task}_check")
            check["outputs"], check["execution_count"] = [passing_display(task)], 9
        notebooks[student] = nb
    return notebooks


def notebook_path(student: str) -> str:
    return os.path.join(ROOT, "samples", "submitted", student, EXERCISE, f"{EXERCISE}.ipynb")


def serialized(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def committed(student: str) -> str | None:
    try:
        with open(notebook_path(student), encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def main() -> None:
    for student, nb in build().items():
        if committed(student) == serialized(nb):
            continue
        os.makedirs(os.path.dirname(notebook_path(student)), exist_ok=True)
        with open(notebook_path(student), "w", encoding="utf-8") as f:
            f.write(serialized(nb))
        print(f"samples: rewrote {os.path.relpath(notebook_path(student), ROOT)}")


if __name__ == "__main__":
    main()
