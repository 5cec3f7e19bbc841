"""Hidden checks of checks_diagnosis.py (instructor only: a student build leaves this module out): hung jobs the
student has not seen, drawn from seeds only this file holds."""
from __future__ import annotations

from grader.exercises.torchrun.checks_diagnosis import check_hangs
from grader.exercises.torchrun.exercise import EXERCISE
from grader.exercises.torchrun.hangs import Hang, random_hang

UNSEEN = [
    random_hang(4101, 4, behind=3, buffer=6),  # every rank's buffer full: counting entries ties
    random_hang(4102, 16, behind=9, buffer=10),
    random_hang(4103, 2, behind=0),  # rank 0 is behind this time
    random_hang(4104, 8, behind=6, buffer=5),
    random_hang(4105, 3, behind=1),
    # a rank stuck before its first collective (loading data): its entries are empty
    Hang(4, 1, 1, ("nccl:broadcast", "nccl:all_reduce", "nccl:all_reduce"), (2, 0, 1, 0)),
]


@EXERCISE.check("diagnose_hang", points=1, hidden=True,
                feedback="Hidden hung jobs: 2 to 16 ranks, any rank behind (rank 0 included), buffers that keep "
                         "only the newest entries, and a rank that never called a collective (empty entries).")
def diagnose_hang_on_unseen_hangs(g):
    """Six hung jobs the notebook does not show: 2 to 16 ranks, full ring buffers, rank 0 behind once, and a
    rank stuck before its first collective."""
    check_hangs(g, UNSEEN, "hidden hung job")
