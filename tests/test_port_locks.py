"""Port locks: private to the grading user, refused when unsafe, removed when released.

The lock folder used to be a shared, predictable /tmp/ddp-grader-ports (1777): a student could create it
first, read which ports the grader was about to hand a run, bind them first, or make the grader chmod
through a link. In the sandbox (GRADER_SANDBOXED=1) each submission has its own loopback and no locks
are taken at all.
"""

import os
import stat
import subprocess
import sys
import tempfile

import pytest

from grader.engine import processes
from grader.engine.private_folders import UnsafeFolder, private_folder

NOBODY = 65534


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    """A fresh XDG_RUNTIME_DIR of ours: the lock folder goes there."""
    base = tmp_path / "run"
    base.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    monkeypatch.delenv(processes.SANDBOXED, raising=False)
    return base


def test_the_lock_folder_is_private_and_its_locks_are_removed_when_released(runtime):
    port = processes.free_port()
    folder = processes.lock_folder()
    assert folder == str(runtime / "ddp-grader-ports")
    info = os.lstat(folder)
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
    assert os.listdir(folder) == [str(port)]
    assert processes._lock_port(port, folder) is None, "a second holder got a held port's lock"
    processes.release_port(port)
    assert os.listdir(folder) == [], "a released port's lock file was left behind"


def test_without_a_runtime_dir_the_folder_is_per_user_in_the_temp_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    assert processes.lock_folder() == str(tmp_path / f"ddp-grader-ports-{os.geteuid()}")


def test_a_link_planted_at_the_folder_is_refused_and_its_target_untouched(runtime, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o755)
    os.symlink(target, runtime / "ddp-grader-ports")
    with pytest.raises(UnsafeFolder, match="link"):
        processes.lock_folder()
    assert stat.S_IMODE(os.lstat(target).st_mode) == 0o755, "the grader changed the mode through a link"
    assert os.listdir(target) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a folder owned by another user")
def test_a_folder_created_first_by_someone_else_is_refused(runtime):
    planted = runtime / "ddp-grader-ports"
    planted.mkdir(mode=0o777)
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(UnsafeFolder, match="belongs to uid 65534"):
        processes.lock_folder()


def test_a_refused_folder_still_gives_free_ports_and_writes_nothing_there(runtime, tmp_path, capsys):
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.symlink(target, runtime / "ddp-grader-ports")
    processes._refused.clear()
    port = processes.free_port()
    assert 0 < port < 65536 and os.listdir(target) == []
    assert "no port locks" in capsys.readouterr().err
    processes._refused.clear()


def test_our_own_folder_with_a_loose_mode_is_tightened(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o777)
    os.chmod(folder, 0o777)
    private_folder(str(folder))
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700


def test_a_link_planted_at_a_lock_file_is_not_followed(runtime, tmp_path):
    folder = processes.lock_folder()
    victim = tmp_path / "victim"
    victim.write_text("x")
    port = processes._ephemeral_port()
    os.symlink(victim, os.path.join(folder, str(port)))
    assert processes._lock_port(port, folder) is None
    assert victim.read_text() == "x"


def test_in_the_sandbox_no_lock_is_taken(runtime, monkeypatch):
    monkeypatch.setenv(processes.SANDBOXED, "1")
    port = processes.free_port()
    assert 0 < port < 65536
    assert not os.path.exists(runtime / "ddp-grader-ports"), "the sandbox needs no port locks"


def test_a_lock_is_let_go_when_its_holder_dies(runtime):
    code = "from grader.engine import free_port\nprint(free_port(), flush=True)\nimport sys; sys.stdin.read()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, XDG_RUNTIME_DIR=str(runtime)),
    )
    try:
        port = int(proc.stdout.readline())
        assert processes._lock_port(port, processes.lock_folder()) is None
    finally:
        proc.kill()
        proc.wait(timeout=30)
    held = processes._lock_port(port, processes.lock_folder())
    assert held is not None, "a dead grader's port stayed locked"
    processes._unlock(*held)
