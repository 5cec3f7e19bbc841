"""grader.lessons.timing (lesson 1 and 2's clock, right on GPUs) and grader.lessons.trace (lesson 2 §14.8's
reading of a torch.profiler Chrome trace), checked on what they promise."""

import json

import pytest
import torch

from grader.lessons import timing, trace


def test_timed_returns_the_result_and_a_duration_on_the_cpu():
    result, seconds = timing.timed(lambda: torch.ones(3).sum().item())
    assert result == 3.0 and seconds >= 0


def test_a_cuda_device_is_synchronized_before_and_after_the_work(monkeypatch):
    """The contract that makes GPU timings right: the queue is drained before the first clock reading and
    after the work, so the clock spans the work and not its launch. Recorded without a GPU."""
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(("sync", str(device))))
    timing.timed(lambda: calls.append(("work", None)), device="cuda:1")
    assert calls == [("sync", "cuda:1"), ("work", None), ("sync", "cuda:1")]
    calls.clear()
    timing.timed(lambda: calls.append(("work", None)), device="cpu")
    assert calls == [("work", None)], "a CPU device needs no synchronization"


def test_best_of_is_the_minimum_after_the_warm_up(monkeypatch):
    readings = iter([0.0, 5.0, 10.0, 11.0, 20.0, 23.0])  # two timed runs: 5 s and 1 s, then 3 s
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(readings))
    ran = []
    assert timing.best_of(lambda: ran.append(1), repeats=3, warmup=2) == 1.0
    assert len(ran) == 5
    with pytest.raises(ValueError, match="repeats"):
        timing.best_of(lambda: None, repeats=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: checks that the queue is drained")
def test_on_a_gpu_the_work_has_run_when_timed_returns():
    a = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    _, seconds = timing.timed(lambda: [a @ a for _ in range(50)], device="cuda")
    assert torch.cuda.current_stream().query(), "timed() returned while the GPU still had the work queued"
    assert seconds > 0


def _trace(tmp_path, events):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def test_lanes_keep_backward_nodes_and_all_reduces_in_ms_from_the_first(tmp_path):
    path = _trace(
        tmp_path,
        [
            {
                "ph": "X",
                "name": "autograd::engine::evaluate_function: AddmmBackward0",
                "ts": 1000,
                "dur": 500,
                "tid": 1,
            },
            {"ph": "X", "name": "gloo:all_reduce", "ts": 1300, "dur": 2000, "tid": 2},
            {"ph": "X", "name": "aten::mm", "ts": 900, "dur": 10, "tid": 1},  # neither lane
            {"ph": "i", "name": "gloo:all_reduce", "ts": 5000, "tid": 2},  # an instant, not a span
        ],
    )
    assert trace.lanes(path) == {
        "backward": [(0.0, 0.5, "AddmmBackward0")],
        "all_reduce": [(0.3, 2.3, "gloo:all_reduce")],
    }


def test_a_file_that_is_not_a_trace_or_has_no_backward_is_refused_clearly(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a Chrome trace"):
        trace.lanes(str(bad))
    with pytest.raises(ValueError, match="no backward node"):
        trace.lanes(_trace(tmp_path, [{"ph": "X", "name": "gloo:all_reduce", "ts": 0, "dur": 1}]))


def test_a_real_profiled_backward_gives_its_nodes(tmp_path):
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(8, 4, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x @ torch.randn(4, 2)).pow(2).sum().backward()
    path = str(tmp_path / "real.json")
    prof.export_chrome_trace(path)
    names = {name for _, _, name in trace.lanes(path)["backward"]}
    assert {"MmBackward0", "PowBackward0"} <= names
