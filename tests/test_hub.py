"""A class on JupyterHub (deploy/hub/jupyterhub_config.py), end to end in a real browser.

Real local accounts (useradd; root only), PAM login, each server spawned as
its user; the instructor's formgrader is a hub service run as the instructor
in a course directory with this repository's layout; one shared exchange.
Debian's Chromium, driven by Playwright as in tests/test_browser.py:

- the instructor generates and releases 02_ddp_basics in the formgrader;
- two students log in, fetch it, answer pick_backend (one right, one wrong),
  see ✓ and ✗, and submit;
- the instructor collects (formgrader), grades (`python -m grader grade`),
  generates and releases feedback; both students fetch their feedback;
- Bob's answer cell writes a probe into the course directory wherever it runs as the instructor: the formgrader's
  Autograde button, pressed for him through the hub, refuses in nbgrader's error dialog with the one line that
  says to run `make grade`, writes no probe, and keeps the autograded notebook `make grade` wrote;
- a student gets 403 from the formgrader, the instructor 200; the instructor
  is no admin (403 from the hub's admin page);
- students' servers run the students' environment (deploy/hub/student_env.py,
  what `make hub` builds): check() works there, yet, as a student (runuser),
  no hidden module imports, and the other's work and submission, solutions/,
  the instructor's course directory and environment cannot be read.
Screenshots and the hub's log: artifacts/hub/.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

import psutil
import pytest

from grader.exercises import get_exercise
from grader.gradebook.course import Course
from grader.gradebook.inject import gradebook_scores
from tests.helpers import ROOT
from tests.accounts import (
    accounts as real_accounts,
    as_user as _as,
    home,
    instructor_python,
    missing as missing_accounts,
    student_env,
)
from tests.servers import START_BOUND_S, stop_tree, wait_until_up
from tests.test_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    CORRECT_PICK_BACKEND,
    STUB,
    _code_cell,
    _free_port,
    _missing as _browser_missing,
    _run,
    _settings,
    _source_of,
    _write_answer,
    save_from_file_menu,
)

A = "02_ddp_basics"
COURSE_ID = "ddp-course"
INSTRUCTOR, STUDENTS = "ddp-teacher", ("ddp-alice", "ddp-bob")
PASSWORD = "hub-test-password"  # throwaway accounts, deleted at the end
WRONG_PICK_BACKEND = 'return "nccl"'  # nccl even without a GPU
BIN = os.path.dirname(sys.executable)
CONFIG = os.path.join(ROOT, "deploy", "hub", "jupyterhub_config.py")
PROXY = os.path.join(ROOT, "deploy", "hub", "node_modules", ".bin", "configurable-http-proxy")
ARTIFACTS = os.path.join(ROOT, "artifacts", "hub")
FIRST_CHECK_S = 240  # two students' first checks at once, each starting the engine's forkserver on 2 busy cores


def _missing() -> str:
    if missing_accounts():
        return missing_accounts()
    if not os.path.exists(os.path.join(BIN, "jupyterhub")):
        return "JupyterHub is not installed (pip install -e '.[test]')"
    if not os.access(PROXY, os.X_OK):
        return "configurable-http-proxy is not installed (npm ci --prefix deploy/hub; .ci/install-services does it)"
    return _browser_missing()


pytestmark = [pytest.mark.skipif(bool(_missing()), reason=_missing() or "-"), pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def accounts():
    """The accounts (private homes, JupyterLab settings), and the Pythons: the students' environment, built as
    `make hub` builds it, and the instructor's, in the instructor's private home."""
    users = (INSTRUCTOR, *STUDENTS)
    shared = tempfile.mkdtemp(prefix="hub-env-")
    os.chmod(shared, 0o755)
    try:
        with real_accounts(users, password=PASSWORD):
            for user in users:
                _settings(os.path.join(home(user), ".jupyter"))  # every cell rendered, no news fetched
                subprocess.run(["chown", "-R", f"{user}:{user}", home(user)], check=True, timeout=60)
            yield {
                "student": student_env(os.path.join(shared, "student-env")),
                "instructor": instructor_python(os.path.join(home(INSTRUCTOR), "env")),
            }
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture(scope="module")
def course(accounts):  # accounts: the Pythons
    """The instructor's course directory (this repository's layout) and the shared exchange."""
    course = os.path.join(os.path.expanduser(f"~{INSTRUCTOR}"), "course")
    os.makedirs(os.path.join(course, "solutions"))
    shutil.copy(os.path.join(ROOT, "nbgrader_config.py"), course)
    shutil.copytree(os.path.join(ROOT, "solutions", A), os.path.join(course, "solutions", A))
    subprocess.run(["chown", "-R", f"{INSTRUCTOR}:{INSTRUCTOR}", course], check=True, timeout=60)
    shared = tempfile.mkdtemp(prefix="hub-")
    os.chmod(shared, 0o755)
    exchange = os.path.join(shared, "exchange")
    os.makedirs(exchange)
    os.chmod(exchange, 0o1777)  # nbgrader's docs: everyone writes, the sticky bit keeps them apart
    try:
        yield {
            "root": course,
            "exchange": exchange,
            "state": os.path.join(shared, "state"),
            "python": accounts["instructor"],
            "student_python": accounts["student"],
        }
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture(scope="module")
def hub(course):
    shutil.rmtree(ARTIFACTS, ignore_errors=True)  # no screenshot of an earlier run
    os.makedirs(ARTIFACTS)
    os.makedirs(course["state"])
    ports = {name: _free_port() for name in ("HUB_PORT", "HUB_PROXY_API_PORT", "HUB_API_PORT")}
    env = dict(
        os.environ,
        HUB_COURSE=course["root"],
        HUB_EXCHANGE=course["exchange"],
        HUB_STATE=course["state"],
        HUB_INSTRUCTOR=INSTRUCTOR,
        HUB_STUDENTS=",".join(STUDENTS),
        HUB_PYTHON=course["student_python"],
        HUB_INSTRUCTOR_PYTHON=course["python"],
        PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
        **{k: str(v) for k, v in ports.items()},
    )
    env.pop("NBGRADER_DB_URL", None)
    log = open(os.path.join(ARTIFACTS, "jupyterhub.log"), "w")
    proc = subprocess.Popen(
        [os.path.join(BIN, "jupyterhub"), "-f", CONFIG],
        cwd=course["state"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{ports['HUB_PORT']}"
    try:
        wait_until_up(proc, f"{url}/hub/health", "the hub", log.name)
        socket_path = os.path.join(course["state"], "formgrader", "formgrader.sock")
        _wait_for_socket(proc, socket_path, log.name)
        yield {"url": url, "env": env, "socket": socket_path}
    finally:
        stop_tree(proc, grace_s=60)  # the hub stops the proxy, the service and the users' servers
        log.close()


def _wait_for_socket(proc, path: str, log_name: str) -> None:
    """Until the formgrader accepts a connection on its socket (root may connect): it starts after the hub answers."""
    deadline = time.monotonic() + START_BOUND_S
    while True:
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(path)
                return
            except OSError:
                pass
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the formgrader did not start on {path} (see {log_name})")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def browser(hub):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def _shot(page, name: str) -> None:
    page.screenshot(path=os.path.join(ARTIFACTS, f"{name}.png"))


def _login(browser, hub, user: str):
    """A browser context of its own (its own cookies), logged in through the hub's PAM login form."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(60_000)  # every wait is bounded
    page = context.new_page()
    page.goto(f"{hub['url']}/hub/login")
    page.locator("#username_input").fill(user)
    page.locator("#password_input").fill(PASSWORD)
    page.locator("#login_submit").click()
    page.wait_for_url(lambda url: "/hub/login" not in url)
    return page


def _formgrader_row(page, hub):
    page.goto(f"{hub['url']}/services/{COURSE_ID}/formgrader/manage_assignments")
    row = page.locator("tr", has_text=A)
    row.wait_for()
    return row


def _formgrader_action(page, row, cell: str) -> None:
    """Click the action of one column of the assignment's row; nbgrader's result dialog must say success."""
    row.locator(f".{cell} a").click()
    dialog = page.locator("#success-modal, #error-modal")
    dialog.first.wait_for(timeout=180_000)
    assert page.locator("#success-modal").count() == 1, dialog.first.inner_text()


def _open_assignments(page):
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    page.locator(".lm-Menu-itemLabel", has_text="Assignment List").click()


def _start_student(browser, hub, student: str, answer: str):
    """Log in, fetch, open the notebook, answer pick_backend and start its check (not waited for)."""
    page = _login(browser, hub, student)
    page.locator("#jp-main-dock-panel").wait_for(timeout=180_000)  # the hub spawned the student's server
    assert f"/user/{student}/" in page.url
    _open_assignments(page)
    page.locator("#released_assignments_list .list_item", has_text=A).get_by_role("button", name="Fetch").click()
    page.locator("#fetched_assignments_list").get_by_role("button", name="Submit").wait_for()
    listing = page.locator(".jp-DirListing-content")
    listing.locator(".jp-DirListing-item", has_text=COURSE_ID).dblclick()
    listing.locator(".jp-DirListing-item", has_text=A).first.dblclick()
    listing.locator(".jp-DirListing-item", has_text=f"{A}.ipynb").dblclick()
    page.locator(".jp-NotebookPanel").wait_for()
    from playwright.sync_api import expect

    expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle", timeout=180_000)
    _run(page, _code_cell(page, f'check = checker("{A}")'))
    cell = _code_cell(page, "def pick_backend() -> str:")
    _write_answer(page, cell, answer)
    _run(page, cell)
    _run(page, _code_cell(page, 'check("pick_backend")'))
    return page


def _saved(student: str) -> str:
    return os.path.join(os.path.expanduser(f"~{student}"), COURSE_ID, A, f"{A}.ipynb")


def _answer_saved(student: str) -> str:
    try:
        with open(_saved(student)) as f:
            return _source_of_cells(json.load(f)["cells"], "pick_backend_answer")
    except (OSError, ValueError):
        return ""


def _source_of_cells(cells, grade_id: str) -> str:
    [cell] = [c for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id]
    return "".join(cell["source"])


def _save_and_submit(page, student: str, expected: str) -> None:
    page.bring_to_front()
    save_from_file_menu(page, lambda: expected in _answer_saved(student))
    assert expected in _answer_saved(student), f"{student}'s notebook was not saved"
    page.locator(".lm-TabBar-tab", has_text="Assignments").click()
    page.locator("#fetched_assignments_list").get_by_role("button", name="Submit").click()
    page.locator("#submitted_assignments_list .list_item", has_text=A).first.wait_for()


def _instructor(hub, course, *cmd: str) -> str:
    env = [
        "env",
        f"PATH={os.path.dirname(course['python'])}:/usr/bin:/bin",
        f"NBGRADER_EXCHANGE={course['exchange']}",
        f"HOME={os.path.expanduser('~' + INSTRUCTOR)}",
    ]
    proc = _as(INSTRUCTOR, *env, *cmd, cwd=course["root"])
    assert proc.returncode == 0, f"{cmd} as the instructor failed:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def test_a_class_on_the_hub(hub, course, browser):
    from playwright.sync_api import expect

    released = os.path.join(ROOT, "exercises", A, f"{A}.ipynb")
    probe = os.path.join(course["root"], "probe-autograde")  # where only the instructor's uid can write
    answers = {
        STUDENTS[0]: _source_of(released, "pick_backend_answer").replace(STUB, CORRECT_PICK_BACKEND),
        STUDENTS[1]: _hostile(probe) + _source_of(released, "pick_backend_answer").replace(STUB, WRONG_PICK_BACKEND),
    }
    pages = {}
    teacher = _login(browser, hub, INSTRUCTOR)
    try:
        # the instructor: the formgrader (a scoped role), not the hub's admin pages
        assert teacher.goto(f"{hub['url']}/services/{COURSE_ID}/formgrader/manage_assignments").status == 200
        assert teacher.goto(f"{hub['url']}/hub/admin").status == 403
        # the instructor generates and releases the assignment in the formgrader (a hub service)
        row = _formgrader_row(teacher, hub)
        _formgrader_action(teacher, row, "assign")
        row = _formgrader_row(teacher, hub)
        row.locator(".release a").click()
        expect(row.locator(".status")).to_contain_text("released", timeout=120_000)
        _shot(teacher, "01-instructor-released")
        assert glob.glob(os.path.join(course["exchange"], COURSE_ID, "outbound", A, f"{A}.ipynb"))

        # two students: fetch, answer, check (both checks run at once), see ✓ and ✗, submit
        for student in STUDENTS:
            pages[student] = _start_student(browser, hub, student, answers[student])
        verdicts = {STUDENTS[0]: "✓ pick_backend: backend_matches_hardware (", STUDENTS[1]: "✗ pick_backend"}
        for n, student in enumerate(STUDENTS):
            page = pages[student]
            out = _code_cell(page, 'check("pick_backend")').locator(".jp-OutputArea")
            expect(out).to_contain_text(verdicts[student], timeout=FIRST_CHECK_S * 1000)
            _code_cell(page, 'check("pick_backend")').scroll_into_view_if_needed()
            _shot(page, f"{2 + n:02d}-{student}-checked")
            assert ("✗" in out.inner_text()) == (n == 1) and ("✓" in out.inner_text()) == (n == 0)
        for student in STUDENTS:
            _save_and_submit(pages[student], student, answers[student].splitlines()[-1].strip())
            _shot(pages[student], f"04-{student}-submitted")
            other = pages[student].context.new_page()  # a student is refused the formgrader
            assert other.goto(f"{hub['url']}/services/{COURSE_ID}/formgrader/manage_assignments").status == 403
            other.close()
        _forge_for_alice(course)  # the formgrader's Collect must refuse it (deploy/hub/instructor)

        # the instructor collects in the formgrader, grades, generates and releases feedback
        row = _formgrader_row(teacher, hub)
        _formgrader_action(teacher, row, "collect")
        _shot(teacher, "05-instructor-collected")
        python = course["python"]
        report = _instructor(hub, course, python, "-m", "grader", "grade", A, "--root", course["root"], "--jobs", "2")
        for student in STUDENTS:  # graded: else the feedback step below fails without saying why
            assert os.path.isfile(os.path.join(course["root"], "autograded", student, A, f"{A}.ipynb")), report
        _autograde_is_refused(teacher, hub, course, probe)
        _instructor(hub, course, python, "-m", "nbgrader", "generate_feedback", A, "--log-level=WARN")
        _instructor(hub, course, python, "-m", "nbgrader", "release_feedback", A, "--log-level=WARN")

        # both students fetch their feedback from the Assignments tab
        for student in STUDENTS:
            page = pages[student]
            page.reload()
            page.locator("#jp-main-dock-panel").wait_for()
            _open_assignments(page)
            page.locator("#submitted_assignments_list").get_by_role("button", name="Fetch Feedback").first.click()
            deadline = time.monotonic() + 60
            pattern = os.path.join(os.path.expanduser(f"~{student}"), COURSE_ID, A, "feedback", "*", f"{A}.html")
            while not glob.glob(pattern) and time.monotonic() < deadline:
                time.sleep(0.5)
            _shot(page, f"06-{student}-feedback")
            [feedback] = glob.glob(pattern)
            html = open(feedback).read()
            assert ("✓ pick_backend" in html) == (student == STUDENTS[0]), student
            assert ("✗ pick_backend" in html) == (student == STUDENTS[1]), student
            assert os.stat(feedback).st_uid == pwd.getpwnam(student).pw_uid
    except Exception:
        for name, page in [("instructor", teacher), *pages.items()]:
            _shot(page, f"failure-{name}")
        raise

    # the grades, as the gradebook has them: only the right answer scores
    scores = gradebook_scores(Course(course["root"]), A)
    points = sum(c.points for c in get_exercise(A).checks_for("pick_backend"))
    assert scores[STUDENTS[0]][0] == points > 0 and scores[STUDENTS[1]][0] == 0, scores
    _students_are_kept_apart(course)


def _hostile(probe: str) -> str:
    """Top-level code in Bob's answer cell: it writes `probe` wherever it runs as the instructor (as Bob, or in the
    sandbox, the write fails and is ignored)."""
    return f"try:\n    open({probe!r}, 'w').write('student code ran as the instructor')\nexcept OSError:\n    pass\n"


def _autograde_is_refused(teacher, hub, course, probe: str) -> None:
    """The formgrader's Autograde button, pressed through the hub for Bob's hostile submission: nbgrader's error
    dialog says to run `make grade`, nothing was written as the instructor, and the autograded notebook that
    `make grade` wrote is still there."""
    from grader.gradebook.refuse_autograde import REFUSAL

    autograded = os.path.join(course["root"], "autograded", STUDENTS[1], A, f"{A}.ipynb")
    with open(autograded, "rb") as f:
        before = f.read()
    teacher.goto(f"{hub['url']}/services/{COURSE_ID}/formgrader/manage_submissions/{A}")
    row = teacher.locator("tr", has_text=STUDENTS[1])
    row.locator(".autograde a").click()
    dialog = teacher.locator("#success-modal, #error-modal")
    dialog.first.wait_for(timeout=180_000)
    _shot(teacher, "05b-instructor-autograde-refused")
    assert teacher.locator("#error-modal").count() == 1, dialog.first.text_content()
    assert REFUSAL in " ".join(teacher.locator("#error-modal").text_content().split()), teacher.locator(
        "#error-modal"
    ).text_content()
    assert not os.path.exists(probe), "the formgrader's Autograde ran student code as the instructor"
    with open(autograded, "rb") as f:
        assert f.read() == before, "the formgrader's Autograde changed what make grade wrote"


def _forge_for_alice(course) -> None:
    """As Bob: his wrong notebook in inbound/, named for Alice and newer than hers (nbgrader would collect it)."""
    alice, bob = STUDENTS
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f %Z")
    folder = os.path.join(course["exchange"], COURSE_ID, "inbound", f"{alice}+{A}+{now}+forged")
    script = (
        f"import os, shutil; d = {folder!r}; os.mkdir(d); shutil.copy({_saved(bob)!r}, d); "
        f"open(os.path.join(d, 'timestamp.txt'), 'w').write({now!r})"
    )
    proc = _as(bob, course["student_python"], "-c", script, cwd="/")
    assert proc.returncode == 0, proc.stderr


def _students_are_kept_apart(course) -> None:
    alice, bob = STUDENTS
    inbound = os.path.join(course["exchange"], COURSE_ID, "inbound")
    [alices_submission] = [
        path for path in glob.glob(os.path.join(inbound, f"{alice}+{A}+*", f"{A}.ipynb")) if "+forged" not in path
    ]
    instructor_copy = os.path.join(course["root"], "submitted", alice, A, f"{A}.ipynb")
    solution = os.path.join(course["root"], "solutions", A, f"{A}.ipynb")
    for path in (_saved(alice), alices_submission, instructor_copy, solution):
        assert os.path.isfile(path), path
    assert _as(alice, "cat", _saved(alice)).returncode == 0  # the owner can (the paths are right)
    # bob, as bob: not alice's work, not her submission (inbound cannot be listed), not the course directory
    for cmd in (
        ["cat", _saved(alice)],
        ["ls", os.path.dirname(os.path.expanduser(f"~{alice}/x"))],
        ["sh", "-c", f"cat {inbound}/{alice}+*/{A}.ipynb"],
        ["ls", inbound],
        ["cat", instructor_copy],
        ["cat", solution],
        ["ls", course["root"]],
        ["ls", os.path.dirname(os.path.dirname(os.path.dirname(course["python"])))],
    ):
        proc = _as(bob, *cmd)
        assert proc.returncode != 0 and ("Permission denied" in proc.stderr or "No such file" in proc.stderr), (
            cmd,
            proc.stdout[:200],
            proc.stderr,
        )
        assert '"cells"' not in proc.stdout
    # bob's Python is the students' environment: its own grader, which has no hidden module
    student = course["student_python"]
    where = _as(bob, student, "-c", "import grader; print(grader.__file__)", cwd="/")
    env_root = os.path.dirname(os.path.dirname(os.path.dirname(student)))
    assert where.returncode == 0 and where.stdout.strip().startswith(env_root + os.sep), (where.stdout, where.stderr)
    hidden = _as(bob, student, "-c", "import grader.exercises.ddp_basics.hidden_training", cwd="/")
    assert hidden.returncode != 0 and "ModuleNotFoundError" in hidden.stderr, hidden.stderr
    assert os.path.exists(os.path.join(ROOT, "grader", "exercises", "ddp_basics", "hidden_training.py"))


def test_the_formgrader_is_reached_only_through_the_hub(hub, course):
    """The formgrader listens on a Unix socket in a folder of the instructor's (0700) and on no TCP port: a student
    can neither connect to it nor put a socket in its place; and the socket itself still asks for the hub's login."""
    path = hub["socket"]
    folder = os.path.dirname(path)
    st = os.lstat(folder)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == pwd.getpwnam(INSTRUCTOR).pw_uid, folder
    assert stat.S_IMODE(st.st_mode) == 0o700, oct(st.st_mode)
    # the formgrader's process (the instructor's, with --ServerApp.sock) listens on no TCP port
    servers = [
        p
        for p in psutil.process_iter(["cmdline", "username"])
        if p.info["username"] == INSTRUCTOR and f"--ServerApp.sock={path}" in (p.info["cmdline"] or [])
    ]
    assert len(servers) == 1, [p.info for p in servers]
    assert [c for c in servers[0].net_connections(kind="inet") if c.status == psutil.CONN_LISTEN] == []
    # a student, on this machine, cannot connect to it, nor bind a socket beside it
    for student in STUDENTS:
        for call in (f"s.connect({path!r})", f"s.bind({os.path.join(folder, 'squat.sock')!r})"):
            probe = f"import socket; s = socket.socket(socket.AF_UNIX); {call}"
            proc = _as(student, course["student_python"], "-c", probe, cwd="/")
            assert proc.returncode != 0 and "PermissionError" in proc.stderr, (student, call, proc.stderr)
    assert os.listdir(folder) == [os.path.basename(path)]
    # the instructor can connect, and a request without the hub's login is sent to the hub's OAuth, not served
    request = (
        "import http.client, socket\n"
        "class Conn(http.client.HTTPConnection):\n"
        "    def connect(self):\n"
        f"        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect({path!r})\n"
        "conn = Conn('localhost', timeout=60)\n"
        f"conn.request('GET', '/services/{COURSE_ID}/formgrader/manage_assignments')\n"
        "reply = conn.getresponse(); body = reply.read()\n"
        "print(reply.status, reply.getheader('Location'), b'manage_assignments' in body)\n"
    )
    proc = _as(INSTRUCTOR, course["python"], "-c", request, cwd="/")
    assert proc.returncode == 0, proc.stderr
    status, location, served = proc.stdout.split()
    assert status == "302" and "/hub/api/oauth2/authorize" in location and served == "False", proc.stdout


def test_the_hub_refuses_a_socket_folder_others_can_enter(course):
    """The formgrader's socket folder: the hub makes it for the instructor alone, and refuses one that is a link,
    someone else's, open to others, out of the instructor's reach, or in a folder others may write, saying why (the
    config stops before any server starts)."""
    teacher, student = pwd.getpwnam(INSTRUCTOR), pwd.getpwnam(STUDENTS[1])
    base = tempfile.mkdtemp(prefix="hub-socket-")
    os.chmod(base, 0o755)

    def folder(name: str, owner, mode: int) -> str:
        path = os.path.join(base, name)
        os.mkdir(path, mode)
        os.chmod(path, mode)
        os.chown(path, owner.pw_uid, owner.pw_gid)
        return path

    made = os.path.join(base, "made")
    os.symlink(folder("theirs", teacher, 0o700), os.path.join(base, "link"))
    cases = {
        made: "",
        os.path.join(base, "link"): "must be a folder owned by",
        folder("a-students", student, 0o700): "must be a folder owned by",
        folder("open", teacher, 0o755): "must be a folder owned by",
        os.path.join(folder("closed", pwd.getpwnam("root"), 0o700), "sock"): "cannot enter",
        os.path.join(folder("shared", pwd.getpwnam("root"), 0o777), "sock"): "other accounts may write",
    }
    load = "from traitlets.config.loader import PyFileConfigLoader as L; L(%r).load_config()" % CONFIG
    try:
        for path, refusal in cases.items():
            env = dict(
                os.environ,
                HUB_COURSE=course["root"],
                HUB_STATE=base,
                HUB_INSTRUCTOR=INSTRUCTOR,
                HUB_PYTHON=course["student_python"],
                HUB_INSTRUCTOR_PYTHON=course["python"],
                HUB_SERVICE_SOCKET_DIR=path,
            )
            proc = subprocess.run([sys.executable, "-c", load], env=env, capture_output=True, text=True, timeout=120)
            if refusal:
                assert proc.returncode != 0 and refusal in proc.stderr and path in proc.stderr, (path, proc.stderr)
            else:
                assert proc.returncode == 0, proc.stderr
        st = os.lstat(made)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (teacher.pw_uid, 0o700)
    finally:
        shutil.rmtree(base, ignore_errors=True)
