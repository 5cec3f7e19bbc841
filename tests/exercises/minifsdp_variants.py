"""Correct MiniFSDP answers other than the solution, each an alternative the task text allows (graded in
tests/exercises/test_03_fsdp.py): one flat shard per layer, and an autograd.Function that wraps the layer's op and
saves only the shard (computing in bf16 with compute_dtype, its layers' weight attributes 0-element placeholders)."""

FLAT = '''
class MiniFSDP(nn.Module):
    """FSDP by hand with one flat shard per layer: the layer's parameters flattened together, padded, chunk `rank`."""

    def __init__(self, module: nn.Module, compute_dtype=None):
        super().__init__()
        self.module, self.compute_dtype = module, compute_dtype
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.units = []  # (leaf module, its name, [(parameter name, shape, numel)])
        self.shards = nn.ParameterList()
        self.saving = {}
        for mod_name, mod in list(module.named_modules()):
            own = list(mod.named_parameters(recurse=False))
            if not own:
                continue
            flat = torch.cat([p.detach().reshape(-1).float() for _, p in own])
            chunk = -(-flat.numel() // self.world)
            flat = torch.cat([flat, flat.new_zeros(chunk * self.world - flat.numel())])
            self.shards.append(nn.Parameter(flat[self.rank * chunk:(self.rank + 1) * chunk].clone()))
            self.units.append((mod, mod_name, [(n, p.shape, p.numel()) for n, p in own]))
            for n, _ in own:
                del mod._parameters[n]
                setattr(mod, n, torch.empty(0))
            mod.register_forward_pre_hook(self._gather)
            mod.register_forward_hook(self._free)

    def _unit(self, mod):
        return next(i for i, unit in enumerate(self.units) if unit[0] is mod)

    def _gather(self, mod, args):
        i = self._unit(mod)
        flat = _Gather.apply(self.shards[i], self.compute_dtype, self.world)
        key = flat.untyped_storage().data_ptr()
        offset = 0
        for n, shape, numel in self.units[i][2]:
            setattr(mod, n, flat[offset:offset + numel].view(shape))
            offset += numel

        def pack(t):
            return t if t.untyped_storage().data_ptr() != key else (t.size(), t.stride(), t.storage_offset())

        def unpack(saved):
            if isinstance(saved, torch.Tensor):
                return saved
            size, stride, at = saved
            with torch.no_grad():
                return _all_gather(self.shards[i], self.compute_dtype, self.world).as_strided(size, stride, at)

        self.saving[mod] = torch.autograd.graph.saved_tensors_hooks(pack, unpack)
        self.saving[mod].__enter__()

    def _free(self, mod, args, out):
        self.saving.pop(mod).__exit__(None, None, None)
        for n, _, _ in self.units[self._unit(mod)][2]:
            setattr(mod, n, torch.empty(0))

    def forward(self, *args, **kwargs):
        if self.compute_dtype is not None:
            args = [a.to(self.compute_dtype) if torch.is_floating_point(a) else a for a in args]
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        for shard in self.shards:
            if shard.grad is not None:
                shard.grad /= self.world

    def gather_full_params(self) -> dict:
        full = {}
        for shard, (mod, mod_name, params) in zip(self.shards, self.units):
            out = shard.new_empty(shard.numel() * self.world)
            dist.all_gather_single(out, shard.detach())
            offset = 0
            for n, shape, numel in params:
                full[f"{mod_name}.{n}" if mod_name else n] = out[offset:offset + numel].view(shape).clone()
                offset += numel
        return full
'''

FUNCTION = '''
import functools


class _LinearFn(torch.autograd.Function):
    """F.linear on parameters gathered inside the Function: it saves the input only, backward gathers again."""

    @staticmethod
    def forward(ctx, x, fsdp, mod, *shards):
        ctx.fsdp, ctx.mod = fsdp, mod
        ctx.save_for_backward(x)
        full = fsdp._full(mod)
        return nn.functional.linear(x, full["weight"], full.get("bias"))

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        full = ctx.fsdp._full(ctx.mod)
        grad_x = grad_out @ full["weight"]
        del full
        rows = grad_out.reshape(-1, grad_out.shape[-1])
        grads = {"weight": rows.t() @ x.reshape(-1, x.shape[-1]), "bias": rows.sum(0)}
        return (grad_x, None, None, *[ctx.fsdp._scatter(grads[n]) for n in ctx.fsdp.order[ctx.mod]])


class MiniFSDP(nn.Module):
    """FSDP by hand whose layers run an autograd.Function that saves only the shard (its input, not the weight)."""

    def __init__(self, module: nn.Module, compute_dtype=None):
        super().__init__()
        self.module, self.compute_dtype = module, compute_dtype
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.shards, self.names, self.shapes = nn.ParameterList(), [], []
        self.order, self.index = {}, {}
        for mod_name, mod in list(module.named_modules()):
            own = list(mod.named_parameters(recurse=False))
            if not own:
                continue
            self.order[mod] = [n for n, _ in own]
            for name, p in own:
                flat = p.detach().reshape(-1).float()
                chunk = -(-flat.numel() // self.world)
                flat = torch.cat([flat, flat.new_zeros(chunk * self.world - flat.numel())])
                self.index[(mod, name)] = len(self.shards)
                self.shards.append(nn.Parameter(flat[self.rank * chunk:(self.rank + 1) * chunk].clone()))
                self.names.append(f"{mod_name}.{name}" if mod_name else name)
                self.shapes.append(p.shape)
                del mod._parameters[name]
                setattr(mod, name, torch.empty(0))  # a 0-element placeholder
            mod.forward = functools.partial(self._linear, mod)

    def _linear(self, mod, x):
        return _LinearFn.apply(x, self, mod, *[self.shards[self.index[(mod, n)]] for n in self.order[mod]])

    def _full(self, mod) -> dict:
        out = {}
        for n in self.order[mod]:
            i = self.index[(mod, n)]
            out[n] = _all_gather(self.shards[i], self.compute_dtype, self.world)[:self.shapes[i].numel()].view(
                self.shapes[i])
        return out

    def _scatter(self, grad):
        flat = grad.float().reshape(-1)
        chunk = -(-flat.numel() // self.world)
        if flat.numel() != chunk * self.world:
            flat = torch.cat([flat, flat.new_zeros(chunk * self.world - flat.numel())])
        mine = flat.new_empty(chunk)
        dist.reduce_scatter_single(mine, flat.contiguous())
        return mine

    def forward(self, *args, **kwargs):
        if self.compute_dtype is not None:
            args = [a.to(self.compute_dtype) if torch.is_floating_point(a) else a for a in args]
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        for shard in self.shards:
            if shard.grad is not None:
                shard.grad /= self.world

    def gather_full_params(self) -> dict:
        full = {}
        for name, shape, shard in zip(self.names, self.shapes, self.shards):
            out = shard.new_empty(shard.numel() * self.world)
            dist.all_gather_single(out, shard.detach())
            full[name] = out[:shape.numel()].view(shape).clone()
        return full
'''
