"""The nbgrader glue: grading a class into nbgrader's own gradebook.

- course.py    the course directory and its nbgrader configuration
- snapshot.py  what was submitted, read once, and proof it was not touched
- batch.py     parallel, resumable grading outside the students' kernels
- inject.py    the results into nbgrader: autograded notebooks, gradebook scores
- report.py    the class report (which DDP mistakes the class makes most)
- roundtrip.py the whole loop: release, fetch, submit, collect, grade, feedback, export
"""
