"""The laziest wrong answer earns nothing: for each task, answers that return the
input, a constant, do nothing, or call the torch builtin the task forbids score 0
on that task's checks, with a message naming the mistake. (The untouched student release of every exercise scores
exactly 0: tests/test_selfcheck.py, test_untouched_release_scores_zero, from make selfcheck's grading of it.)"""

import pytest

from tests.helpers import assert_lazy_answer_earns_nothing

# (exercise, task, the whole wrong definition, a phrase of the message that names the mistake)
LAZY = [
    # 01_parallelism
    (
        "01_parallelism",
        "shard_indices",
        "def shard_indices(n_samples, rank, world_size):\n    return list(range(n_samples))",
        "shares must be disjoint",
    ),
    (
        "01_parallelism",
        "shard_indices",
        "def shard_indices(n_samples, rank, world_size):\n    return []",
        "in no rank's share",
    ),
    (
        "01_parallelism",
        "average_gradients",
        "def average_gradients(model):\n    pass",
        "still this rank's own shard gradient",
    ),
    ("01_parallelism", "ring_all_reduce", "def ring_all_reduce(tensor):\n    pass", "unchanged"),
    ("01_parallelism", "ring_all_reduce", "def ring_all_reduce(tensor):\n    dist.all_reduce(tensor)", "all_reduce"),
    (
        "01_parallelism",
        "ColumnParallelLinear",
        "class ColumnParallelLinear(nn.Linear):\n    pass",
        "rank r holds the output rows",
    ),
    (
        "01_parallelism",
        "pipeline_step",
        "def pipeline_step(stage, inputs, targets, loss_fn):\n    return None",
        "never called loss_fn",
    ),
    (
        "01_parallelism",
        "pipeline_schedule",
        "def pipeline_schedule(model, x, targets, loss_fn, n_microbatches):\n    return []",
        "got no gradient",
    ),
    (
        "01_parallelism",
        "moe_layer",
        "def moe_layer(x, expert_ids, gates, experts):\n    return x",
        "never travelled to rank",
    ),
    # 02_ddp_basics
    ("02_ddp_basics", "pick_backend", 'def pick_backend():\n    return "gloo"', "not a fixed answer"),
    ("02_ddp_basics", "pick_device", 'def pick_device(local_rank):\n    return torch.device("cpu")', "expected cuda:"),
    (
        "02_ddp_basics",
        "setup",
        """
     def setup(rank, world_size, master_addr, master_port):
         os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master_addr, str(master_port)
         dist.init_process_group("gloo", rank=rank, world_size=world_size)
     """,
        "not a fixed name",
    ),
    ("02_ddp_basics", "cleanup", "def cleanup():\n    pass", "still has a process group"),
    (
        "02_ddp_basics",
        "wrap_model",
        "def wrap_model(model, device):\n    return model",
        "not a DistributedDataParallel",
    ),
    (
        "02_ddp_basics",
        "make_dataloader",
        """
     def make_dataloader(dataset, batch_size, rank, world_size, seed=0):
         return DataLoader(dataset, batch_size=batch_size)
     """,
        "no DistributedSampler",
    ),
    (
        "02_ddp_basics",
        "train_one_epoch",
        """
     def train_one_epoch(model, loader, optimizer, loss_fn, epoch, device):
         loader.sampler.set_epoch(epoch)
         return 0.0
     """,
        "never iterated over the loader",
    ),
    (
        "02_ddp_basics",
        "save_checkpoint",
        """
     def save_checkpoint(model, path):
         if dist.get_rank() == 0:
             torch.save({}, path)
         dist.barrier()
     """,
        "is not the model's state_dict",
    ),
    (
        "02_ddp_basics",
        "load_checkpoint",
        "def load_checkpoint(model, path, device):\n    pass",
        "did not call torch.load",
    ),
    (
        "02_ddp_basics",
        "MiniDDP",
        """
     class MiniDDP(DDP):
         def finish_gradient_synchronization(self):
             pass
     """,
        "by hand",
    ),
    (
        "02_ddp_basics",
        "MiniDDP",
        """
     class MiniDDP(nn.Module):
         def __init__(self, module):
             super().__init__()
             self.module = module

         def forward(self, *args, **kwargs):
             return self.module(*args, **kwargs)

         def finish_gradient_synchronization(self):
             pass
     """,
        "broadcast rank 0's parameters",
    ),
    # 03_syncbn_sharded
    (
        "03_syncbn_sharded",
        "convert_to_sync_bn",
        "def convert_to_sync_bn(model):\n    return model",
        "every BatchNorm must become an nn.SyncBatchNorm",
    ),
    (
        "03_syncbn_sharded",
        "global_batch_stats",
        """
     def global_batch_stats(x):
         dims = [0] + list(range(2, x.dim()))
         return x.mean(dim=dims), x.var(dim=dims, unbiased=False)
     """,
        "this rank's own statistics",
    ),
    (
        "03_syncbn_sharded",
        "DistributedBatchNorm",
        """
     class DistributedBatchNorm(nn.SyncBatchNorm):
         pass
     """,
        "by hand",
    ),
    (
        "03_syncbn_sharded",
        "DistributedBatchNorm",
        """
     class DistributedBatchNorm(nn.BatchNorm2d):
         pass
     """,
        "its own batch's statistics",
    ),
    (
        "03_syncbn_sharded",
        "partition_parameters",
        """
     def partition_parameters(params, world_size):
         return [list(range(len(params)))] + [[] for _ in range(world_size - 1)]
     """,
        "own no parameter",
    ),
    (
        "03_syncbn_sharded",
        "ShardedOptimizer",
        """
     class ShardedOptimizer:
         def __init__(self, params, optimizer_cls, **defaults):
             self.optim = optimizer_cls(list(params), **defaults)

         def step(self):
             self.optim.step()

         def zero_grad(self):
             self.optim.zero_grad()
     """,
        "different parameters",
    ),
    (
        "03_syncbn_sharded",
        "save_sharded_checkpoint",
        """
     def save_sharded_checkpoint(model, optimizer, path):
         if dist.get_rank() == 0:
             torch.save({"model": model.state_dict(), "optimizer": optimizer.optim.state_dict()}, path)
         dist.barrier()
     """,
        "one rank's shard",
    ),
    # lesson 3 §9's load as it stands, given the task's signature: model and Adam come back, the scheduler and the
    # step do not (the lesson's lines are not the answer)
    (
        "03_syncbn_sharded",
        "load_resharded",
        """
     def load_resharded(model, optimizer, scheduler, path):
         model_state, optim_state = get_state_dict(model, optimizer)
         state = {"model": model_state, "optim": optim_state}
         dcp.load(state, checkpoint_id=path)
         set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
     """,
        "the LR scheduler was not restored",
    ),
    # 04_torchrun (each check starts real torchrun agents: only the two cheapest lazy answers)
    (
        "04_torchrun",
        "read_dist_env",
        """
     def read_dist_env(environ):
         return DistEnv(rank=0, local_rank=0, world_size=1, local_world_size=1, master_addr="127.0.0.1",
                        master_port=29500, restart_count=0)
     """,
        "`world_size` is 1",
    ),
    (
        "04_torchrun",
        "torchrun_command",
        """
     def torchrun_command(script, nproc_per_node, nnodes=1, node_rank=0, rdzv_endpoint=None, max_restarts=0):
         return [sys.executable, "-m", "torch.distributed.run", script]
     """,
        "expected --nproc-per-node=2, got none",
    ),
]


@pytest.mark.parametrize(
    "exercise, task, code, phrase", LAZY, ids=[f"{m[0][:2]}-{m[1]}-{i}" for i, m in enumerate(LAZY)]
)
def test_lazy_answer_earns_nothing(exercise, task, code, phrase):
    assert_lazy_answer_earns_nothing(exercise, task, code, phrase)
