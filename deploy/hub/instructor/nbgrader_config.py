"""nbgrader in the instructor's formgrader on the hub (JUPYTER_CONFIG_PATH points here): its Collect refuses a
submission in another student's name, postdated or backdated (grader/gradebook/vetted_collect.py); its Autograde
refuses, saying to run `make grade` (grader/gradebook/refuse_autograde.py: nbgrader's would run student code
unsandboxed, as the instructor); its Validate runs no submission (grader/gradebook/refuse_validate.py: only
solutions/, exercises/ and students' fetched copies), whatever the course's own nbgrader_config.py says."""

from grader.gradebook.refuse_autograde import RefuseAutogradeExporter, autograde_preprocessors
from grader.gradebook.refuse_validate import refuse_validate

c = get_config()  # noqa: F821 (provided by nbgrader)
c.Autograde.exporter_class = RefuseAutogradeExporter
c.Autograde.autograde_preprocessors = autograde_preprocessors()
c.ExchangeFactory.collect = "grader.gradebook.vetted_collect.VettedCollect"
refuse_validate()
