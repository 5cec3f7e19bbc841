"""The nbgrader glue: grading a class into nbgrader's own gradebook.

- course.py    the course directory and its nbgrader configuration
- preflight.py what a grading run needs, checked before anything is graded or written
- submitted_files.py what may lie under submitted/: plain files and folders of a bounded size (else that
               submission is refused alone)
- course_access.py one line when other accounts can read the course or the hidden checks (make lab, make grade)
- snapshot.py  what was submitted, read once, and proof it was not touched
- batch.py     parallel, resumable grading outside the students' kernels; flags
               (where student code runs meanwhile, the sandbox and the workers: grader/isolation/)
- grading_jobs.py the jobs of one run: GPUs shared out, a cgroup (or fewer jobs), a uid each, the worker pool
- grade_job.py one submission graded in a worker (the public, hidden or both phases); the phases merged
- results.py   graded/<assignment>/: written by the parent only, forgeries put back
- inject.py    the results into nbgrader (from the snapshot's copy, never submitted/): autograded notebooks,
               gradebook scores, late penalty, flags
- feedback.py  feedback shows the ✓/✗ lines, not check()'s points
- refuse_autograde.py nbgrader's own autograde (the formgrader's button) refused: it would run student code unsandboxed
- refuse_validate.py nbgrader's Validate runs only the course's notebooks and students' fetched copies
- vetted_collect.py, collect.py  every collect: only a student's own plain files, never forged, postdated or backdated
- report.py    the class report (which DDP mistakes the class makes most)
- roundtrip.py the whole loop: release, fetch, submit, collect, grade, feedback, export
- commands.py  python -m grader grade | report (and the internal _grade-worker)
"""
