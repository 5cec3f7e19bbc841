"""03_syncbn_sharded: save_and_reshard, load_resharded (torch.distributed.checkpoint with an FSDP2 model, Adam and
an LR warm-up: a job resumed exactly, on another number of ranks).

A checkpoint saved by W ranks is loaded by another number of ranks, so every check makes two runs that share
a folder the parent creates (and removes); the checks that start from the student's save by W ranks share that
save (one launch, g.folder(shared_as=...)), and a failure after it is confirmed with a save of the check's own.
The public checks hold no answer: the save is judged from what it wrote (reshard_metadata.py: the DCP metadata,
and the step and scheduler values read back with torch.load(weights_only=True)), the load by the student's own
round trip; training then continues and is compared with one process training a plain nn.Module with Adam and
the same warm-up on the whole batch (reshard_training.py). hidden_reshard.py crosses each function with the
grader's own counterpart, on another setting: 4 steps before the save, and a load into a model wrapped another
way (FSDP2 on the root only). When the student's save is under test and a load fails, what the save wrote is
named first, never what the load then trips on.

Each rule of the task texts, and the check that verifies it (S: checkpoint_has_every_shard_and_adam_state;
H: the hidden your_save_by_* and reference_save_by_* crossings; L: saved_by_two_loaded_by_{three,one}):

| save_and_reshard                                                          | verified by                        |
|---------------------------------------------------------------------------|------------------------------------|
| everything to resume exactly, loadable by another number of ranks         | H (2 -> 3, 3 -> 2), L              |
| "model", "optim" as get_state_dict gives them: shards, nothing gathered,  | S: each parameter in N pieces,     |
| the optimizer keyed by parameter names                                    | "keyed by parameter number"        |
| "scheduler": its state; "step": the int                                   | S: the entries and their values    |
|                                                                           | (last_epoch, step); H              |
| every rank writes its own shards; the metadata has each full shape        | S: one data file per rank, full    |
|                                                                           | shapes, every element covered      |
| a collective: on rank 0 alone it waits forever                            | S, L: run_phase's 15 s timeout and |
|                                                                           | its dcp deadlock message           |
| not torch.save                                                            | S: a file, or no .metadata         |
| Adam's state too (exp_avg, exp_avg_sq, step)                              | S, H: "the optimizer state is      |
|                                                                           | missing", "...step is missing"     |

| load_resharded                                                            | verified by                        |
|---------------------------------------------------------------------------|------------------------------------|
| in place, saved by 2 ranks, loaded by 3 or by 1                           | L (2 -> 3, 2 -> 1), H (2 -> 3,     |
|                                                                           | 3 -> 2 from the grader's save)     |
| fresh model (other weights), optimizer and scheduler: all overwritten     | verify_resumed ("still the fresh   |
|                                                                           | model's", "not restored")          |
| returns the step the checkpoint holds                                     | verify_resumed ("returned")        |
| the next steps are those of the job that never stopped, within 1e-6       | verify_resumed (EXACT)             |
"""

from __future__ import annotations

import re

import torch

from grader.checks import CheckFailed
from grader.grading import describe_failure
from grader.exercises import happens_before as hb
from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded import reshard_training as rt
from grader.exercises.syncbn_sharded.reshard_metadata import checkpoint_problems

RESHARD_TIMEOUT_S = 15.0  # a correct save or load takes about a second; a deadlock should not cost 30
STEPS_BEFORE, STEPS_AFTER = 3, 2
# Every rank trains on the whole batch, so the ranks average W identical gradients: exact for W = 1, 2 and
# within an ulp for W = 3 (measured: 1.5e-8 after 5 steps). A lost Adam state moves parameters by ~1e-2.
EXACT = 1e-6
LOADED_BOUND_S = 2 * RESHARD_TIMEOUT_S  # past the run's own timeout: a rank stuck in its load is reported hung


# --- rank side --------------------------------------------------------------------------------------


def _in_rank_train_and_save(ctx, student, folder: str, steps: int, save=None):
    model = rt.fsdp_mlp(ctx, seed=0)
    opt = torch.optim.Adam(model.parameters(), **rt.ADAM)
    scheduler = rt.schedule(opt)
    rt.train(model, opt, scheduler, steps, ctx.device)
    (save or student.task("save_and_reshard"))(model, opt, scheduler, steps, folder)
    return ctx.rank


def _in_rank_load_and_continue(ctx, student, folder: str, per_layer: bool, load=None):
    model = rt.fsdp_mlp(ctx, seed=rt.FRESH_SEED, per_layer=per_layer)
    opt = torch.optim.Adam(model.parameters(), **rt.ADAM)
    scheduler = rt.schedule(opt)
    step = rt.as_step((load or student.task("load_resharded"))(model, opt, scheduler, folder))
    # Our full_tensor gathers come next, only once every rank has returned from its load: a load that some
    # ranks skip then shows as the hang it is (stacks inside dcp.load), not as gloo's abort on mismatched calls.
    hb.mark(ctx, "loaded")
    hb.wait_until(lambda: all(hb.marked(ctx, "loaded", r) for r in range(ctx.world_size)), LOADED_BOUND_S)
    loaded = rt.snapshot(model, opt, scheduler)
    rt.train(model, opt, scheduler, STEPS_AFTER, ctx.device)
    return {"step": step, "loaded": loaded, "params": [rt.full_copy(p) for p in model.parameters()]}


# --- parent side ------------------------------------------------------------------------------------


def _hint_for(errors: str) -> str:
    """The likely mistake behind a rank's error in dcp.load (empty: none recognized)."""
    if ".metadata" in errors and "No such file" in errors:
        return (
            "there is no DCP checkpoint at `path` (no .metadata): the save must be dcp.save(state, "
            "checkpoint_id=path) on every rank; a torch.save of the full state writes one file that "
            "another number of ranks cannot reshard"
        )
    if re.search(r"Missing key in checkpoint state_dict: optim\.state\.\d+\.(exp_avg|exp_avg_sq|step)\.", errors):
        # by number: "optim.state.0.exp_avg"; by name (this model's are "0.weight"): "optim.state.0.weight.exp_avg"
        return (
            "the optimizer state was not restored: the state you load into is keyed by parameter number "
            "(optimizer.state_dict()), the checkpoint's by parameter names, as get_state_dict gives them"
        )
    missing = re.search(r"Missing key in checkpoint state_dict: (\w+)", errors)
    if missing:
        return (
            f"the state you load into asks for '{missing.group(1)}' entries the checkpoint does not hold under "
            "that name: load into the layout of the save, {'model', 'optim', 'scheduler', 'step'}"
        )
    return ""


def run_phase(g, fn, folder: str, world_size: int, what: str, *args) -> list:
    """One run (a save or a load) with a short timeout; a failure names the likely mistake."""
    result = g.run_raw(fn, folder, *args, world_size=world_size, timeout=min(g.timeout, RESHARD_TIMEOUT_S))
    if result.ok:
        return [r.value for r in result.ranks]
    where = f"{what} with {world_size} rank(s): "
    stacks = " ".join(r.stack or "" for r in result.ranks if r.status == "hung")
    if "state_dict_saver" in stacks or "state_dict_loader" in stacks:
        raise CheckFailed(
            where + "deadlocked inside dcp.save/dcp.load: they are collectives, so every rank must "
            "call them (saving or loading on rank 0 only leaves it waiting for the others' plans). "
            "Call dcp.save (or dcp.load) on every rank: each writes (or reads) its own shard.\n" + result.failure()
        )
    errors = " ".join(str(r.error) for r in result.ranks if r.error)
    raise CheckFailed(where + describe_failure(result, _hint_for(errors)))


def _expect(g, actual, expected, what: str, likely: str) -> None:
    # nccl may reorder its sums: its default tolerance; gloo: EXACT
    g.assert_close(actual, expected, what, likely, tol=None if g.backend == "nccl" else (EXACT, EXACT))


def _verify_state(g, loaded: dict, saved: dict, who: str, saved_by: int) -> None:
    """Right after loading: the saved weights, Adam's state, the learning rate and the scheduler's count."""
    names = rt.parameter_names()
    for i, name in enumerate(names):
        _expect(
            g,
            loaded["params"][i],
            saved["params"][i],
            f"{who}: parameter {name} right after loading",
            f"the weights saved by {saved_by} rank(s) must come back exactly",
        )
    missing = [names[i] for i, m in enumerate(loaded["exp_avg"]) if m is None]
    if missing:
        raise CheckFailed(
            f"{who}: the optimizer state was not restored: after loading, Adam holds no state "
            f"(exp_avg, exp_avg_sq, step) for {', '.join(missing)}, so it would restart from zero. The "
            "optimizer's state must reach the optimizer itself; a fresh optimizer.state_dict() has no state "
            "for dcp.load to fill"
        )
    for key in ("exp_avg", "exp_avg_sq", "step"):
        for i, name in enumerate(names):
            _expect(
                g,
                loaded[key][i],
                saved[key][i],
                f"{who}: Adam's {key} of {name} right after loading",
                "the optimizer state was not restored as it was saved",
            )
    if loaded["last_epoch"] != saved["last_epoch"]:
        raise CheckFailed(
            f"{who}: the LR scheduler was not restored: after loading it has counted {loaded['last_epoch']} "
            f"step(s), the saved one {saved['last_epoch']}, so its warm-up restarts. Filling a copy of its "
            "state_dict() changes nothing: the loaded state must reach scheduler.load_state_dict"
        )
    _expect(
        g,
        torch.tensor(loaded["lr"], dtype=torch.float64),
        torch.tensor(saved["lr"], dtype=torch.float64),
        f"{who}: the optimizer's learning rate right after loading",
        "the optimizer's param_groups (with their lr) belong to its restored state",
    )


def verify_resumed(g, results: list, saved_by: int, steps_before: int) -> None:
    """After the load: the saved state and step, then the uninterrupted run's next steps."""
    saved = rt.plain_training(steps_before)
    final = rt.plain_training(steps_before + STEPS_AFTER)
    fresh = rt.plain_training(0, seed=rt.FRESH_SEED)["params"]
    for rank, got in enumerate(results):
        loaded, who = got["loaded"], f"rank {rank} of {len(results)}"
        if all(torch.equal(p, f) for p, f in zip(loaded["params"], fresh)):
            raise CheckFailed(
                f"{who}: after loading, the weights are still the fresh model's (built with another "
                "seed): the checkpoint never reached the model. dcp.load fills the state dict you pass "
                "in place; what it filled must then be put into the model (a plain model.load_state_dict of "
                "something else than what dcp.load filled changes nothing)"
            )
        _verify_state(g, loaded, saved, who, saved_by)
        if got["step"] != steps_before:
            raise CheckFailed(
                f"{who}: load_resharded returned {got['step']}, but the checkpoint holds step {steps_before}: "
                "return the step it holds, as an int. dcp.load cannot fill an int in place: it puts the loaded "
                "value into the dictionary you passed, where your own variable does not see it"
            )
        for i, name in enumerate(rt.parameter_names()):
            _expect(
                g,
                got["params"][i],
                final["params"][i],
                f"{who}: parameter {name} after {STEPS_AFTER} more steps",
                "training must continue exactly as if the job had not stopped",
            )


# --- save_and_reshard -------------------------------------------------------------------------------


@EXERCISE.check("save_and_reshard", points=2)
def checkpoint_has_every_shard_and_adam_state(g):
    """2 ranks save after 3 steps: DCP metadata, the full shape and every element of each parameter and of
    Adam's moments, the step counts, one data file per rank, the scheduler's state and the step (their values);
    the save never deadlocks (short timeout)."""
    with g.folder() as folder:  # both runs see it (each run's ctx.workdir is its own)
        run_phase(g, _in_rank_train_and_save, folder, 2, "saving", STEPS_BEFORE)
        problems = checkpoint_problems(folder, 2, STEPS_BEFORE)
    if problems:
        raise CheckFailed("the checkpoint does not hold what the task asks: " + "; ".join(problems))


# --- load_resharded: the student's own round trip ---------------------------------------------------


def _refuse_incomplete(folder: str, save_ranks: int, steps: int) -> None:
    problems = checkpoint_problems(folder, save_ranks, steps)
    if problems:  # the student's save is at fault: say so, rather than what a load then trips on
        raise CheckFailed(
            f"the checkpoint your save_and_reshard wrote on {save_ranks} ranks does not hold what the "
            "task asks: " + "; ".join(problems)
        )


def round_trip(g, save_ranks: int, load_ranks: int, save=None, load=None, steps=STEPS_BEFORE, per_layer=True):
    """save after `steps` steps, load into a model sharded per layer or at the root only: the grader's own save or
    load (hidden checks), else the student's. The student's save by N ranks after the same steps is the same run
    in every check that makes it: one launch, its checkpoint loaded by each (g.folder)."""
    shared = f"student_save_by_{save_ranks}_after_{steps}" if save is None else None
    with g.folder(shared_as=shared) as folder:
        run_phase(g, _in_rank_train_and_save, folder, save_ranks, "saving", steps, save)
        # the other checks' loads read this folder too (and a load may change it): a failure from here on is
        # confirmed by this check's own save and load. A failed save is never shared (its own launch): not so.
        g.read_shared_launch |= bool(shared)
        if save is None and load is not None:  # the check judges the student's save: what it wrote comes first
            _refuse_incomplete(folder, save_ranks, steps)
        try:
            results = run_phase(g, _in_rank_load_and_continue, folder, load_ranks, "loading", per_layer, load)
            verify_resumed(g, results, save_ranks, steps)
        except CheckFailed:
            if save is None:  # the student's own round trip: a save that lost something explains the failure
                _refuse_incomplete(folder, save_ranks, steps)
            raise


@EXERCISE.check("load_resharded", points=1.5)
def saved_by_two_loaded_by_three_continues(g):
    """Saved by 2 ranks after 3 steps with your save_and_reshard, loaded by 3 into a model, Adam and scheduler
    that start afresh: weights, Adam's state, the scheduler and the step come back, and 2 more steps equal an
    uninterrupted single-process run."""
    round_trip(g, 2, 3)


@EXERCISE.check("load_resharded", points=1, depends_on=("saved_by_two_loaded_by_three_continues",))
def saved_by_two_loaded_by_one_continues(g):
    """The same, loaded by a single rank (FSDP2 over a mesh of one)."""
    round_trip(g, 2, 1)
