"""The grading parent reads a student's DCP checkpoint (save_and_reshard's check) without trusting it: its
.metadata pickle builds DCP's metadata classes and nothing else, and no file is read through a link."""

from __future__ import annotations

import os
import pickle
import warnings

import pytest
import torch

from grader.exercises.syncbn_sharded.reshard_metadata import UnsafeMetadata, checkpoint_problems, read_metadata


@pytest.fixture
def real_checkpoint(tmp_path):
    import torch.distributed.checkpoint as dcp

    folder = str(tmp_path / "ckpt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dcp.save without a process group says it saves as one process
        dcp.save({"w": torch.ones(3, 2, dtype=torch.bfloat16), "step": 3, "name": "x"}, checkpoint_id=folder)
    return folder


def test_a_checkpoint_dcp_wrote_is_read_as_filesystem_reader_reads_it(real_checkpoint):
    from torch.distributed.checkpoint import FileSystemReader

    ours, theirs = read_metadata(real_checkpoint), FileSystemReader(real_checkpoint).read_metadata()
    assert ours.state_dict_metadata == theirs.state_dict_metadata
    assert ours.storage_data == theirs.storage_data


class _RunsCode:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_metadata_pickle_that_runs_code_is_refused_and_runs_nothing(real_checkpoint, tmp_path):
    marker = str(tmp_path / "the student's code ran in the grading parent")
    with open(os.path.join(real_checkpoint, ".metadata"), "wb") as file:
        pickle.dump(_RunsCode(marker), file)
    with pytest.raises(UnsafeMetadata, match="posix.mkdir|os.mkdir"):
        read_metadata(real_checkpoint)
    problems = checkpoint_problems(real_checkpoint, 2, 3)
    assert len(problems) == 1 and "not metadata that dcp.save wrote" in problems[0], problems
    assert not os.path.exists(marker)


def test_a_metadata_link_is_not_followed(real_checkpoint, tmp_path):
    secret = tmp_path / "another file"
    os.replace(os.path.join(real_checkpoint, ".metadata"), secret)  # real metadata, reached only through a link
    os.symlink(secret, os.path.join(real_checkpoint, ".metadata"))
    with pytest.raises(UnsafeMetadata):
        read_metadata(real_checkpoint)
    assert "not metadata that dcp.save wrote" in checkpoint_problems(real_checkpoint, 2, 3)[0]
