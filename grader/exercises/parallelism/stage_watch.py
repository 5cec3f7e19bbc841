"""Inside a rank of pipeline_schedule: what the stage really computed and sent, seen at torch's dispatcher.

A `StageWatch` (a WatchedMode) sees every operator the student's step runs. It notes which of the model's layers
each operator read (by the storages of the layers' parameters, so a detached alias, `F.linear(x, layer.weight)` or
a clone counts too), and keeps a copy of every floating-point tensor the rank sends, in order, with its peer: the
activations to the next stage, the gradients to the previous one. A rank that runs the whole model, or sends
anything else than what its own layers computed, shows it here. Copying or moving a layer (to "meta", to free it)
is not running it; computing with the copy is.

What it saw is also written, as it happens, to a file in a folder the parent reads (`note_path`): when the run then
crashes (a stage holding the whole model fails in torch's matmul) the parent can still say why.
"""

from __future__ import annotations

import gc
import json

import torch

from grader.exercises.collectives import describe, payload
from grader.exercises.dispatch_mode import WatchedMode, tensors_in
from grader.exercises.parallelism.host_copy import host


def _storage(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr() or None
    except Exception:  # a tensor without storage (meta, a subclass)
        return None


# Operators that copy or move a tensor without computing with it: moving another stage's layers away (to "meta", to
# free them) is not running them. Their outputs carry the layer on (a clone computed with later still counts).
STAGE_MODULE = "torch.distributed.pipelining."

COPIES = frozenset({"_to_copy", "clone", "copy_", "detach", "alias", "lift_fresh", "lift_fresh_copy", "_copy_from"})


class StageWatch(WatchedMode):
    def __init__(self, model: torch.nn.Module, note_path: str | None = None):
        super().__init__()
        self.layer_of = {
            _storage(p): i for i, layer in enumerate(model) for p in layer.parameters() if _storage(p) is not None
        }
        self.used: set[int] = set()  # the layers whose parameters an operator read
        # kept alive, the parameters and their copies: a freed storage's address must not name a layer later
        self.copies: list[torch.Tensor] = [p for layer in model for p in layer.parameters()]
        self.sent: list[tuple[int, torch.Tensor]] = []  # (peer, a copy of the float tensor sent)
        self.note_path = note_path

    def dispatch(self, func, types, args, kwargs):
        seen = {self.layer_of.get(_storage(t)) for t in tensors_in(args) + tensors_in(kwargs)} - {None}
        if seen and func.name().split("::", 1)[1] in COPIES:
            out = func(*args, **kwargs)
            for t in tensors_in(out):
                if _storage(t) is not None:
                    self.layer_of.setdefault(_storage(t), min(seen))
                    self.copies.append(t)
            return out
        if seen - self.used:
            self.used |= seen
            self._note({"used": sorted(self.used)})
        call = describe(func, args, kwargs, 0) if func.namespace == "c10d" else None
        if call is not None and call.kind == "send":
            for t in payload(func, args, kwargs):
                if t.is_floating_point():
                    self.sent.append((-1 if call.peer is None else call.peer, host(t)))
                    self._note({"sent": [self.sent[-1][0], list(t.shape)]})
        return func(*args, **kwargs)

    def _note(self, record: dict) -> None:
        if self.note_path is None:
            return
        try:
            with open(self.note_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        except OSError:  # a diagnosis only: the verdict comes from the run's values
            pass


def built_stages(model: torch.nn.Module) -> list[list[int]]:
    """[stage index, number of stages, first layer, last layer] of each torch PipelineStage this rank built over
    the model's own layers (found among live objects: a diagnosis of which stages a rank held, even when the
    schedule then failed). A hand-written schedule builds none."""
    index_of = {id(layer): i for i, layer in enumerate(model)}
    found = []
    for obj in gc.get_objects():
        # torch's stage classes, known by their module (no import: the grader's import guard watches what it imports)
        module = getattr(type(obj), "__module__", None)
        if not isinstance(module, str) or not module.startswith(STAGE_MODULE) or not hasattr(obj, "stage_index"):
            continue
        if isinstance(getattr(obj, "submod", None), torch.nn.Module):
            layers = sorted(index_of[id(m)] for m in obj.submod.modules() if id(m) in index_of)
            if layers:
                found.append([int(obj.stage_index), int(obj.num_stages), layers[0], layers[-1]])
    return sorted(found)


def note_stages(path: str, model: torch.nn.Module) -> None:
    """Appends the stages this rank built to its notes."""
    try:
        with open(path, "a") as f:
            f.write(json.dumps({"stages": built_stages(model)}) + "\n")
    except OSError:
        pass


def read_notes(path: str) -> dict:
    """What a rank's StageWatch noted before its run ended, however it ended: the layers it used, the shapes sent,
    the pipeline stages it built."""
    notes = {"used": [], "sent": [], "stages": []}
    try:
        with open(path) as f:
            for line in f:
                record = json.loads(line)
                if "used" in record:
                    notes["used"] = record["used"]
                elif "stages" in record:
                    notes["stages"] = record["stages"]
                else:
                    notes["sent"].append(record["sent"])
    except (OSError, ValueError):
        pass
    return notes
