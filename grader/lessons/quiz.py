"""The lessons' Quick Checks: check a student's answers, and read them back from a saved lesson.

Taught: the "Quick Check" section at the end of each lesson (lessons/0N_*.ipynb). In the lesson:

    answers = {"q1": "", "q2": "", ...}      # the student's letters
    check("02_ddp_basics", answers)          # ✓/✗ and a one-line explanation per answered question

The key is not stored here in plain text: each question keeps a random salt and the truncated
SHA-256 of salt and right letter (tests/test_quiz.py holds the plain key). With four options a
determined reader can still try every letter; the hash only keeps the key from being read at a glance.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
from dataclasses import dataclass

ANSWERS_TAG = "quiz-answers"  # the metadata tag of the lesson cell that holds `answers = {...}`


@dataclass(frozen=True)
class Question:
    salt: str
    digest: str  # sha256(f"{salt}:{letter}")[:16] of the right letter
    why: str  # one line, shown after any answer


Q = Question
QUIZZES: dict[str, dict[str, Question]] = {
    "01_data_vs_model_parallelism": {
        "q1": Q("0bc088b18399", "397abb4c69b80b7a", "The model fits on one GPU: copy it to all 8 and split the batch (data "
                "parallelism); splitting the model only pays when it does not fit (§1, §5)."),
        "q2": Q("59d50d72d302", "49fd97e8537a173c", "The mean of four equal-sized shard means is the mean over all 128 "
                "samples, and the gradient is linear in the loss (§2)."),
        "q3": Q("fe9c73158e5a", "140b740b1503252d", "Reduce-scatter then all-gather, N-1 steps each, n/N elements per "
                "step: 2(N-1)/N·n, almost 2n for large N whatever the number of ranks (§5)."),
        "q4": Q("326b36631fc4", "1682ecbea7e6aa59", "GPipe's bubble is (N-1)/(M+N-1) with N stages and M micro-"
                "batches: 3/7, about 43% (§3.2)."),
        "q5": Q("00a70d8dff5a", "0142603dc6043f2d", "reduce_scatter sums element-wise and leaves rank r only the r-th "
                "slice; all_reduce leaves the whole sum everywhere (§4)."),
        "q6": Q("9f2fb2a59a7b", "cddb653b61e4a8be", "Tensor parallelism communicates inside every layer, forward and "
                "backward, on the critical path: it needs the fastest links, such as NVLink (§3.1)."),
    },
    "02_ddp_basics": {
        "q1": Q("5c162a21571d", "1315280c01e26f74", "DDP all-reduces (sums) the gradients inside backward() and divides "
                "by the world size: every rank holds the same average (§7)."),
        "q2": Q("312d9c4f92a6", "8a4f819009fa66d0", "One process per GPU: no shared GIL, the model is copied once, and "
                "only gradients travel, evenly and overlapped with backward (§2)."),
        "q3": Q("2c3d07e88cf3", "fdef74d71353b4e1", "Ranks are numbered machine by machine: 1·4 + 2 = 6; the local rank "
                "2 picks that machine's cuda:2; the world size is 2·4 = 8 (§3)."),
        "q4": Q("e4cd1a0bbf4e", "135216c6a7aa718f", "nccl needs GPU tensors and device_ids is for a CUDA module only: on a "
                "CPU, gloo and DDP(model) (§4, §6, mistake 7)."),
        "q5": Q("bb8d4ef19eb1", "dd7a6b81c5a35a49", "The DDP constructor broadcasts rank 0's parameters and buffers, so "
                "the copies start identical whatever each rank drew (§6)."),
        "q6": Q("f7380af98c1e", "7958342f1bf01b51", "The permutation is seeded with seed + epoch; without set_epoch the "
                "epoch stays 0, so every epoch repeats epoch 0's order (§8)."),
        "q7": Q("c8715a1e9e83", "557c62161c8aa4b4", "One writer with unwrapped keys (.module), a barrier so the file is "
                "complete, then map_location onto each rank's device (§10)."),
        "q8": Q("9ae10a5111aa", "3c134dfa6ad7e931", "Every rank must call every collective: rank 0 waits for partners "
                "that never come, until the group's timeout (§13, mistake 2)."),
    },
    "03_syncbn_and_sharded_state": {
        "q1": Q("07c1c88d7717", "32b25a8cb385e591", "DDP synchronizes gradients, not activations: each BatchNorm copy "
                "normalizes with its own GPU's samples in training mode (§1)."),
        "q2": Q("a5d8cd5d0ae4", "a57dd6e1361fc682", "A handful of large, strongly correlated images per GPU makes "
                "per-GPU statistics noisy; LayerNorm and eval mode never use batch statistics (§1, §2)."),
        "q3": Q("3d964fc9f81d", "7ee83a1843431e41", "Backward all-reduces two per-channel sums; the input gradient is "
                "computed locally from them, γ and β gradients are left to DDP (§3)."),
        "q4": Q("8151790393c1", "f4bf007e8e6c0aaf", "4 + 4 + 8 bytes per parameter (weight, gradient, Adam's two "
                "moments), replicated on every GPU by DDP: 16 GB each (§4)."),
        "q5": Q("ee7b447ef097", "e7fae3ceb32adce8", "Stage 1 shards the optimizer state, stage 2 adds the gradients, "
                "stage 3 the parameters too (§5)."),
        "q6": Q("e7d14c1c883d", "ace496479bb0f604", "consolidate_state_dict is a collective: rank 0 waits for shards "
                "that the other ranks, waiting in the barrier, never send (§8)."),
        "q7": Q("cce99fed5da1", "308af43113b8ee91", "DCP is a collective in which every rank writes its own shard plus "
                "metadata, so it can be loaded by another number of ranks (§9)."),
        "q8": Q("b2b9be98d4de", "55b490bc33580f05", "Parameters freed after forward are gathered again for "
                "backward, and the gradient is reduce-scattered into the shards: three transfers of the layer's size "
                "against DDP's two, about 1.5 times the traffic (§6)."),
    },
    "04_torchrun": {
        "q1": Q("c2d7b90292ff", "6f981e6bfadbbc38", "Node 1, local rank 1: RANK = 1·4 + 1 = 5, LOCAL_RANK = 1, WORLD_SIZE "
                "= 8, LOCAL_WORLD_SIZE = 4 (§1, §4)."),
        "q2": Q("b6360d6efb2e", "597d7c4fd014ce0f", "torchrun restarts the whole worker group after a new rendezvous; "
                "the script resumes from its last snapshot (§2)."),
        "q3": Q("798fda763437", "bb8b7c6af2f84fb4", "os.replace is atomic: a worker killed mid-write leaves the old "
                "snapshot intact instead of a half-written one (§2)."),
        "q4": Q("67983b910c08", "d847a453f45d2a4e", "Momentum buffers are optimizer state: without them the run goes on, "
                "but not as the uninterrupted run would (§2)."),
        "q5": Q("0c16ebd76f7e", "d6cd2b0b0585d248", "The c10d rendezvous store is hosted at that endpoint; every agent "
                "must reach it to join (§3)."),
        "q6": Q("bae7b9747b94", "b7ea9353933064ed", "An elastic job: it starts with 2 nodes, accepts up to 4, and "
                "restarts all workers with the new WORLD_SIZE when membership changes (§3)."),
        "q7": Q("b8a8ffe606bf", "b85e6986e5e1cc02", "DETAIL checks that the ranks' collectives match, and a "
                "monitored_barrier names a rank that does not arrive (§5)."),
        "q8": Q("f5dbebc43983", "092a7d9860ec4351", "LOCAL_RANK 0 exists once per node: with 2 nodes two writers race "
                "on the same shared file; guard with RANK 0 (§4)."),
    },
}


def _digest(salt: str, answer: str) -> str:
    return hashlib.sha256(f"{salt}:{answer}".encode()).hexdigest()[:16]


def _normal(answer) -> str:
    return answer.strip().lower().strip("()") if isinstance(answer, str) else ""


def _quiz(lesson: str) -> dict[str, Question]:
    if lesson not in QUIZZES:
        raise ValueError(f"no Quick Check for lesson {lesson!r}; known: {', '.join(QUIZZES)}")
    return QUIZZES[lesson]


def verdicts(lesson: str, answers: dict) -> dict[str, str]:
    """'right', 'wrong' or 'unanswered' for each question of the lesson, in order."""
    if not isinstance(answers, dict):
        raise TypeError(f"answers must be a dict such as {{'q1': 'a'}}, not {type(answers).__name__}")
    out = {}
    for name, q in _quiz(lesson).items():
        given = _normal(answers.get(name, ""))
        out[name] = "unanswered" if not given else "right" if _digest(q.salt, given) == q.digest else "wrong"
    return out


@dataclass
class QuizScore:
    lesson: str
    right: int
    answered: int
    total: int

    def __str__(self) -> str:
        if not self.answered:
            return "not answered yet"
        return f"{self.right}/{self.total} right" + (f" ({self.total - self.answered} unanswered)"
                                                     if self.answered < self.total else "")


def score(lesson: str, answers: dict) -> QuizScore:
    v = verdicts(lesson, answers)
    return QuizScore(lesson, sum(x == "right" for x in v.values()), sum(x != "unanswered" for x in v.values()), len(v))


def check(lesson: str, answers: dict) -> None:
    """Print ✓/✗ and the explanation for each answered question, "unanswered" for the others.

    Taught: each lesson's "Quick Check" section. Never raises on a wrong answer, so the lesson runs to the end.
    """
    unknown = sorted(set(answers) - set(_quiz(lesson))) if isinstance(answers, dict) else []
    for name, verdict in verdicts(lesson, answers).items():
        if verdict == "unanswered":
            print(f"{name}  unanswered")
        else:
            mark = "✓" if verdict == "right" else "✗"
            print(f"{name}  {mark} {_normal(answers[name])}: {_quiz(lesson)[name].why}")
    if unknown:
        print(f"(ignored: {', '.join(unknown)} is not a question of this lesson)")
    result = score(lesson, answers)
    print(f"{result.right}/{result.total} right" if result.answered else "No answers yet: fill in `answers` above.")


# --- reading a saved lesson, for the progress overview --------------------------------------

def read_answers(path: str) -> dict:
    """The `answers` dict of a saved lesson notebook, parsed from its source without running it.

    Raises ValueError when the notebook or its answer cell cannot be read.
    """
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    cells = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    tagged = [c for c in cells if ANSWERS_TAG in c.get("metadata", {}).get("tags", [])]
    for cell in tagged or cells:
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            if tagged:
                raise ValueError(f"the answer cell does not parse: {exc.msg} (line {exc.lineno})") from None
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "answers" for t in node.targets):
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    raise ValueError("`answers` must be a plain dict of letters, e.g. {'q1': 'a'}") from None
                if not isinstance(value, dict):
                    raise ValueError("`answers` must be a dict, e.g. {'q1': 'a'}")
                return value
    raise ValueError("no `answers = {...}` cell found")


def lesson_scores(root: str) -> list[tuple[str, str]]:
    """(lesson, what to show) for each lesson, from the saved notebooks in <root>/lessons."""
    rows = []
    for lesson in QUIZZES:
        path = os.path.join(root, "lessons", f"{lesson}.ipynb")
        if not os.path.isfile(path):
            rows.append((lesson, "no lesson notebook found"))
            continue
        try:
            rows.append((lesson, str(score(lesson, read_answers(path)))))
        except (OSError, ValueError) as exc:
            rows.append((lesson, f"cannot read the answers: {exc}"))
    return rows


def quiz_report(root: str) -> str:
    """The lessons' rows of the progress overview (`python -m grader progress`, show_progress())."""
    lines = ["Lesson Quick Checks (the `answers` cell of your saved lessons/*.ipynb):"]
    lines += [f"{lesson:<30} {shown}" for lesson, shown in lesson_scores(root)]
    return "\n".join(lines)
