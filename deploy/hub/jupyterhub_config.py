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
  Unix socket in a folder only the instructor may enter (HUB_SERVICE_SOCKET_DIR,
  default HUB_STATE/formgrader): no other account can connect to it or take
  its place, and it listens on no TCP port; the proxy (root) reaches it there.
  Every request needs the hub's OAuth and the role's access scope (students
  get 403). Its Collect
  refuses submissions made in another student's name, postdated or backdated
  (grader/gradebook/vetted_collect.py, set in deploy/hub/instructor/).
- One shared exchange directory (nbgrader's default exchange, mode 1777 as
  nbgrader's docs say); students' servers get its path and the course id from
  deploy/hub/student/ (copied into the students' environment), without the instructor's tools.
- configurable-http-proxy from npm (deploy/hub/node_modules), on 127.0.0.1.

Everything is set from the environment (make hub sets the defaults):
HUB_PORT, HUB_COURSE, HUB_INSTRUCTOR, HUB_STUDENTS (comma-separated),
HUB_EXCHANGE, HUB_STATE (the hub's database, cookie secret, logs),
HUB_SERVICE_SOCKET_DIR (the formgrader's socket folder), HUB_PYTHON (the students' Python, default
/srv/ddp-course/student-env/venv/bin/python), HUB_INSTRUCTOR_PYTHON (the
formgrader's, default the course's .venv, else the hub's own).
"""

import os
import pwd
import stat
import sys
from urllib.parse import quote

from jupyterhub.proxy import ConfigurableHTTPProxy

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


def _private_to_instructor(path: str, what: str) -> None:
    """Stop the hub unless `path` lies in a folder of the instructor's that no other account may enter."""
    uid = pwd.getpwnam(INSTRUCTOR).pw_uid
    folder = os.path.realpath(path)
    while True:
        st = os.stat(folder)
        if st.st_uid == uid and not st.st_mode & 0o077:
            return
        if folder == os.path.dirname(folder):
            raise SystemExit(
                f"jupyterhub_config: {what} ({path}) is readable by students: it must lie in a folder "
                f"owned by {INSTRUCTOR} with mode 0700 (chown {INSTRUCTOR} DIR; chmod 700 DIR)"
            )
        folder = os.path.dirname(folder)


_private_to_instructor(COURSE, "the course directory")
_private_to_instructor(os.path.dirname(os.path.dirname(INSTRUCTOR_PYTHON)), "the instructor's environment")
if not os.path.exists(PYTHON):
    raise SystemExit(
        f"jupyterhub_config: no students' Python at {PYTHON}: "
        "python deploy/hub/student_env.py DEST builds one (make hub does)"
    )

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

# the instructor's formgrader: a hub service, run as the instructor in the course directory, on a Unix socket in a
# folder of the instructor's (0700). On a local TCP port any account could connect to it, or bind that port first
# (while the service starts or restarts) and receive the instructor's requests through the proxy. JupyterHub 6.1
# takes only http[s] service URLs and its internal_ssl signs every server's key with the same CA, so a student's
# own server key would pass for the formgrader's; configurable-http-proxy (5.x) proxies to http+unix targets.
SOCKET_DIR = env("HUB_SERVICE_SOCKET_DIR", os.path.join(STATE, "formgrader"))
SOCKET = os.path.join(SOCKET_DIR, "formgrader.sock")
SOCKET_TARGET = "http+unix://" + quote(SOCKET, safe="")
# The URL the hub knows the service by (it takes only http[s]): the hub's own internal address, which answers while
# the hub runs, whatever bind_url a deployment sets; the proxy class below swaps it for the socket in the route. So
# the hub's start-up wait and periodic health check of the service see the hub, not the formgrader (the tests do).
SERVICE_URL = f"http://127.0.0.1:{c.JupyterHub.hub_port}"


def _instructor_only_folder(path: str) -> None:
    """Make `path` a folder that only the instructor (and root) may enter, or stop if it is anything else."""
    user = pwd.getpwnam(INSTRUCTOR)
    try:
        os.mkdir(path, 0o700)
        os.chown(path, user.pw_uid, user.pw_gid)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != user.pw_uid or stat.S_IMODE(st.st_mode) != 0o700:
        raise SystemExit(
            f"jupyterhub_config: the formgrader's socket folder {path} must be a folder owned by "
            f"{INSTRUCTOR} with mode 0700 (remove it and the hub makes it; HUB_SERVICE_SOCKET_DIR "
            "chooses another)"
        )
    folder = os.path.dirname(os.path.realpath(path))
    while True:  # the instructor must be able to reach it, and no one else to move it or a folder above it
        st = os.stat(folder)
        if not (st.st_mode & stat.S_IXOTH or (st.st_uid == user.pw_uid and st.st_mode & stat.S_IXUSR)):
            raise SystemExit(
                f"jupyterhub_config: {INSTRUCTOR} cannot enter {folder}, on the way to the "
                f"formgrader's socket folder {path} (HUB_SERVICE_SOCKET_DIR chooses another)"
            )
        if st.st_uid not in (0, user.pw_uid) or (
            st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX
        ):
            raise SystemExit(
                f"jupyterhub_config: other accounts may write {folder}, above the formgrader's "
                f"socket folder {path}, and so replace it (HUB_SERVICE_SOCKET_DIR chooses another)"
            )
        if folder == os.path.dirname(folder):
            return
        folder = os.path.dirname(folder)


class FormgraderOnSocket(ConfigurableHTTPProxy):
    """configurable-http-proxy, with the formgrader's route leading to its socket.

    The hub, which only takes http[s] service URLs, adds and checks that route with SERVICE_URL as its target;
    here the proxy is given the socket instead, and the hub is shown the target it expects back.
    """

    async def add_route(self, routespec, target, data):
        if data.get("service") == COURSE_ID:
            target = SOCKET_TARGET
        return await super().add_route(routespec, target, data)

    async def get_all_routes(self):
        routes = await super().get_all_routes()
        for route in routes.values():
            if route["data"].get("service") == COURSE_ID and route["target"] == SOCKET_TARGET:
                route["target"] = SERVICE_URL
        return routes


_instructor_only_folder(SOCKET_DIR)
c.JupyterHub.proxy_class = FormgraderOnSocket
c.JupyterHub.services = [
    {
        "name": COURSE_ID,
        "url": SERVICE_URL,
        # jupyter_server refuses --sock beside any port but its default one, and the hub's environment for the service
        # names SERVICE_URL's port: the default port here only lets the socket be used (it binds no TCP port)
        "command": [
            INSTRUCTOR_PYTHON,
            "-m",
            "jupyterhub.singleuser",
            f"--ServerApp.root_dir={COURSE}",
            f"--ServerApp.sock={SOCKET}",
            "--ServerApp.sock_mode=0600",
            "--ServerApp.port=8888",
        ],
        "user": INSTRUCTOR,
        "cwd": COURSE,
        "environment": {
            "PATH": INSTRUCTOR_PATH,
            "NBGRADER_EXCHANGE": EXCHANGE,
            "JUPYTERHUB_DEFAULT_URL": "/lab",
            "HOME": os.path.expanduser(f"~{INSTRUCTOR}"),
            "JUPYTER_CONFIG_PATH": os.path.join(HERE, "instructor"),
        },  # its Collect: the vetted one
        "oauth_no_confirm": True,
    }
]
c.JupyterHub.load_groups = {f"formgrade-{COURSE_ID}": {"users": [INSTRUCTOR]}}
c.JupyterHub.load_roles = [
    {  # the instructor's only rights beyond their own server
        "name": f"formgrade-{COURSE_ID}",
        "groups": [f"formgrade-{COURSE_ID}"],
        "scopes": [f"access:services!service={COURSE_ID}", "list:services", f"read:services!service={COURSE_ID}"],
    }
]
