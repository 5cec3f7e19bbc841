"""03_syncbn_sharded, FSDP2 in practice (build_fsdp2_model, train_step_fsdp2, export_full_state): each typical
mistake fails its own check with a message that names it; the laziest answers earn nothing. The solution's full marks,
public and hidden 3-rank checks: tests/test_selfcheck.py (test_each_solution_passes_every_check_of_every_task), from
make selfcheck's grading.

To launch few runs, one grading carries one mistake per task (the three tasks' checks are independent: each builds
its own model), and only the check that targets each mistake runs."""

import pytest

from tests.helpers import failed, grade_source, graded_counting_launches, mutate, replace_definition, solution_source

EXERCISE = "03_syncbn_sharded"
TASKS = ("build_fsdp2_model", "train_step_fsdp2", "export_full_state")

ROOT = (
    "    fully_shard(model, mesh=mesh, mp_policy=policy)  # the root owns the rest: the tied embedding/head, the norm\n"
)
META = '    with torch.device("meta"):\n        model = make_model()  # shapes only: no memory, nothing initialized\n'
RUNS = "        fully_shard(run, mesh=mesh, mp_policy=policy)  # one unit: one all-gather before the first block runs\n"
ITEMSIZE = "itemsize = torch.tensor([], dtype=policy.param_dtype).element_size()"
ONE_PER_BLOCK = (
    "        for block in run:\n            fully_shard(block, mesh=mesh, mp_policy=policy)  # the lesson's wrapping\n"
)
ALL_IN_ONE = "        pass\n    fully_shard(list(model.blocks), mesh=mesh, mp_policy=policy)  # every block, one unit\n"
SPLIT_TIE = (
    RUNS
    + "    fully_shard(model.embed, mesh=mesh, mp_policy=policy)\n    fully_shard(model.head, mesh=mesh, mp_policy=policy)\n"
)
UNTIED = (
    "    model.head.weight = nn.Parameter(torch.empty_like(model.embed.weight))  # untied, so both can be units\n"
    "    fully_shard(model.embed, mesh=mesh, mp_policy=policy)\n"
    + RUNS.lstrip().join(["    for run in runs:\n        ", ""])
)
POLICY = "MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)"
INIT = "    model.init_weights()\n    return model\n"
SYNC = "        model.set_requires_gradient_sync(i == len(micro_batches) - 1)  # reduce-scatter only in the last backward\n"
SCALE = "loss = nn.functional.mse_loss(model(x), y) * (len(x) / rows)"
CLIP = (
    "    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # a DTensor: the norm over every shard\n"
    "    optimizer.step()\n    optimizer.zero_grad()\n    return norm.full_tensor().item()\n"
)
LOCAL_CLIP = (
    "    local = sum(p.grad.to_local().pow(2).sum() for p in model.parameters()).sqrt()  # this rank's shards\n"
    "    for p in model.parameters():\n"
    "        p.grad.mul_(min(1.0, max_norm / (local.item() + 1e-6)))\n"
    "    optimizer.step()\n    optimizer.zero_grad()\n    return local.item()\n"
)
EXPORT = "    return get_model_state_dict(model, options=options), get_optimizer_state_dict(model, optimizer, options=options)\n"
OFFLOAD = "options = StateDictOptions(full_state_dict=True, cpu_offload=True)"

# Each grading: [(old, new), ...] applied to the solution, then {check that must fail: phrase of its message}.
GRADINGS = {
    "root not wrapped, sync every micro-batch, shards exported": (
        [(ROOT, ""), (SYNC, ""), (EXPORT, "    return model.state_dict(), optimizer.state_dict()\n")],
        {
            "fsdp2_build_sharded_from_meta": "the root is not wrapped",
            "fsdp2_accumulation_syncs_once": "accumulation syncs every micro-batch",
            "fsdp2_export_full_state_on_rank0": "not a full tensor",
        },
    ),
    "materialized before sharding, local-norm clip, full state on every rank": (
        [
            (META, "    model = make_model()  # on the CPU, whole\n"),
            (CLIP, LOCAL_CLIP),
            (OFFLOAD, "options = StateDictOptions(full_state_dict=True)"),
        ],
        {
            "fsdp2_build_sharded_from_meta": "the full model was materialized before sharding",
            "fsdp2_step_clips_global_norm": "that is a local norm",
            "fsdp2_export_full_state_on_rank0": "only rank 0 keeps the full state",
        },
    ),
    "one unit per block, loss not scaled, optimizer keyed by number": (
        [
            (RUNS, ONE_PER_BLOCK),
            (SCALE, "loss = nn.functional.mse_loss(model(x), y)"),
            (
                EXPORT,
                "    return get_model_state_dict(model, options=options), "
                "{'state': dict(enumerate(get_optimizer_state_dict(model, optimizer, options=options)"
                ".get('state', {}).values())), 'param_groups': []}\n",
            ),
        ],
        {
            "fsdp2_units_and_mixed_precision": "(one per block, and the root)",
            "fsdp2_step_clips_global_norm": "must count by its share of the rows",
            "fsdp2_export_full_state_on_rank0": "keyed by parameter number",
        },
    ),
    "units counted in fp32 bytes": (
        [(ITEMSIZE, "itemsize = 4")],
        {"fsdp2_units_and_mixed_precision": "you seem to count 4 bytes per element"},
    ),
    "every block in one unit": ([(RUNS, ALL_IN_ONE)], {"fsdp2_units_and_mixed_precision": "over the budget of 5200"}),
    "the tied weight in two units": (
        [(RUNS, SPLIT_TIE)],
        {"fsdp2_build_sharded_from_meta": "One unit must own a tied weight"},
    ),
    "the tie broken to shard embedding and head apart": (
        [("    for run in runs:\n" + RUNS, UNTIED)],
        {"fsdp2_build_sharded_from_meta": "model.head.weight is no longer model.embed.weight"},
    ),
    "gradients reduced in bf16": (
        [(POLICY, "MixedPrecisionPolicy(param_dtype=torch.bfloat16)")],
        {"fsdp2_units_and_mixed_precision": "reduced in bf16"},
    ),
    "init_weights not called": (
        [(INIT, "    return model\n")],
        {"fsdp2_build_sharded_from_meta": "call model.init_weights()"},
    ),
    # Messages that name the mistake, not a neighbour's:
    "seeded nn.init on the shards, the clipped norm returned": (
        [
            (
                INIT,
                "    torch.manual_seed(0)\n    with torch.no_grad():\n        for p in model.parameters():\n"
                "            torch.nn.init.normal_(p.to_local(), std=0.1)\n    return model\n",
            ),
            (
                CLIP,
                CLIP.replace(
                    "    optimizer.step()\n",
                    "    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), "
                    "float('inf'))  # after clipping\n    optimizer.step()\n",
                ),
            ),
        ],
        {
            "fsdp2_build_sharded_from_meta": "a seeded nn.init on the shards would not give one process's numbers",
            "fsdp2_step_clips_global_norm": "that is the norm after clipping",
        },
    ),
    "clipped after optimizer.step()": (
        [
            (
                CLIP,
                "    optimizer.step()\n    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
                "    optimizer.zero_grad()\n    return norm.full_tensor().item()\n",
            )
        ],
        {"fsdp2_step_clips_global_norm": "Call clip_grad_norm_ before optimizer.step()"},
    ),
    "micro-batches of different sizes weighted equally": (
        [(SCALE, "loss = nn.functional.mse_loss(model(x), y) / len(micro_batches)")],
        {"fsdp2_step_clips_global_norm": "you weight every micro-batch's loss the same"},
    ),
    "only the first micro-batch syncs": (
        [(SYNC, SYNC.replace("i == len(micro_batches) - 1", "i == 0"))],
        {"fsdp2_accumulation_syncs_once": "sync is on for the wrong micro-batches"},
    ),
    "sync never turned back on": (
        [(SYNC, SYNC.replace("i == len(micro_batches) - 1", "False"))],
        {"fsdp2_accumulation_syncs_once": "gradient sync stayed off"},
    ),
}


PUBLIC = [
    "fsdp2_build_sharded_from_meta",
    "fsdp2_units_and_mixed_precision",
    "fsdp2_accumulation_syncs_once",
    "fsdp2_step_clips_global_norm",
    "fsdp2_export_full_state_on_rank0",
]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", list(GRADINGS))
def test_typical_mistakes_fail_with_a_message_naming_them(name):
    edits, expected = GRADINGS[name]
    source = solution_source(EXERCISE)
    for old, new in edits:
        source = mutate(source, old, new)
    report = grade_source(EXERCISE, source, checks=list(expected))
    messages = failed(report)
    for check_name, phrase in expected.items():
        assert check_name in messages, f"{check_name} passed with: {name}\n" + "\n".join(report.lines())
        assert phrase in messages[check_name], (check_name, messages[check_name])


LAZY = {
    "build_fsdp2_model": (
        "def build_fsdp2_model(make_model, mesh, budget_bytes):\n"
        "    from torch.distributed.fsdp import fully_shard\n"
        "    return fully_shard(make_model(), mesh=mesh)",
        "the full model was materialized",
    ),
    "train_step_fsdp2": (
        "def train_step_fsdp2(model, optimizer, micro_batches, max_norm):\n    return 0.0",
        "forward(s) for 3 micro-batches",
    ),
    "export_full_state": ("def export_full_state(model, optimizer):\n    return {}, {}", "model_state has keys"),
}


@pytest.mark.timeout(240)
def test_laziest_answers_earn_nothing():
    source = solution_source(EXERCISE)
    for task, (code, _) in LAZY.items():
        source = replace_definition(source, task, code)
    report = grade_source(EXERCISE, source, checks=PUBLIC)
    assert report.checks and not any(c.passed for c in report.checks), "\n".join(report.lines())
    assert report.score == 0
    messages = failed(report)
    for task, (_, phrase) in LAZY.items():
        assert any(phrase in messages[c.name] for c in report.checks if c.task == task), (task, messages)


# A right build written otherwise than the solution: the units filled from the last block back (as few units; in the
# hidden model, other boundaries: 1|1|3|2 blocks, not 1|2|2|2), a lone block sharded as a module rather than a list
# of one.
FROM_THE_LAST_BLOCK = """
def build_fsdp2_model(make_model, mesh, budget_bytes):
    with torch.device("meta"):
        model = make_model()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    units, unit, used = [], [], 0
    for block in reversed(list(model.blocks)):
        size = 2 * sum(p.numel() for p in block.parameters())  # bf16 when gathered
        if unit and used + size > budget_bytes:
            units.append(unit)
            unit, used = [], 0
        unit.insert(0, block)
        used += size
    units.append(unit)
    for unit in units:
        fully_shard(unit if len(unit) > 1 else unit[0], mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    model.to_empty(device=mesh.device_type)
    model.init_weights()
    return model
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("hidden", [False, True], ids=["public", "hidden_3_ranks"])
def test_a_build_written_otherwise_gets_full_marks(hidden):
    source = replace_definition(solution_source(EXERCISE), "build_fsdp2_model", FROM_THE_LAST_BLOCK)
    report, _ = graded_counting_launches(EXERCISE, source, "build_fsdp2_model", hidden)
    assert report.checks and report.score == report.max_score, "\n".join(report.lines())
