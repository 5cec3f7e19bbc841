"""JupyterHub for one course, with nbgrader's multi-user setup (`make hub`).

- Real local accounts, PAM login, each server spawned as its user
  (LocalProcessSpawner): student files stay apart by the OS's permissions,
  homes are 0700.
- Students' servers run the students' environment (HUB_PYTHON, built by
  deploy/hub/student_env.py: `make student` in a venv of its own): public
  checks only, no hidden modules, no solutions. The course directory and the
  instructor's environment must be private to the instructor (0700): the hub
  refuses to start otherwise.
- The instructor is no admin: a role gives access to the formgrader service
  (the `formgrade-<course>` group) and nothing else of other users.
- The formgrader is a hub service named after the course
  (`/services/ddp-course/`), a Jupyter server run as the instructor, with the
  instructor's Python (HUB_INSTRUCTOR_PYTHON), in the course directory, on a
  local port chosen at start; every request needs the hub's OAuth and the
  role's access scope (students get 403). Its Collect
  refuses submissions made in another student's name, postdated or backdated
  (grader/gradebook/vetted_collect.py, set in deploy/hub/instructor/).
- One shared exchange directory (nbgrader's default exchange, mode 1777 as
  nbgrader's docs say); students' servers get its path and the course id from
  deploy/hub/student/ (copied into the students' environment), without the instructor's tools.
- configurable-http-proxy from npm (deploy/hub/node_modules), on 127.0.0.1.

Everything is set from the environment (make hub sets the defaults):
HUB_PORT, HUB_COURSE, HUB_INSTRUCTOR, HUB_STUDENTS (comma-separated),
HUB_EXCHANGE, HUB_STATE (the hub's database, cookie secret, logs),
HUB_SERVICE_PORT (the formgrader's, default a free one), HUB_PYTHON (the students' Python, default
/srv/ddp-course/student-env/venv/bin/python), HUB_INSTRUCTOR_PYTHON (the
formgrader's, default the course's .venv, else the hub's own).
"""
import os
import pwd
import socket
import sys

c = get_config()  # noqa: F821 (provided by JupyterHub)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
COURSE_ID = "ddp-course"  # nbgrader_config.py; the service must carry the course's name
env = os.environ.get
PORT = int(env("HUB_PORT", "8000"))
STATE = env("HUB_STATE", os.path.join(REPO, "build", "hub"))
COURSE = env("HUB_COURSE", REPO)
EXCHANGE = env("HUB_EXCHANGE", "/srv/nbgrader/exchange")
INSTRUCTOR = env("HUB_INSTRUCTOR", "instructor")
STUDENTS = [s for s in env("HUB_STUDENTS", "").split(",") if s]
PYTHON = env("HUB_PYTHON", "/srv/ddp-course/student-env/venv/bin/python")  # students: no hidden checks
_course_python = os.path.join(COURSE, ".venv", "bin", "python")
INSTRUCTOR_PYTHON = env("HUB_INSTRUCTOR_PYTHON", _course_python if os.path.exists(_course_python) else sys.executable)
PATH = os.path.dirname(PYTHON) + os.pathsep + env("PATH", "/usr/bin:/bin")
INSTRUCTOR_PATH = os.path.dirname(INSTRUCTOR_PYTHON) + os.pathsep + env("PATH", "/usr/bin:/bin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _private_to_instructor(path: str, what: str) -> None:
    """Stop the hub unless `path` lies in a folder of the instructor's that no other account may enter."""
    uid = pwd.getpwnam(INSTRUCTOR).pw_uid
    folder = os.path.realpath(path)
    while True:
        st = os.stat(folder)
        if st.st_uid == uid and not st.st_mode & 0o077:
            return
        if folder == os.path.dirname(folder):
            raise SystemExit(f"jupyterhub_config: {what} ({path}) is readable by students: it must lie in a folder "
                             f"owned by {INSTRUCTOR} with mode 0700 (chown {INSTRUCTOR} DIR; chmod 700 DIR)")
        folder = os.path.dirname(folder)


_private_to_instructor(COURSE, "the course directory")
_private_to_instructor(os.path.dirname(os.path.dirname(INSTRUCTOR_PYTHON)), "the instructor's environment")
if not os.path.exists(PYTHON):
    raise SystemExit(f"jupyterhub_config: no students' Python at {PYTHON}: "
                     "python deploy/hub/student_env.py DEST builds one (make hub does)")

# the hub, its proxy and the servers listen on 127.0.0.1 only
c.JupyterHub.bind_url = f"http://127.0.0.1:{PORT}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(env("HUB_API_PORT", str(PORT + 81)))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{env('HUB_PROXY_API_PORT', str(PORT + 1))}"
c.ConfigurableHTTPProxy.command = [os.path.join(HERE, "node_modules", ".bin", "configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = os.path.join(STATE, "proxy.pid")
c.JupyterHub.db_url = "sqlite:///" + os.path.join(STATE, "jupyterhub.sqlite")
c.JupyterHub.cookie_secret_file = os.path.join(STATE, "jupyterhub_cookie_secret")

# who may log in: real accounts through PAM (a real course swaps in OAuth or LTI here)
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.open_sessions = False  # no login sessions (systemd-logind) for servers
c.Authenticator.allowed_users = {INSTRUCTOR, *STUDENTS}
c.Authenticator.admin_users = set()  # nobody: the instructor's role below is all the instructor needs

# each user's own server, as that user, in their home (DockerSpawner or KubeSpawner in a real course)
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [PYTHON, "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 120
c.Spawner.start_timeout = 120
c.Spawner.environment = {
    "PATH": PATH,
    "NBGRADER_EXCHANGE": EXCHANGE,
    # course id, exchange, no instructor tools: deploy/hub/student, copied by student_env.py beside the venv
    "JUPYTER_CONFIG_PATH": os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(PYTHON))), "jupyter-config"),
}

# the instructor's formgrader: a hub service, run as the instructor in the course directory. JupyterHub 6.1
# refuses a Unix socket for a service ("Must be http[s]") and, with internal_ssl, leaves the service's key where
# only root reads it: a local port, chosen at random at each start unless HUB_SERVICE_PORT says.
SERVICE_PORT = int(env("HUB_SERVICE_PORT") or _free_port())
c.JupyterHub.services = [{
    "name": COURSE_ID,
    "url": f"http://127.0.0.1:{SERVICE_PORT}",
    "command": [INSTRUCTOR_PYTHON, "-m", "jupyterhub.singleuser", f"--ServerApp.root_dir={COURSE}"],
    "user": INSTRUCTOR,
    "cwd": COURSE,
    "environment": {"PATH": INSTRUCTOR_PATH, "NBGRADER_EXCHANGE": EXCHANGE, "JUPYTERHUB_DEFAULT_URL": "/lab",
                    "HOME": os.path.expanduser(f"~{INSTRUCTOR}"),
                    "JUPYTER_CONFIG_PATH": os.path.join(HERE, "instructor")},  # its Collect: the vetted one
    "oauth_no_confirm": True,
}]
c.JupyterHub.load_groups = {f"formgrade-{COURSE_ID}": {"users": [INSTRUCTOR]}}
c.JupyterHub.load_roles = [{  # the instructor's only rights beyond their own server
    "name": f"formgrade-{COURSE_ID}",
    "groups": [f"formgrade-{COURSE_ID}"],
    "scopes": [f"access:services!service={COURSE_ID}", "list:services", f"read:services!service={COURSE_ID}"],
}]
