"""nbgrader in the instructor's formgrader on the hub (JUPYTER_CONFIG_PATH points here): its Collect refuses a
submission in another student's name, postdated or backdated (grader/gradebook/vetted_collect.py)."""
c = get_config()  # noqa: F821 (provided by nbgrader)
c.ExchangeFactory.collect = "grader.gradebook.vetted_collect.VettedCollect"
