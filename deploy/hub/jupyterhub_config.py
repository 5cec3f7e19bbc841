"""JupyterHub for one course, with nbgrader's multi-user setup (`make hub`).

- Real local accounts, PAM login, each server spawned as its user
  (LocalProcessSpawner): student files stay apart by the OS's permissions,
  homes are 0700.
- The instructor's formgrader is a hub service named after the course
  (`/services/ddp-course/`), a Jupyter server run as the instructor in the
  course directory (this repository's layout: nbgrader_config.py, solutions/,
  exercises/); only the instructor's group may open it.
- One shared exchange directory (nbgrader's default exchange, mode 1777 as
  nbgrader's docs say); students' servers get its path and the course id from
  deploy/hub/student/ (JUPYTER_CONFIG_PATH), without the instructor's tools.
- configurable-http-proxy from npm (deploy/hub/node_modules), on 127.0.0.1.

Everything is set from the environment (make hub sets the defaults):
HUB_PORT, HUB_COURSE, HUB_INSTRUCTOR, HUB_STUDENTS (comma-separated),
HUB_EXCHANGE, HUB_STATE (the hub's database, cookie secret, logs), HUB_PYTHON
(the course's Python for every server: every account must be able to run it,
so not one under a private home; default: the hub's own).
"""
import os
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
PYTHON = env("HUB_PYTHON", sys.executable)  # the course's venv: JupyterLab, nbgrader, the grader
PATH = os.path.dirname(PYTHON) + os.pathsep + env("PATH", "/usr/bin:/bin")

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
c.Authenticator.admin_users = {INSTRUCTOR}

# each user's own server, as that user, in their home (DockerSpawner or KubeSpawner in a real course)
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [PYTHON, "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 120
c.Spawner.start_timeout = 120
c.Spawner.environment = {
    "PATH": PATH,
    "NBGRADER_EXCHANGE": EXCHANGE,
    "JUPYTER_CONFIG_PATH": os.path.join(HERE, "student"),  # course id, exchange, no instructor tools
}

# the instructor's formgrader: a hub service, run as the instructor in the course directory
SERVICE_PORT = int(env("HUB_SERVICE_PORT", str(PORT + 99)))
c.JupyterHub.services = [{
    "name": COURSE_ID,
    "url": f"http://127.0.0.1:{SERVICE_PORT}",
    "command": [PYTHON, "-m", "jupyterhub.singleuser", f"--ServerApp.root_dir={COURSE}"],
    "user": INSTRUCTOR,
    "cwd": COURSE,
    "environment": {"PATH": PATH, "NBGRADER_EXCHANGE": EXCHANGE, "JUPYTERHUB_DEFAULT_URL": "/lab",
                    "HOME": os.path.expanduser(f"~{INSTRUCTOR}")},
    "oauth_no_confirm": True,
}]
c.JupyterHub.load_groups = {f"formgrade-{COURSE_ID}": {"users": [INSTRUCTOR]}}
c.JupyterHub.load_roles = [{
    "name": f"formgrade-{COURSE_ID}",
    "groups": [f"formgrade-{COURSE_ID}"],
    "scopes": [f"access:services!service={COURSE_ID}", "list:services", f"read:services!service={COURSE_ID}"],
}]
