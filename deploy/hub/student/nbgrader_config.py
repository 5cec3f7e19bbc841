"""nbgrader in a student's server on the hub (JUPYTER_CONFIG_PATH points here):
the course and the shared exchange; students never see the course directory."""

import os

c = get_config()  # noqa: F821 (provided by nbgrader)
c.CourseDirectory.course_id = "ddp-course"
c.Exchange.root = os.environ.get("NBGRADER_EXCHANGE", "/srv/nbgrader/exchange")
c.Exchange.path_includes_course = True
