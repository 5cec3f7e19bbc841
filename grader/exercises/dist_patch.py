"""Inside a rank: replace torch.distributed functions around a student's call, and put them back.

happens_before.py replaces functions in `torch.distributed` and `distributed_c10d`, and also in the
answers' globals, where `from torch.distributed import barrier` bound the original, to see when a
blocking call returns. Never to count collectives: a patched name misses other spellings; every
count goes through the dispatcher (collectives.py). Everything is restored on exit:
the integrity guard (grader/engine/integrity.py) checks torch's modules when the rank returns.
"""

from __future__ import annotations

import contextlib
import inspect


def _answer_globals(student_fn) -> dict | None:
    """The globals the student's function (or class's methods) resolve names in."""
    if student_fn is None:
        return None
    student_fn = inspect.unwrap(student_fn)  # the grader wraps a task to verify after each call
    found = getattr(student_fn, "__globals__", None)
    if found is None and hasattr(student_fn, "__dict__"):  # a class: its methods' globals
        for value in vars(student_fn).values():
            found = getattr(value, "__globals__", None) or found
    return found if isinstance(found, dict) else None


@contextlib.contextmanager
def replaced(names, make, student_fn=None, modules=None):
    """Replace each function `name` of `modules` (default: torch.distributed and its c10d module)
    by `make(name, real)` for the body, and in the answers' globals too.

    A function reachable under two names or modules gets one replacement, so identities such as
    `dist.isend is c10d.isend` (which batch_isend_irecv relies on) still hold. Yields
    {name: replacement}."""
    if modules is None:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        modules = (dist, c10d)
    replacements: dict[int, object] = {}  # id(real) -> its replacement
    by_name, saved = {}, []  # saved: (namespace, name, original)
    for module in modules:
        if module is None:
            continue
        for name in names:
            real = getattr(module, name, None)
            if real is None:
                continue
            new = replacements.setdefault(id(real), make(name, real))
            by_name.setdefault(name, new)
            saved.append((module, name, real))
            setattr(module, name, new)
    answers = _answer_globals(student_fn)
    for name, value in list((answers or {}).items()):
        if id(value) in replacements:
            saved.append((answers, name, value))
            answers[name] = replacements[id(value)]
    try:
        yield by_name
    finally:
        for namespace, name, original in reversed(saved):
            if isinstance(namespace, dict):
                namespace[name] = original
            else:
                setattr(namespace, name, original)
