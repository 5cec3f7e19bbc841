"""Hang messages (issue 22 §4): the check's own hang analysis is what the student reads, never gloo's raw
"Timed out waiting ...ms"; a rank busy in the student's own code is named, with where, and the others
are said to wait for it. Real 2-rank runs of exercise 02."""
from tests.helpers import failed, grade_source, mutate, replace_definition, solution_source

EX = "02_ddp_basics"
GLOO_TIMEOUT = "Timed out waiting"


def test_train_uneven_without_join_reads_as_the_hang_analysis():
    source = mutate(solution_source(EX), "    with Join([model]):", "    if True:")
    bad = failed(grade_source(EX, source, task="train_uneven", checks=["uneven_finishes_without_hang"]))
    message = bad["uneven_finishes_without_hang"]
    assert "Join" in message and "hung" in message, message
    assert "rank 0 hung: waiting in" in message, message  # where rank 0 waits, from its stack
    assert GLOO_TIMEOUT not in message, message


def test_gloo_timeout_of_a_group_of_the_students_own_is_reported_as_a_hang():
    wrap = '''
    def wrap_model(model, device):
        import datetime
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        group = dist.new_group(timeout=datetime.timedelta(seconds=1))  # gloo gives up long before the check
        if dist.get_rank() == 0:
            dist.all_reduce(torch.ones(1), group=group)  # rank 1 never joins
        return DDP(model.to(device))
    '''
    source = replace_definition(solution_source(EX), "wrap_model", wrap)
    bad = failed(grade_source(EX, source, task="wrap_model", timeout=8,
                              checks=["wrap_model_broadcasts_rank0_parameters"]))
    message = bad["wrap_model_broadcasts_rank0_parameters"]
    assert message.startswith("the run did not finish in time"), message
    assert "rank 0 hung: waiting in" in message and "gloo's own timeout" in message, message
    assert "rank 1 hung: waiting in" in message, message  # in DDP's broadcast, which rank 0 never reaches
    assert GLOO_TIMEOUT not in message, message


def test_a_rank_busy_in_the_students_loop_is_named_and_the_others_wait_for_it():
    wrap = '''
    def wrap_model(model, device):
        import time
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        rank = dist.get_rank()
        while rank == 1:  # waits for something that never comes
            time.sleep(0.01)
        return DDP(model.to(device))
    '''
    source = replace_definition(solution_source(EX), "wrap_model", wrap)
    bad = failed(grade_source(EX, source, task="wrap_model", timeout=5,
                              checks=["wrap_model_broadcasts_rank0_parameters"]))
    message = bad["wrap_model_broadcasts_rank0_parameters"]
    heading = message.splitlines()[0]
    assert "rank 1 is busy in your code at" in heading and "the others wait for it" in heading, message
    assert "time.sleep(0.01)" in heading or "while rank == 1" in heading, message  # the student's line
    assert "different collectives" not in message, message
    assert "rank 0 hung: waiting in" in message, message  # rank 0 waits in DDP's broadcast


def test_every_rank_busy_in_the_students_code():
    wrap = '''
    def wrap_model(model, device):
        while True:
            pass
    '''
    source = replace_definition(solution_source(EX), "wrap_model", wrap)
    bad = failed(grade_source(EX, source, task="wrap_model", timeout=5,
                              checks=["wrap_model_broadcasts_rank0_parameters"]))
    message = bad["wrap_model_broadcasts_rank0_parameters"]
    assert "every rank is busy in your code" in message.splitlines()[0], message
    assert "rank 0 hung: busy in your code at" in message and "rank 1 hung: busy in your code at" in message
