"""What instructors run: the checks of a machine and of the course before a class, and the whole loop on samples.

    selfcheck.py        python -m grader selfcheck (make selfcheck): the solutions and known mistakes graded on
                        this machine's hardware
    gpucheck.py         python -m grader gpucheck (make gpucheck): the GPU path on this machine, a verdict a line
    gpucheck_facts.py   the facts gpucheck measures (first-use times, a rank's host memory), written as JSON
    demo.py             python -m grader demo (make demo): the instructor's whole loop on the sample class

Grading a class lives beside this package: grader/gradebook/ (nbgrader's glue) and grader/isolation/ (where
student code runs).
"""
