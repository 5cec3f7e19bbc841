"""check("task") in a real Jupyter kernel: the code defined in the kernel is
checked (functions in __main__ reach the ranks by value), ✓/✗ lines are
printed, and a failure raises AssertionError so nbgrader counts it."""

import os

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from grader.exercises import get_exercise
from tests.helpers import ROOT, solution_notebook

EXERCISE = "02_ddp_basics"


def outputs_text(cell) -> str:
    # check() shows one display_data (text/plain + text/html); print() and errors are streams and tracebacks
    return "".join(
        o.get("text", "") + o.get("data", {}).get("text/plain", "") + "".join(o.get("traceback", []))
        for o in cell.get("outputs", [])
    )


def test_solution_notebook_passes_every_check_in_a_kernel(tmp_path):
    nb = nbformat.read(solution_notebook(EXERCISE), as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    checks = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id", "").endswith("_check")]
    text = "".join(outputs_text(c) for c in checks)
    visible = len(get_exercise(EXERCISE).checks_for(hidden=False))  # the solution notebook runs no hidden call
    assert text.count("✓") >= visible and "✗" not in text


def test_a_wrong_answer_in_the_kernel_shows_the_mistake_and_raises(tmp_path):
    nb = nbformat.read(os.path.join(ROOT, "exercises", EXERCISE, f"{EXERCISE}.ipynb"), as_version=4)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    answer = by_id["pick_backend_answer"]
    answer.source = answer.source.replace("# YOUR CODE HERE\n    raise NotImplementedError()", 'return "nccl"')
    nb.cells = [by_id["setup"], answer, by_id["pick_backend_check"]]
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
        raised = False
    except CellExecutionError as exc:
        raised = "AssertionError" in str(exc)
    assert raised
    text = outputs_text(nb.cells[2])
    assert "✗ pick_backend: backend_matches_hardware" in text and "expected 'gloo'" in text


def test_a_crash_in_the_kernel_points_at_the_students_cell(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(src)
        for src in [
            'from grader.notebook import checker\ncheck = checker("02_ddp_basics")',
            'def pick_backend():\n    raise ValueError("half-written answer")',
            'check("pick_backend")',
        ]
    ]
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except CellExecutionError:
        pass
    text = outputs_text(nb.cells[2])
    assert "ValueError: half-written answer" in text
    assert '<Cell In[2]>, line 2, in pick_backend: raise ValueError("half-written answer")' in text


def test_a_hang_and_rank_output_are_shown_without_stderr(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(src)
        for src in [
            'from grader.notebook import checker\ncheck = checker("02_ddp_basics", timeout=5)',
            'import torch.distributed as dist\n\ndef cleanup():\n    print("cleaning up on rank", dist.get_rank())\n'
            "    if dist.get_rank() == 0:\n        dist.barrier()  # only rank 0: a deadlock\n",
            'check("cleanup")',
        ]
    ]
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except CellExecutionError:
        pass
    outputs = nb.cells[2].outputs
    assert not any(o.get("output_type") == "stream" and o.get("name") == "stderr" for o in outputs)
    text = outputs_text(nb.cells[2])
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "✗ cleanup: cleanup_waits_then_destroys" in text
    assert "rank 0 hung: waiting in barrier" in text and "cell In[2], line 6" in text  # the cell as Jupyter names it
    assert "cleaning up on rank 1" in html  # each rank's output, shown per rank
