"""The grading parent's own state (parent side): read once, sealed, put back without following links.

- The course configuration (nbgrader_config.py, which is Python) is read once; a rewrite afterwards
  changes nothing the run does.
- graded/*.json carry an HMAC seal under a key private to the grading user: a file forged between
  runs is not trusted (ignored, regraded, flagged), nor read by the class report.
- The snapshot covers the SQLite gradebook's journal and WAL, and restores a file it watches without
  following a link or opening a FIFO planted at its path.
"""

import json
import os
import stat
import threading

import pytest

from grader.engine.private_folders import UnsafeFolder
from grader.gradebook import results
from grader.gradebook.course import Course
from grader.gradebook.results import ResultStore, load_sealed
from grader.gradebook.snapshot import Snapshot

VERSION = "grader-digest"


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    """A private state folder for the results key."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def result(student: str, score: float) -> dict:
    return {
        "student": student,
        "assignment": "a",
        "grader": VERSION,
        "sha256": "x",
        "readable": True,
        "error": None,
        "report": {"exercise": "a", "score": score, "max_score": 10, "checks": []},
    }


def test_the_configuration_is_read_once(tmp_path):
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.CourseDirectory.db_url = 'sqlite:///one.db'\n")
    course = Course(str(tmp_path))
    assert course.db_url == "sqlite:///one.db"
    (tmp_path / "nbgrader_config.py").write_text(
        "import os\nos.system('touch pwned')\nc = get_config()\nc.CourseDirectory.db_url = 'sqlite:///forged.db'\n"
    )
    assert course.db_url == "sqlite:///one.db" and course.config.CourseDirectory.db_url == "sqlite:///one.db"
    assert not (tmp_path / "pwned").exists(), "the rewritten configuration was executed"
    changed = course.config
    changed.CourseDirectory.db_url = "sqlite:///mine.db"
    assert course.db_url == "sqlite:///one.db", "a caller's change leaked into the frozen configuration"


def test_the_gradebook_journal_and_wal_and_the_configuration_are_watched(tmp_path):
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")
    watched = Course(str(tmp_path)).instructor_files()
    db = str(tmp_path / "gradebook.db")
    assert {db, db + "-journal", db + "-wal", str(tmp_path / "nbgrader_config.py")} <= set(watched)


def test_a_sealed_result_is_trusted_by_the_next_run(tmp_path):
    folder = str(tmp_path / "graded")
    ResultStore(folder, version=VERSION).accept("ada", result("ada", 7))
    with open(os.path.join(folder, "ada.json")) as f:
        assert "seal" in json.load(f)
    again = ResultStore(folder, version=VERSION)
    assert again.earlier("ada") == result("ada", 7) and again.unsealed == []


def test_a_result_forged_between_runs_is_ignored_and_named(tmp_path):
    folder = str(tmp_path / "graded")
    ResultStore(folder, version=VERSION).accept("ben", result("ben", 3))
    path = os.path.join(folder, "ben.json")
    with open(path) as f:
        stored = json.load(f)
    stored["report"]["score"] = 10  # the seal left as it was
    with open(path, "w") as f:
        json.dump(stored, f)
    with open(os.path.join(folder, "eve.json"), "w") as f:  # no seal at all, claiming the current grader
        json.dump(result("eve", 10), f)
    with open(os.path.join(folder, "old.json"), "w") as f:  # an older grader's file: stale, not forged
        json.dump(dict(result("old", 10), grader="older"), f)
    store = ResultStore(folder, version=VERSION)
    assert [store.earlier(s) for s in ("ben", "eve", "old")] == [None, None, None]
    assert sorted(store.unsealed) == ["ben", "eve"]
    assert load_sealed(folder) == [], "the class report would read a forged result"


def test_a_key_others_could_read_or_a_link_is_refused(state, tmp_path):
    results.results_key()
    key = results.key_path()
    os.chmod(key, 0o644)
    with pytest.raises(UnsafeFolder, match="not private"):
        results.results_key()
    os.remove(key)
    elsewhere = tmp_path / "their-key"
    elsewhere.write_text("0" * 64)
    os.chmod(elsewhere, 0o600)
    os.symlink(elsewhere, key)
    with pytest.raises(UnsafeFolder, match="link"):
        results.results_key()
    assert stat.S_IMODE(os.stat(results.key_path().rsplit("/", 1)[0]).st_mode) == 0o700


def test_a_restored_file_replaces_a_planted_link_and_never_writes_through_it(tmp_path):
    gradebook, victim = tmp_path / "gradebook.db", tmp_path / "victim"
    gradebook.write_bytes(b"grades")
    os.chmod(gradebook, 0o640)
    victim.write_bytes(b"the instructor's other file")
    snapshot = Snapshot([str(gradebook), str(tmp_path / "gradebook.db-journal")])
    gradebook.unlink()
    os.symlink(victim, gradebook)
    (tmp_path / "gradebook.db-journal").write_bytes(b"a forged hot journal")
    assert sorted(snapshot.restore_changed()) == [str(gradebook), str(tmp_path / "gradebook.db-journal")]
    assert not gradebook.is_symlink() and gradebook.read_bytes() == b"grades"
    assert stat.S_IMODE(os.lstat(gradebook).st_mode) == 0o640, "restored with another mode"
    assert victim.read_bytes() == b"the instructor's other file"
    assert not (tmp_path / "gradebook.db-journal").exists(), "the forged journal was left for SQLite to replay"
    snapshot.close()


def test_a_fifo_planted_at_a_watched_path_does_not_hang_the_grader(tmp_path):
    watched = tmp_path / "gradebook.db"
    watched.write_bytes(b"grades")
    snapshot = Snapshot([str(watched)])
    watched.unlink()
    os.mkfifo(watched)
    done = []
    thread = threading.Thread(target=lambda: done.append(snapshot.restore_changed()), daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert done == [[str(watched)]], "restoring hung on a FIFO"
    assert watched.read_bytes() == b"grades"
    snapshot.close()
