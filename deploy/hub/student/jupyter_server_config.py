"""A student's server on the hub: no formgrader, no assignment creation (instructor tools)."""

c = get_config()  # noqa: F821
c.ServerApp.jpserver_extensions = {"nbgrader.server_extensions.formgrader": False}
