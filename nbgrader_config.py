"""nbgrader configuration of the course.

The course directory is this repository: `solutions/` holds the source
notebooks (solutions and tests), `exercises/` the student release that
`nbgrader generate_assignment` writes from them (`make exercises`).
"""

import os

c = get_config()  # noqa: F821 (provided by nbgrader)

here = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.root = here
c.CourseDirectory.course_id = "ddp-course"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
# The embedded SQLite gradebook; for a large course point it at PostgreSQL:
#   c.CourseDirectory.db_url = "postgresql://user:password@host/gradebook"
c.CourseDirectory.db_url = os.environ.get("NBGRADER_DB_URL", "sqlite:///" + os.path.join(here, "gradebook.db"))
# A local exchange, so the whole course works on one laptop.
c.Exchange.root = os.environ.get("NBGRADER_EXCHANGE", os.path.join(here, ".nbgrader", "exchange"))
c.Exchange.path_includes_course = True
# nbgrader's cache (what this account fetched and submitted) is one per user by default, shared by every clone and
# course on a laptop: `make lab` gives this course its own (NBGRADER_CACHE, .nbgrader/cache), so that the Assignment
# List shows no other clone's or course's submissions. A hub's student servers keep nbgrader's per-user default.
if os.environ.get("NBGRADER_CACHE"):
    c.Exchange.cache = os.environ["NBGRADER_CACHE"]
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
# The check cells print their own verdicts; nbgrader only needs their exit status (nbgrader validate).
c.ExecutePreprocessor.timeout = 600
# nbgrader's own autograde (the formgrader's Autograde button, `nbgrader autograde`) would run student code
# unsandboxed, as you: refused, with one line saying to run `make grade` (grader/gradebook/refuse_autograde.py).
from grader.gradebook.refuse_autograde import RefuseAutogradeExporter, autograde_preprocessors  # noqa: E402

c.Autograde.exporter_class = RefuseAutogradeExporter
c.Autograde.autograde_preprocessors = autograde_preprocessors()
# nbgrader's validate (the Validate button, `nbgrader validate`) runs only the course's own notebooks (solutions/,
# exercises/) and students' fetched copies (ddp-course/<assignment>/): a submission is refused in one line, since
# nbgrader would run it unsandboxed, as you (grader/gradebook/refuse_validate.py).
from grader.gradebook.refuse_validate import refuse_validate  # noqa: E402

refuse_validate()
# Every collect (`nbgrader collect`, the formgrader's Collect button, `make collect`) copies only plain files a
# student owns, never through a link, and refuses forged, postdated or backdated submissions (vetted_collect.py).
c.ExchangeFactory.collect = "grader.gradebook.vetted_collect.VettedCollect"
# Feedback shows each check's verdict, never the code of hidden tests.
# Generating refuses check cells whose points are not the checks' (grader/course/points_preprocessor.py).
from nbgrader.converters import GenerateAssignment  # noqa: E402

c.GenerateAssignment.preprocessors = [
    "grader.course.points_preprocessor.RefuseStalePoints",
    *GenerateAssignment.class_traits()["preprocessors"].default(),
]
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "grader.gradebook.feedback.StripCheckPoints",  # the ✓/✗ lines, not check()'s points (partial credit, saved)
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
