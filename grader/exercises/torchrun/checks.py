"""Checks of exercise 04_torchrun: launching jobs with torchrun (lessons/04_torchrun.ipynb).

Tasks:
- read_dist_env(environ) -> DistEnv       checked on real torchrun workers against their environment
- torchrun_command(script, ...) -> list   checked by running the command it builds, on loopback
- train_script (source text)              launched with real torchrun: 2 workers, a killed worker
                                          with --max-restarts=1, two "nodes", and a snapshot probe

Student code (the functions, and `train_script` as a value) runs only in ranks
or in torchrun workers; the checks here run torchrun as subprocesses from the
parent side, each in a fresh directory, every wait bounded.
"""
from __future__ import annotations

import dataclasses

from grader.checks import CheckFailed, Exercise
from grader.engine import free_port
from grader.exercises.torchrun import command, probes, reference, runs
from grader.exercises.torchrun.messages import evidence, read_half_written
from grader.exercises.torchrun.probe import FIELDS, describe_result
from grader.tolerances import assert_close

# Its checks start real torchrun agents (seconds of CPU each): one at a time, and not held
# to the notebook benchmark's one-second target.
EXERCISE = Exercise("04_torchrun", tasks=["read_dist_env", "torchrun_command", "train_script"],
                    side_by_side=False, judged_by_bench=False)

# ---------------------------------------------------------------- read_dist_env

def _expected_from(env: dict) -> reference.DistEnv:
    return reference.read_dist_env({k: v for k, v in env.items() if v is not None})


def _compare(answer: dict, expected: reference.DistEnv, env: dict, where: str) -> None:
    """Raise CheckFailed naming the first wrong field of the student's DistEnv."""
    if answer.get("error", "").startswith("NotImplementedError"):
        raise CheckFailed("read_dist_env raises NotImplementedError: replace the stub with your code")
    if "error" in answer:
        raise CheckFailed(f"read_dist_env raised {where}: {answer['error']}")
    fields = answer["fields"]
    for name in FIELDS:
        got, kind = fields[name]["value"], fields[name]["type"]
        if kind == "missing":
            raise CheckFailed(f"read_dist_env returned a {answer['returned']} without the field `{name}`; "
                              "return a DistEnv with the fields " + ", ".join(FIELDS))
        want = getattr(expected, name)
        var = reference.ENV_VARS[name]
        if isinstance(want, int) and (kind != "int"):
            raise CheckFailed(f"`{name}` is {got!r} ({kind}) {where}; environment variables are strings: "
                              f"convert {var} with int()")
        if isinstance(want, str) and kind != "str":
            raise CheckFailed(f"`{name}` is {got!r} ({kind}) {where}; keep {var} as the string it is")
        if got == want:
            continue
        if name in ("rank", "local_rank"):
            other = "local_rank" if name == "rank" else "rank"
            if got == getattr(expected, other) and fields[other]["value"] == want:  # both ways: a swap
                raise CheckFailed(f"`{name}` is {got} {where}, but {var}={env.get(var)}: RANK and LOCAL_RANK "
                                  "are swapped (RANK used where LOCAL_RANK belongs, or the reverse). RANK numbers "
                                  "the workers of the whole job; LOCAL_RANK numbers them within one node")
        if name in ("world_size", "local_world_size"):
            other = "local_world_size" if name == "world_size" else "world_size"
            if got == getattr(expected, other) and fields[other]["value"] == want:  # both ways: a swap
                raise CheckFailed(f"`{name}` is {got} {where}, but {var}={env.get(var)}: WORLD_SIZE (all "
                                  "workers) and LOCAL_WORLD_SIZE (workers on this node) are swapped")
        if name == "restart_count":
            raise CheckFailed(f"`restart_count` is {got} {where}, but TORCHELASTIC_RESTART_COUNT="
                              f"{env.get(var)}: read it from the environment (0 only when it is missing)")
        raise CheckFailed(f"`{name}` is {got!r} {where}, but {var}={env.get(var)!r}")


def _check_probe_records(records: dict, expected_keys: list[tuple[int, int]], output: str, timed_out: bool,
                         what: str) -> None:
    missing = [k for k in expected_keys if k not in records]
    if missing:
        rank, attempt = missing[0]
        raise CheckFailed(f"the grader's probe did not report from rank {rank}, attempt {attempt} of {what} "
                          f"(please tell the instructor if this repeats)\n" + evidence(output, timed_out))
    for (rank, attempt), record in sorted(records.items()):
        env = record["env"]
        where = f"on torchrun worker RANK={env['RANK']} (attempt {attempt}) of {what}"
        _compare(record["answer"], _expected_from(env), env, where)


@EXERCISE.check("read_dist_env", points=1)
def read_dist_env_on_torchrun_workers(g):
    """On the workers of `torchrun --standalone --nproc-per-node=2 --max-restarts=1` whose
    rank 1 fails once, read_dist_env(os.environ) matches each worker's environment,
    restart count included."""
    with probes.ProbeDir(g.submission) as probe:
        cmd = reference.grader_command(probe.script, 2, max_restarts=1)
        output, timed_out = probes.run_probe([cmd], probe, {"PROBE_FAIL_ONCE_RANK": "1"})
        _check_probe_records(probe.records(), [(0, 0), (1, 0), (0, 1), (1, 1)], output, timed_out,
                             "a 2-worker run restarted once")


@EXERCISE.check("read_dist_env", points=0.5, hidden=True)
def read_dist_env_on_two_nodes(g):
    """Two torchrun agents (--nnodes=2, one worker each) on 127.0.0.1: the worker of node 1
    has RANK 1 but LOCAL_RANK 0, WORLD_SIZE 2 but LOCAL_WORLD_SIZE 1."""
    with probes.ProbeDir(g.submission) as probe:
        endpoint = f"127.0.0.1:{free_port()}"
        cmds = [reference.grader_command(probe.script, 1, nnodes=2, node_rank=i, rdzv_endpoint=endpoint)
                for i in range(2)]
        output, timed_out = probes.run_probe(cmds, probe)
        _check_probe_records(probe.records(), [(0, 0), (1, 0)], output, timed_out, "a 2-node run")


SAMPLE_ENV = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
              "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29501", "TORCHELASTIC_RESTART_COUNT": "2",
              "GROUP_RANK": "1", "PATH": "/usr/bin"}


def _read_env_cases(ctx, student, cases):
    """In a rank: read_dist_env on each mapping; what it returned or raised."""
    fn = student.task("read_dist_env")
    results = []
    for env in cases:
        try:
            value = fn(dict(env))
        except Exception as exc:
            results.append({"error": f"{type(exc).__name__}: {exc}", "message": str(exc)})
            continue
        results.append(describe_result(value) | {"dataclass": dataclasses.is_dataclass(value)})
    return results


@EXERCISE.check("read_dist_env", points=1)
def read_dist_env_names_a_missing_variable(g):
    """Without one of RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
    read_dist_env raises an error that names it and says to launch with torchrun."""
    cases = [{k: v for k, v in SAMPLE_ENV.items() if k != var} for var in reference.REQUIRED]
    results = g.run(_read_env_cases, cases, world_size=1, init_group=False)[0]
    for var, result in zip(reference.REQUIRED, results):
        if result.get("error", "").startswith("NotImplementedError"):
            raise CheckFailed("read_dist_env raises NotImplementedError: replace the stub with your code")
        if "error" not in result:
            raise CheckFailed(f"read_dist_env returned normally for a mapping without {var}; it must raise an "
                              "error naming it (does it read os.environ instead of its `environ` argument, or "
                              "fall back to a default?)")
        message = result["message"]
        if var not in message:
            raise CheckFailed(f"the error for a missing {var} does not name it: {result['error']}")
        if "torchrun" not in message.lower():
            raise CheckFailed(f"the error for a missing {var} should say to launch the script with torchrun: "
                              f"{result['error']}")


@EXERCISE.check("read_dist_env", points=0.5, hidden=True)
def read_dist_env_reads_its_argument(g):
    """A mapping that is not os.environ (rank 5 of 8, restart 2) is read exactly, into a dataclass;
    without TORCHELASTIC_RESTART_COUNT (a plain launcher) restart_count is 0."""
    without_restarts = {k: v for k, v in SAMPLE_ENV.items() if k != "TORCHELASTIC_RESTART_COUNT"}
    results = g.run(_read_env_cases, [SAMPLE_ENV, without_restarts], world_size=1, init_group=False)[0]
    full, plain_launcher = results
    _compare(full, _expected_from(SAMPLE_ENV), SAMPLE_ENV, "for a mapping with RANK=5, WORLD_SIZE=8 (is "
             "os.environ read instead of the `environ` argument?)")
    if not full.get("dataclass"):
        raise CheckFailed(f"read_dist_env returned a {full['returned']}; return a DistEnv dataclass "
                          "(@dataclass with the fields " + ", ".join(FIELDS) + ")")
    if "error" in plain_launcher:
        raise CheckFailed("read_dist_env raised without TORCHELASTIC_RESTART_COUNT "
                          f"({plain_launcher['error']}); a launcher other than torchrun does not set it: "
                          "restart_count is then 0")
    _compare(plain_launcher, _expected_from(without_restarts), without_restarts,
             "without TORCHELASTIC_RESTART_COUNT")


# ---------------------------------------------------------------- torchrun_command

def _call_torchrun_command(ctx, student, calls, expect_value_error=()):
    """In a rank: torchrun_command(*args, **kwargs) for each call; the calls in
    `expect_value_error` must raise ValueError instead."""
    fn = student.task("torchrun_command")
    for args, kwargs in expect_value_error:
        shown = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        try:
            value = fn(*args, **kwargs)
        except ValueError:
            continue
        except Exception as exc:
            raise CheckFailed(f"torchrun_command({shown}) raised {type(exc).__name__}: {exc}; expected a "
                              "ValueError (more than one node needs an rdzv_endpoint)")
        raise CheckFailed(f"torchrun_command({shown}) returned {value!r}; a job on more than one node cannot be "
                          "--standalone: raise ValueError when nnodes > 1 and there is no rdzv_endpoint")
    results = []
    for args, kwargs in calls:
        shown = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        try:
            value = fn(*args, **kwargs)
        except Exception as exc:
            raise CheckFailed(f"torchrun_command({shown}) raised {type(exc).__name__}: {exc}")
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
            raise CheckFailed(f"torchrun_command({shown}) returned {value!r}; return a list of strings "
                              "(every argument a str, e.g. '--nproc-per-node=2')")
        results.append((shown, value))
    return results


@EXERCISE.check("torchrun_command", points=2)
def torchrun_command_runs_one_node(g):
    """torchrun_command(script, 2) builds a --standalone command; run as is, it starts two
    workers of one job (WORLD_SIZE 2, RANK 0 and 1)."""
    with probes.ProbeDir() as probe:
        (shown, cmd), = g.run(_call_torchrun_command, [((probe.script, 2), {})], world_size=1,
                              init_group=False)[0]
        command.check_static(shown, cmd, probe.script, 2, 1, 0, None, 0)
        output, timed_out = probes.run_probe([cmd], probe)
        _check_ranks(probe.records(), 2, output, timed_out, f"torchrun_command({shown})")


def _check_ranks(records: dict, world: int, output: str, timed_out: bool, what: str, attempts: int = 1) -> None:
    for attempt in range(attempts):
        got = {rank: r["env"] for (rank, a), r in records.items() if a == attempt}
        if sorted(got) != list(range(world)):
            raise CheckFailed(f"running {what} started workers with ranks {sorted(got)} on attempt {attempt}, "
                              f"expected ranks 0..{world - 1}\n" + evidence(output, timed_out))
        sizes = {env["WORLD_SIZE"] for env in got.values()}
        if sizes != {str(world)}:
            raise CheckFailed(f"running {what} gave WORLD_SIZE {sorted(sizes)}, expected {world}")


@EXERCISE.check("torchrun_command", points=1, hidden=True)
def torchrun_command_runs_two_nodes(g):
    """torchrun_command(script, 1, nnodes=2, node_rank=0/1, rdzv_endpoint='127.0.0.1:PORT'): two
    agents started with these commands form one job of two workers. Without an endpoint,
    nnodes=2 raises ValueError."""
    with probes.ProbeDir() as probe:
        endpoint = f"127.0.0.1:{free_port()}"
        calls = [((probe.script, 1), {"nnodes": 2, "node_rank": i, "rdzv_endpoint": endpoint}) for i in range(2)]
        no_endpoint = [((probe.script, 1), {"nnodes": 2})]
        built = g.run(_call_torchrun_command, calls, no_endpoint, world_size=1, init_group=False)[0]
        for i, (shown, cmd) in enumerate(built):
            command.check_static(shown, cmd, probe.script, 1, 2, i, endpoint, 0)
        output, timed_out = probes.run_probe([cmd for _, cmd in built], probe)
        _check_ranks(probe.records(), 2, output, timed_out, "the two node commands")


@EXERCISE.check("torchrun_command", points=1, hidden=True)
def torchrun_command_restarts(g):
    """torchrun_command(script, 2, max_restarts=1): when a worker fails once, torchrun starts
    the group again (TORCHELASTIC_RESTART_COUNT 1)."""
    with probes.ProbeDir() as probe:
        (shown, cmd), = g.run(_call_torchrun_command, [((probe.script, 2), {"max_restarts": 1})], world_size=1,
                              init_group=False)[0]
        command.check_static(shown, cmd, probe.script, 2, 1, 0, None, 1)
        output, timed_out = probes.run_probe([cmd], probe, {"PROBE_FAIL_ONCE_RANK": "1"})
        _check_ranks(probe.records(), 2, output, timed_out, f"torchrun_command({shown}) with a worker failing once",
                     attempts=2)


# ---------------------------------------------------------------- train_script

EPOCHS = 3  # the plain, two-node and snapshot-probe runs
KILL_EPOCHS, KILL_AFTER = 4, 2  # the crash run: a worker is killed after the 2nd snapshot


def _get_script(ctx, student):
    """In a rank: the student's train_script (a value, not a function)."""
    return student.task("train_script")


def _script(g) -> str:
    source = g.run(_get_script, world_size=1, init_group=False)[0]
    if not isinstance(source, str):
        raise CheckFailed(f"train_script is a {type(source).__name__}; it must be the source text of the "
                          "script (a str)")
    try:
        compile(source, "train.py", "exec")  # compiling runs nothing
    except SyntaxError as exc:
        raise CheckFailed(f"train_script has a syntax error at line {exc.lineno}: {exc.msg}") from None
    return source


def _scenario(g, scenario, *args) -> runs.ScriptRun:
    """Run a scenario on the student's script, once per grading: the plain check and the
    snapshot probe share one run (the probe's pause and hard link change nothing else)."""
    source = _script(g)
    cache = g.__dict__.setdefault("_torchrun_runs", {})
    key = (scenario.__name__, source, args)
    if key not in cache:
        cache[key] = runs.with_retry(scenario, source, *args)
        if cache[key].retried:
            g.notes.append("a worker aborted at teardown before the outputs were complete; the run was "
                           "repeated (noise of torch on CPU, not counted)")
    return cache[key]


def _check_final(run: runs.ScriptRun, epochs: int, what: str, likely: str) -> None:
    final = run.final
    if final is None:
        raise CheckFailed(f"{what}: no final model at --out final.pt (rank 0 writes model.state_dict() there "
                          "after the last epoch)\n" + evidence(run.output, run.timed_out))
    if isinstance(final, str):
        raise CheckFailed(f"{what}: final.pt {final}; save the unwrapped model's state_dict with torch.save")
    _check_state(final, epochs, f"{what}: the final model", likely)


def _check_state(state, epochs: int, what: str, likely: str) -> None:
    expected = reference.reference_state(epochs)
    if not isinstance(state, dict):
        raise CheckFailed(f"{what} is a {type(state).__name__}, not a state_dict")
    if set(state) != set(expected):
        wrapped = all(k.startswith("module.") for k in state)
        raise CheckFailed(f"{what} has the keys {sorted(state)[:4]}, expected {sorted(expected)}"
                          + ("; it is the DDP wrapper's state_dict: save ddp_model.module.state_dict() (or the "
                             "model before wrapping)" if wrapped else ""))
    for key in expected:
        assert_close(state[key], expected[key], f"{what}, `{key}`", likely)


def _log_state(log: list[int] | None) -> str:
    return "no epoch log was written" if log is None else f"the log listed only {log}"


def _check_log(run: runs.ScriptRun, expected: list[int], what: str) -> None:
    log = run.log
    if log is None:
        raise CheckFailed(f"{what}: no epoch log at --epoch-log epochs.log (rank 0 appends the epoch number "
                          "after each snapshot)\n" + evidence(run.output, run.timed_out))
    if log == expected:
        return
    if sorted(set(log)) == expected and len(log) == 2 * len(expected):
        raise CheckFailed(f"{what}: the epoch log lists every epoch twice ({log}): only rank 0 may write the "
                          "log (and the snapshot)")
    raise CheckFailed(f"{what}: the epoch log lists {log}, expected {expected} (one line per epoch, the epoch "
                      "number, written by rank 0 after its snapshot)\n" + evidence(run.output, run.timed_out))


def _check_snapshot(snapshot, epochs: int, what: str) -> None:
    if snapshot is None:
        raise CheckFailed(f"{what}: no snapshot at --snapshot snapshot.pt")
    if isinstance(snapshot, str):
        raise CheckFailed(f"{what}: the snapshot {snapshot}")
    if not isinstance(snapshot, dict) or not {"model", "optimizer", "epochs_run"} <= set(snapshot):
        keys = sorted(snapshot) if isinstance(snapshot, dict) else type(snapshot).__name__
        raise CheckFailed(f"{what}: the snapshot holds {keys}; it must be a dict with 'model' (the model's "
                          "state_dict), 'optimizer' (the optimizer's state_dict) and 'epochs_run'")
    if snapshot["epochs_run"] != epochs:
        raise CheckFailed(f"{what}: the last snapshot says epochs_run={snapshot['epochs_run']!r} after "
                          f"{epochs} epochs; store the number of epochs completed (epoch + 1)")


@EXERCISE.check("train_script", points=2)
def train_script_matches_single_process(g):
    """torchrun --standalone --nproc-per-node=2 train.py --epochs 3 ...: the final model equals one
    process trained on the same global batches; the log lists 0, 1, 2; the last snapshot holds
    model, optimizer and epochs_run 3."""
    run = _scenario(g, runs.linked, EPOCHS, 1)
    what = "2 workers, 3 epochs"
    _check_final(run, EPOCHS, what, "each rank takes batches of GLOBAL_BATCH // world_size from a "
                 "DistributedSampler(dataset, shuffle=True, seed=problem.SEED) with set_epoch(epoch) each epoch, "
                 "and the model is wrapped in DDP")
    _check_log(run, list(range(EPOCHS)), what)
    _check_snapshot(run.snapshot, EPOCHS, what)
    _check_state(run.snapshot["model"], EPOCHS, f"{what}: the snapshot's model",
                 "the snapshot should hold the model as trained so far")


@EXERCISE.check("train_script", points=3)
def train_script_resumes_after_a_killed_worker(g):
    """4 epochs, --max-restarts=1; the grader SIGKILLs worker LOCAL_RANK 1 after the 2nd snapshot.
    torchrun restarts both workers; they must resume at epoch 2 (the log then lists 0, 1, 2, 3)
    and end with the final model of an uninterrupted run."""
    run = _scenario(g, runs.killed, KILL_EPOCHS, KILL_AFTER)
    what = "after a worker was killed"
    if not run.acted:
        if run.log_when_acted is None:
            raise CheckFailed(f"the grader waits for the epoch log to list {KILL_AFTER} epochs before it kills a "
                              f"worker; {_log_state(run.log)}\n" + evidence(run.output, run.timed_out))
        raise CheckFailed("the grader found no worker with LOCAL_RANK 1 to kill (please tell the instructor)")
    before = run.log_when_acted
    if before != list(range(KILL_AFTER)):
        _check_log(run, list(range(KILL_EPOCHS)), "before the kill")
    if not run.snapshot_when_acted:
        raise CheckFailed(f"after {KILL_AFTER} logged epochs there was no snapshot at --snapshot snapshot.pt: "
                          "rank 0 saves one after every epoch, before it appends to the log")
    if run.final is None or isinstance(run.final, str) or run.log is None:
        if read_half_written(run.output):
            raise CheckFailed(f"{what}, the restarted workers could not read the snapshot (read half-written?): "
                              "write it to a temporary file, then os.replace() it over the snapshot, so that a "
                              "crash never leaves a partial file\n" + evidence(run.output, run.timed_out))
        raise CheckFailed(f"{what}, torchrun restarted the workers but the run did not finish (final model: "
                          f"{'missing' if run.final is None else run.final})\n" + evidence(run.output, run.timed_out))
    after = run.log[len(before):]
    resumed = list(range(KILL_AFTER, KILL_EPOCHS))
    if after[:1] == [0]:
        raise CheckFailed(f"{what}, the restarted run trained epochs {after}: it started again from epoch 0. "
                          f"Load the snapshot when it exists and continue from its epochs_run ({KILL_AFTER})")
    if after != resumed:
        raise CheckFailed(f"{what}, the restarted run trained epochs {after}, expected {resumed}: it should "
                          f"continue from the snapshot's epochs_run ({KILL_AFTER}) up to --epochs")
    _check_state(run.final, KILL_EPOCHS, f"{what}: the final model",
                 "the resumed run must continue exactly where the snapshot left off: restore the optimizer "
                 "state (momentum) as well as the model, and call sampler.set_epoch(epoch) with the true epoch")


@EXERCISE.check("train_script", points=1, hidden=True)
def train_script_on_two_nodes(g):
    """Two torchrun agents (--nnodes=2, one worker each, c10d on 127.0.0.1), each "node" in its own
    directory: the result equals the single-process reference, and only global rank 0 writes."""
    run = _scenario(g, runs.two_nodes, EPOCHS)
    if run.other_files:
        raise CheckFailed(f"on 2 nodes, the worker of node 1 (RANK 1, LOCAL_RANK 0) wrote {run.other_files}: "
                          "only global rank 0 may write the snapshot, the log and the final model; test "
                          "RANK (or dist.get_rank()), not LOCAL_RANK")
    what = "2 nodes of 1 worker, 3 epochs"
    _check_final(run, EPOCHS, what, "the result must not depend on how the workers are spread over nodes: "
                 "use the global rank and world size (RANK, WORLD_SIZE) for the sampler and the batch size")
    _check_log(run, list(range(EPOCHS)), what)


@EXERCISE.check("train_script", points=1, hidden=True)
def train_script_replaces_the_snapshot_atomically(g):
    """After the first snapshot the grader hard-links it and lets the run go on: a snapshot written
    to a temporary file and os.replace()d leaves the link's content alone (a crash mid-write
    never leaves a half-written snapshot); one rewritten in place changes it."""
    run = _scenario(g, runs.linked, EPOCHS, 1)
    if not run.acted:
        state = "but there was no snapshot" if run.log_when_acted else _log_state(run.log)
        raise CheckFailed("the grader waits for the epoch log to list 1 epoch, then looks at the snapshot; "
                          f"{state}\n" + evidence(run.output, run.timed_out))
    _check_final(run, EPOCHS, "3 epochs", "the run went on normally after the first snapshot")
    link = run.link
    if isinstance(link, dict) and link.get("epochs_run") == 1:
        return
    found = link.get("epochs_run") if isinstance(link, dict) else link
    raise CheckFailed("the snapshot file is rewritten in place: the first snapshot's file now holds "
                      f"epochs_run={found!r}. A worker killed during torch.save leaves a half-written snapshot "
                      "that the restarted run cannot read: save to a temporary file in the same directory, "
                      "then os.replace(tmp, snapshot)")
