"""03_syncbn_sharded, save_and_reshard: what a DCP checkpoint lacks, read from the metadata it wrote.

Parent side, no rank code: the verdict rests on what was written, not on anything a rank reports. The student's
code wrote every byte of the folder, so nothing in it is trusted: `.metadata` is a pickle, read here by an
unpickler that builds DCP's own metadata classes, torch.Size and dtypes and nothing else (FileSystemReader's
plain pickle.load would run whatever the file names, in the grading parent). Files are opened only as regular
files inside the folder, never through a link. The step and the scheduler's count are small pickled values (DCP
writes a non-tensor value as torch.save bytes, once): they are read back with torch.load(weights_only=True), which
unpickles numbers, strings and containers only.
"""

from __future__ import annotations

import io
import os
import pickle
import stat

import torch

from grader.exercises.syncbn_sharded import reference as ref


def _covered(meta) -> int:
    return sum(int(torch.Size(c.sizes).numel()) for c in getattr(meta, "chunks", []))


METADATA_MAX_BYTES = 16 << 20  # a 2-layer MLP's metadata is a few KB
_DCP_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")


class UnsafeMetadata(Exception):
    """The .metadata file is not DCP metadata this reader builds safely."""


class _MetadataUnpickler(pickle.Unpickler):
    """Builds DCP's metadata classes, torch.Size, dtypes and layouts; refuses every other global."""

    def find_class(self, module: str, name: str):
        if module in _DCP_MODULES and not name.startswith("__"):
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        if (module, name) in {("torch", "Size"), ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath")}:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise UnsafeMetadata(f"{module}.{name}")


def read_regular(folder: str, name: str, limit: int, offset: int = 0, length: int | None = None) -> bytes:
    """`length` bytes (all, by default) from `offset` of `folder/name`, a regular file (not a link) of at most
    `limit` bytes."""
    fd = os.open(os.path.join(folder, name), os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            raise UnsafeMetadata(f"{name} is not a regular file of at most {limit} bytes")
        with os.fdopen(fd, "rb", closefd=False) as file:
            file.seek(offset)
            return file.read(limit + 1 if length is None else length)
    finally:
        os.close(fd)


def read_metadata(folder: str):
    """The checkpoint's DCP Metadata, unpickled safely (UnsafeMetadata when it is anything else)."""
    from torch.distributed.checkpoint.metadata import Metadata

    try:
        metadata = _MetadataUnpickler(io.BytesIO(read_regular(folder, ".metadata", METADATA_MAX_BYTES))).load()
    except UnsafeMetadata:
        raise
    except Exception as exc:  # noqa: BLE001  truncated or not a pickle: not metadata DCP wrote
        raise UnsafeMetadata(type(exc).__name__) from None
    if not isinstance(metadata, Metadata) or not isinstance(metadata.state_dict_metadata, dict):
        raise UnsafeMetadata(type(metadata).__name__)
    return metadata


def checkpoint_problems(folder: str, world_size: int, steps: int) -> list[str]:
    """What a DCP checkpoint of {'model', 'optim', 'scheduler', 'step'} lacks (from its metadata), saved after
    `steps` steps."""
    if os.path.isfile(folder):
        return [
            (
                "`path` is one file, not a DCP checkpoint folder: torch.save of the full state cannot be resharded "
                "(no metadata, one rank writing everything); use dcp.save(state, checkpoint_id=path) on every rank"
            )
        ]
    if not os.path.isfile(os.path.join(folder, ".metadata")):
        return [
            (
                "no DCP checkpoint at `path` (no .metadata file): use dcp.save(state, checkpoint_id=path) on every "
                "rank, not torch.save"
            )
        ]
    try:
        md = read_metadata(folder)
    except (UnsafeMetadata, OSError):
        return [
            "the .metadata file at `path` is not metadata that dcp.save wrote: save with dcp.save(state, "
            "checkpoint_id=path) on every rank and leave its files as they are"
        ]
    entries = md.state_dict_metadata
    expected = {name: p.shape for name, p in ref.mlp().named_parameters()}
    problems, optim_named = _layout_problems(entries, expected, world_size)
    problems += _entry_problems(entries, expected, optim_named)
    problems += _resume_problems(folder, md, steps)
    files = {info.relative_path for info in md.storage_data.values()}
    if not problems and len(files) < world_size:
        problems.append(
            f"{len(files)} data file(s) for {world_size} ranks: every rank writes its own shard with dcp.save"
        )
    return problems


def _layout_problems(entries: dict, expected: dict, world_size: int) -> tuple[list[str], bool]:
    """What is wrong with the checkpoint's keys as a whole; and whether its optimizer state is keyed by name."""
    problems = []
    if not any(key.startswith("model.") for key in entries):
        problems.append(
            f"no 'model' entry (found {sorted({k.split('.')[0] for k in entries})}): save "
            "{'model': model_state, 'optim': optim_state} from get_state_dict(model, optimizer)"
        )
    # optimizer.state_dict() gives "optim.state.<number>.exp_avg"; get_state_dict "optim.state.<name>.exp_avg"
    by_number = [k for k in entries if k.startswith("optim.state.") and k.count(".") == 3 and k.split(".")[2].isdigit()]
    if by_number:
        problems.append(
            "the optimizer state is keyed by parameter number (optimizer.state_dict()): save the "
            "state of get_state_dict(model, optimizer), keyed by parameter names, which another "
            "number of ranks can load"
        )
    elif not any(key.startswith("optim.state.") for key in entries):
        problems.append(
            "the optimizer state is missing: save get_state_dict's optimizer state under 'optim' too "
            "(Adam's exp_avg, exp_avg_sq and step), or training cannot resume where it stopped"
        )
    optim_named = not by_number and any(key.startswith("optim.state.") for key in entries)
    gathered = [
        name
        for name, shape in expected.items()
        if world_size > 1 and shape[0] >= world_size and len(getattr(entries.get(f"model.{name}"), "chunks", ())) == 1
    ]
    if gathered and len(gathered) == len(expected):
        problems.append(
            f"every parameter was saved as one full tensor ({', '.join(gathered)}), not as {world_size} "
            "shards: save get_state_dict's default state, this rank's shards with nothing gathered (a "
            "full state dict costs every rank the whole model's memory, and dcp.save then writes "
            "copies, not shards)"
        )
    return problems, optim_named


def _entry_problems(entries: dict, expected: dict, optim_named: bool) -> list[str]:
    """What each parameter's entries (and Adam's, when keyed by name) lack: presence, global shape, coverage."""
    problems = []
    for name, shape in expected.items():
        keys = [f"model.{name}"] + (
            [f"optim.state.{name}.exp_avg", f"optim.state.{name}.exp_avg_sq"] if optim_named else []
        )
        for key in keys:
            meta = entries.get(key)
            if meta is None:
                problems.append(f"{key} is missing")
            elif tuple(getattr(meta, "size", ())) != tuple(shape):
                problems.append(
                    f"{key} has shape {tuple(getattr(meta, 'size', ()))}, expected the full "
                    f"{tuple(shape)} (DCP records each tensor's global shape)"
                )
            elif _covered(meta) < shape.numel():
                problems.append(
                    f"only {_covered(meta)} of the {shape.numel()} elements of {key} were saved: "
                    "some ranks' shards are missing (every rank must call dcp.save, without no_dist)"
                )
        if optim_named and f"optim.state.{name}.step" not in entries:
            problems.append(f"optim.state.{name}.step is missing: Adam's step counts belong to its state")
    return problems


_UNREAD = object()  # a value that could not be read back here (a tensor, a transformed or unusual entry)


def _value(folder: str, md, key: str):
    """The non-tensor value DCP saved under `key`, or _UNREAD."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex

    info = md.storage_data.get(MetadataIndex(key))
    if not isinstance(md.state_dict_metadata.get(key), BytesStorageMetadata) or info is None:
        return _UNREAD
    name = info.relative_path
    if not isinstance(name, str) or os.path.basename(name) != name or getattr(info, "transform_descriptors", None):
        return _UNREAD
    if not isinstance(info.length, int) or not isinstance(info.offset, int) or info.length > 1 << 20:
        return _UNREAD
    try:
        data = read_regular(folder, name, 64 << 20, offset=info.offset, length=info.length)
        return torch.load(io.BytesIO(data), weights_only=True)
    except Exception:  # noqa: BLE001  not a value this reader understands: the load checks judge it
        return _UNREAD


def _resume_problems(folder: str, md, steps: int) -> list[str]:
    """The 'step' and 'scheduler' entries: present, and saved at the step the training reached."""
    entries, problems = md.state_dict_metadata, []
    if "step" not in entries:
        problems.append(f"no 'step' entry: save the number of steps done ({steps}, an int) under 'step'")
    elif (step := _value(folder, md, "step")) is not _UNREAD and step != steps:
        problems.append(f"the saved 'step' is {step!r}, but the training had done {steps} steps")
    if not any(key.startswith("scheduler.") for key in entries):
        problems.append(
            "no 'scheduler' entry: without the LR scheduler's state (its state_dict()) a resumed job restarts "
            "its warm-up"
        )
    elif "scheduler.last_epoch" not in entries:
        problems.append("'scheduler' holds no last_epoch: save the scheduler's own state_dict()")
    elif (count := _value(folder, md, "scheduler.last_epoch")) is not _UNREAD and count != steps:
        problems.append(f"the saved scheduler has counted {count!r} steps, the training {steps}")
    return problems
