"""What builds the course: the commands an author runs to make the exercises, their points and the students' grader.

    points.py               python -m grader points: the check cells' points, stamped from the checks (make exercises)
    points_preprocessor.py  nbgrader's generate_assignment refuses check cells whose points disagree (nbgrader_config.py)
    scaffold.py             python -m grader new-exercise: a new exercise's package, solution notebook and tests
    scaffold_templates.py   the files the scaffold writes
    student_build.py        python -m grader student-build: the grader a student's server may hold (no hidden_*.py)

Nothing a student's notebook runs imports these (tests/test_layers.py).
"""
