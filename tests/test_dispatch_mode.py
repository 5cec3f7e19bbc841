"""grader/exercises/dispatch_mode.py: a WatchedMode tells whether it still sees operators, whatever way student
code switched torch's dispatch modes off; LiveBytes leaves a wrapper's own storages out, however viewed."""

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import _disable_current_modes, _pop_mode, _push_mode

from grader.exercises.dispatch_mode import WatchedMode, modes_on
from grader.exercises.syncbn_sharded.live_bytes import LiveBytes


@contextlib.contextmanager
def _popped():
    modes = [_pop_mode() for _ in range(torch._C._len_torch_dispatch_stack())]
    try:
        yield
    finally:
        for mode in reversed(modes):
            _push_mode(mode)


WAYS = {
    "disable_current_modes": _disable_current_modes,
    "pop the mode stack": _popped,
    "DisableTorchDispatch": torch._C._DisableTorchDispatch,
}


@pytest.mark.parametrize("way", list(WAYS))
def test_a_watched_mode_knows_when_it_was_switched_off(way):
    outer, inner = WatchedMode(), LiveBytes(above=0)
    assert modes_on()  # none entered: nothing to miss
    with outer, inner:
        assert modes_on() and outer.on() and inner.on()
        with WAYS[way]():
            assert not modes_on() and not outer.on() and not inner.on()
        assert modes_on()
    assert modes_on()


def test_live_bytes_leaves_out_the_persistent_storages_and_their_views():
    shard = torch.zeros(1024)  # 4 KiB, kept by the wrapper between steps
    kept = LiveBytes(above=1000, persistent=lambda: [shard])
    counted = LiveBytes(above=1000)
    for tracker in (kept, counted):
        with tracker:
            view = shard.detach()  # what the detach() op returns shares the shard's storage
            full = torch.ones(2048)  # 8 KiB gathered
            tracker.sample()
        del full
    assert view.untyped_storage().data_ptr() == shard.untyped_storage().data_ptr()
    assert kept.peak["forward"] == 8192
    assert counted.peak["forward"] == 8192 + 4096
