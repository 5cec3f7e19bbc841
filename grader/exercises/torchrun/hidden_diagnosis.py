"""Hidden checks of checks_diagnosis.py (instructor only: a student build leaves this module out): hung jobs drawn
afresh at every grading, so that no list of answers exists anywhere; each answer follows from how its hang was
built (hangs.py), and every draw holds the traps the typical mistakes fall into."""

from __future__ import annotations

import random

from grader.exercises.torchrun.checks_diagnosis import check_hangs
from grader.exercises.torchrun import EXERCISE
from grader.exercises.torchrun.hangs import Hang, random_hang, stuck_at_start


def unseen_hangs(rng: random.Random) -> list[Hang]:
    def seed() -> int:
        return rng.randrange(2**32)

    return [
        random_hang(seed(), 4, behind=rng.randrange(1, 4), buffer=6),  # every buffer full: entry counts tie
        random_hang(seed(), 16, behind=rng.randrange(1, 16), buffer=10),
        random_hang(seed(), 2, behind=0),  # rank 0 is behind this time
        random_hang(seed(), 8, behind=rng.randrange(1, 8), buffer=5),
        random_hang(seed(), 3),
        stuck_at_start(seed(), rng.choice([2, 4, 8])),  # a rank that never called a collective: empty entries
    ]


# make selfcheck grades the solution with this line replaced: its task must score less than full marks.
EXERCISE.typical_mistakes.append(("behind = min(newest, key=newest.get)", "behind = max(newest, key=newest.get)"))


@EXERCISE.check(
    "diagnose_hang",
    points=1,
    hidden=True,
    feedback="Hidden hung jobs: 2 to 16 ranks, any rank behind (rank 0 included), buffers that keep "
    "only the newest entries, and a rank that never called a collective (empty entries).",
    depends_on=("diagnose_hang_names_the_rank_behind",),
)
def diagnose_hang_on_unseen_hangs(g):
    """Six hung jobs drawn at this grading: 2 to 16 ranks, full ring buffers, rank 0 behind once, and a rank
    stuck before its first collective."""
    check_hangs(g, unseen_hangs(random.Random(random.SystemRandom().randrange(2**63))), "hidden hung job")
