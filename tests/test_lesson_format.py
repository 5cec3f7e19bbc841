"""Lessons are stored as JupyterLab saves them: opening a lesson (English or lessons/<lang>/) in JupyterLab and saving
it changes no byte, so autosave never leaves a tracked file modified (and a student's `git pull` never conflicts).
The round trip goes through jupyter_server's own contents manager, the code that serves and saves the file."""

import glob
import json
import os
import shutil

import pytest
from jupyter_server.services.contents.filemanager import FileContentsManager

from grader.translate.build import dumps
from tests.helpers import ROOT

LESSONS = sorted(
    glob.glob(os.path.join(ROOT, "lessons", "*.ipynb")) + glob.glob(os.path.join(ROOT, "lessons", "*", "*.ipynb"))
)


def test_every_lesson_and_translation_is_covered():
    names = {os.path.relpath(p, ROOT) for p in LESSONS}
    assert len([n for n in names if n.count(os.sep) == 1]) == 4, names
    assert {n.split(os.sep)[1] for n in names if n.count(os.sep) == 2} >= {"es", "nl", "ja"}, names


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: os.path.relpath(p, ROOT))
def test_opening_and_saving_in_jupyterlab_changes_no_byte(path, tmp_path):
    name = os.path.basename(path)
    shutil.copy(path, tmp_path / name)
    manager = FileContentsManager(root_dir=str(tmp_path))
    model = manager.get(name, content=True, type="notebook")
    manager.save({"type": "notebook", "format": "json", "content": model["content"]}, name)
    with open(path, "rb") as original, open(tmp_path / name, "rb") as saved:
        assert saved.read() == original.read(), (
            f"{os.path.relpath(path, ROOT)} is not in JupyterLab's format: save it with grader.translate.build.dumps"
        )


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: os.path.relpath(p, ROOT))
def test_the_translate_step_writes_the_same_format(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert dumps(json.loads(text)) == text


def test_the_comparison_can_fail(tmp_path):
    """A notebook written in another format (one output as a single string, no final newline) does change."""
    source = LESSONS[0]
    with open(source, encoding="utf-8") as f:
        notebook = json.load(f)
    notebook["cells"][0]["source"] = "".join(notebook["cells"][0]["source"])
    changed = tmp_path / "changed.ipynb"
    changed.write_text(json.dumps(notebook, sort_keys=True, indent=1, ensure_ascii=False), encoding="utf-8")
    manager = FileContentsManager(root_dir=str(tmp_path))
    before = changed.read_bytes()
    manager.save(
        {
            "type": "notebook",
            "format": "json",
            "content": manager.get("changed.ipynb", content=True, type="notebook")["content"],
        },
        "changed.ipynb",
    )
    assert changed.read_bytes() != before
    assert dumps(notebook) == changed.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: os.path.relpath(p, ROOT))
def test_the_kernel_is_named_as_the_installed_one(path):
    """JupyterLab rewrites a notebook's kernelspec to the running kernel's on open: a lesson naming it otherwise
    ("Python 3" for ipykernel's "Python 3 (ipykernel)") is modified as soon as a student opens it."""
    from jupyter_client.kernelspec import KernelSpecManager

    with open(path, encoding="utf-8") as f:
        named = json.load(f)["metadata"]["kernelspec"]
    installed = KernelSpecManager().get_kernel_spec(named["name"])
    assert named["display_name"] == installed.display_name, (named, installed.display_name)
