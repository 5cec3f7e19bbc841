"""Every in-rank check builds the models and tensors it hands to student code on the plan's device (`ctx.device`).

On 2+ GPUs the plan is nccl, and an NCCL group has no CPU backend: a model or batch a check builds on the CPU
fails the reference solution with "No backend type associated with device type cpu", blamed on the student
(MiniFSDP's checks once lost 13 points that way). No machine here has a GPU, and no device type but the CPU
holds real memory that gloo serves (`cpu:1` is the CPU again; a PrivateUse1 device needs C++ kernels; `meta`
holds no data), so a run on this machine cannot tell a tensor built on `ctx.device` from one built on the CPU.
This test reads the in-rank code instead: each function whose first parameter is `ctx`, in every exercise.

A call builds on the CPU when it is a torch factory (`torch.randn`, ...) or a layer with parameters
(`nn.Linear`, ...) with no `device=`, or a call of a grader function that makes one of those and takes no
device (found transitively). In an in-rank function such a call must be placed on the device: `.to(...)` on it,
`(t.to(ctx.device) for t in <call>)`, a later `name.to(...)` of the name it was assigned to, or inside
`with torch.device(...)`. A tensor that stays on the CPU on purpose says why on its line, or the line above it:
`# on the CPU: ...`.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "grader" / "exercises"
FACTORIES = {"randn", "rand", "zeros", "ones", "empty", "full", "tensor", "arange", "randint", "randperm"}
FACTORIES |= {"linspace", "eye", "normal", "as_tensor"}
LAYERS_WITH_PARAMETERS = ("Linear", "Conv", "Norm", "Embedding", "LSTM", "GRU", "RNN", "Attention", "Bilinear")
ON_PURPOSE = "# on the CPU:"


def _is_factory(call: ast.Call) -> bool:
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return False
    if func.value.id == "torch":
        return func.attr in FACTORIES
    return func.value.id == "nn" and any(part in func.attr for part in LAYERS_WITH_PARAMETERS)


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.attr  # ref.bn_net(): a helper of another module
    return None


def _builds_on_cpu(call: ast.Call, builders: Builders) -> bool:
    if any(k.arg == "device" for k in call.keywords):
        return False
    return _is_factory(call) or builders.builds(call)


class Builders:
    """Grader functions that build on the CPU: a name called bare resolves to its own module's function first."""

    def __init__(self, functions):
        self.defined = {(path, fn.name) for path, fn, _ in functions}
        self.found: set[tuple] = set()
        self.path = None

    def builds(self, call: ast.Call) -> bool:
        name = _called_name(call)
        if isinstance(call.func, ast.Name) and (self.path, name) in self.defined:
            return (self.path, name) in self.found
        return name in {n for _, n in self.found}

    def names(self) -> set[str]:
        return {name for _, name in self.found}


def _functions() -> list[tuple[pathlib.Path, ast.FunctionDef, list[str]]]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef):
                found.append((path, node, source.splitlines()))
    return found


def _params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]


def _in_rank(fn: ast.FunctionDef) -> bool:
    return _params(fn)[:1] == ["ctx"]


def cpu_builders(functions) -> Builders:
    """The grader functions that build a tensor or model on the CPU and take no device (a fixpoint)."""
    builders = Builders(functions)
    changed = True
    while changed:
        changed = False
        for path, fn, _ in functions:
            if (path, fn.name) in builders.found or "device" in _params(fn) or _in_rank(fn):
                continue
            builders.path = path
            if any(isinstance(c, ast.Call) and _builds_on_cpu(c, builders) for c in ast.walk(fn)):
                builders.found.add((path, fn.name))
                changed = True
    return builders


def _parents(fn: ast.FunctionDef) -> dict:
    parents = {}
    for node in ast.walk(fn):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return parents


def _moved_names(fn: ast.FunctionDef) -> set[str]:
    """Names moved later, alone or in what is moved (`x.to(d)`, `shard(full, r).to(d)`), or handed to a call
    together with the device (`wrap_model(model, ctx.device)`: the callee places it)."""
    moved = set()
    for node in ast.walk(fn):
        if _is_to_call(node):
            moved |= {n.id for n in ast.walk(node.func.value) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Call) and any("device" in ast.unparse(a) for a in _arguments(node)):
            moved |= {a.id for a in _arguments(node) if isinstance(a, ast.Name)}
    return moved


def _arguments(call: ast.Call) -> list:
    return call.args + [k.value for k in call.keywords]


def _is_to_call(node) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to"


def _under_device_context(node, parents) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.With) and any("torch.device" in ast.unparse(i.context_expr) for i in node.items):
            return True
    return False


def _given_a_device(call: ast.Call, parents) -> bool:
    """An argument of a call that is also given the device: `ddp_fixture(tiny_net(), ctx.device)`."""
    outer = parents.get(call)
    if not isinstance(outer, ast.Call) or call not in _arguments(outer):
        return False
    return any("device" in ast.unparse(a) for a in _arguments(outer) if a is not call)


def _statement(node, parents):
    while not isinstance(node, ast.stmt):
        node = parents[node]
    return node


def _placed(call: ast.Call, parents, moved: set[str]) -> bool:
    parent = parents.get(call)
    if isinstance(parent, ast.Attribute) and parent.attr == "to":
        return True  # <call>.to(device)
    if isinstance(parent, ast.comprehension) and _is_to_call(parents[parent].elt):
        return True  # (t.to(device) for t in <call>)
    statement = _statement(call, parents)
    if isinstance(statement, ast.Assign):  # a name it was assigned to is moved later
        targets = {n.id for t in statement.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if targets & moved:
            return True
    return _given_a_device(call, parents) or _under_device_context(call, parents)


def _said_on_purpose(lines: list[str], lineno: int) -> bool:
    """`# on the CPU: why` at the end of the call's line, or on the line above it."""
    return ON_PURPOSE in lines[lineno - 1] or lines[lineno - 2].strip().startswith(ON_PURPOSE)


def cpu_built_in_ranks(functions, builders: Builders) -> list[str]:
    """Each call in an in-rank function that builds on the CPU and is not placed on the device."""
    found = []
    for path, fn, lines in functions:
        if not _in_rank(fn):
            continue
        parents, moved = _parents(fn), _moved_names(fn)
        builders.path = path
        for call in ast.walk(fn):
            if not isinstance(call, ast.Call) or not _builds_on_cpu(call, builders):
                continue
            if _placed(call, parents, moved) or _said_on_purpose(lines, call.lineno):
                continue
            where = f"{path.relative_to(ROOT.parent.parent)}:{call.lineno}"
            found.append(f"{where} in {fn.name}: {ast.unparse(call)} builds on the CPU, not on ctx.device")
    return found


def test_every_in_rank_check_builds_on_the_plans_device():
    functions = _functions()
    found = cpu_built_in_ranks(functions, cpu_builders(functions))
    assert not found, "\n".join(found)


def test_the_reading_catches_a_model_built_on_the_cpu_in_a_rank():
    """The rule itself: a model and a batch built on the CPU in a rank are caught; placed ones are not."""
    source = """
def net(seed):
    return nn.Sequential(nn.Linear(4, 4))

def pair(n):
    return torch.randn(n), torch.randn(n)

def _in_rank(ctx, student):
    model = net(1)
    x = torch.randn(2, 4)
    placed = net(2).to(ctx.device)
    y, z = (t.to(ctx.device) for t in pair(2))
    kept = torch.zeros(3)  # on the CPU: a count the parent reads
    w = torch.ones(2)
    w = w.to(ctx.device)
    return student.task("MiniFSDP")(model)(x)
"""
    tree = ast.parse(source)
    functions = [(ROOT / "example.py", n, source.splitlines()) for n in tree.body]
    builders = cpu_builders(functions)
    assert builders.names() == {"net", "pair"}
    found = cpu_built_in_ranks(functions, builders)
    assert [line.split(": ", 1)[1] for line in found] == [
        "net(1) builds on the CPU, not on ctx.device",
        "torch.randn(2, 4) builds on the CPU, not on ctx.device",
    ]
