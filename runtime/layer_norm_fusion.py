"""Layer normalization written out op by op becomes one ``_FusedLayerNorm`` node (a graph optimizer pass).

Keras's ``LayerNormalization`` and ``tf.nn.moments`` + ``tf.nn.batch_normalization`` freeze into about ten
nodes: ``mean = Mean(x, axes)``, ``SquaredDifference(x, mean)`` and its ``Mean`` (the variance), an
``AddV2`` of epsilon and an ``Rsqrt``, then an affine tail that scales and shifts (``x * m + (beta - mean *
m)`` with ``m = rsqrt * gamma``, spelled with ``Mul``, ``Neg``, ``Sub`` and ``AddV2`` in an order that differs
from one writer to the next). TensorFlow's remapper fuses the same pattern for oneDNN (``_MklLayerNorm``,
last axis only); poolserve's node keeps the Mean's axes, so any axes the graph normalizes over fuse.

The statistics part is matched by its structure. The tail is matched by its value, as the GELU pass matches
GELU: a closed group of elementwise ops on ``x``, ``mean`` and ``rsqrt`` and constants is probed, its
``gamma`` and ``beta`` read off (``f(0, 0, 1) = beta``, ``f(1, 0, 1) - beta = gamma``) and the result
checked on random probes against ``(x - mean) * rsqrt * gamma + beta``. A node is absorbed only when
nothing outside needs it (the rules of the other passes: not fetched, fed, a target or a control input).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

import numpy as np

from poolserve.proto import node_def_pb2
from poolserve.runtime.builder import attr_value
from poolserve.runtime.kernels.registry import OpContext
from poolserve.runtime.types import TensorId

if TYPE_CHECKING:
    from poolserve.runtime.optimizer import _Rewriter

_TAIL_OPS = ("Mul", "Add", "AddV2", "Sub", "Neg", "RealDiv")
_TAIL_MAX_NODES = 10
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def fuse_layer_norms(rw: _Rewriter) -> None:
    for pn in rw.plan.nodes:
        if pn.op == "Mean" and pn.name not in rw.absorbed and pn.name not in rw.emitted:
            _fuse(rw, pn.name)


def _fuse(rw: _Rewriter, mean_name: str) -> None:
    mean = rw.nodes[mean_name]
    dtype = mean.attr_dtype("T", np.float32)
    if dtype not in _FLOATS or not mean.attr_bool("keep_dims", False) or len(mean.inputs) != 2:
        return
    x = mean.inputs[0]
    axes = rw.const(mean.inputs[1])
    if rw.const(x) is not None or not _int_vector(axes) or not _private(rw, mean_name):
        return
    # SquaredDifference(x, mean), through StopGradient when the identity pass is off
    stop = None
    sq_name = None
    for user in rw.uses.get((mean_name, 0), []):
        node = rw.nodes[user]
        if node.op == "StopGradient" and not node.control_inputs:
            stop = user
            users = rw.uses.get((user, 0), [])
            sq_name = users[0] if len(users) == 1 and _private(rw, user) else None
        elif node.op == "SquaredDifference":
            sq_name = user
    if sq_name is None:
        return
    sq = rw.nodes[sq_name]
    if sorted(sq.inputs) != sorted([x, (stop or mean_name, 0)]):
        return
    var_name = rw.sole_consumer(sq_name)
    var = rw.nodes[var_name] if var_name is not None else None
    if var is None or var.op != "Mean" or not var.attr_bool("keep_dims", False) or len(var.inputs) != 2:
        return
    var_axes = rw.const(var.inputs[1])
    if not _int_vector(var_axes) or set(var_axes.reshape(-1).tolist()) != set(axes.reshape(-1).tolist()):
        return
    assert var_name is not None
    add_name = rw.sole_consumer(var_name)
    add = rw.nodes[add_name] if add_name is not None else None
    if add is None or add.op not in ("Add", "AddV2") or len(add.inputs) != 2:
        return
    eps = rw.const(add.inputs[1] if add.inputs[0] == (var_name, 0) else add.inputs[0])
    if not isinstance(eps, np.ndarray) or eps.size != 1 or eps.dtype != dtype:
        return
    assert add_name is not None
    rsqrt_name = rw.sole_consumer(add_name)
    if rsqrt_name is None or rw.nodes[rsqrt_name].op != "Rsqrt" or not _private(rw, rsqrt_name):
        return
    stats = [mean_name, *([stop] if stop else []), sq_name, var_name, add_name, rsqrt_name]
    if any(rw.nodes[n].control_inputs for n in stats[1:]):
        return
    found = _tail(rw, x, mean_name, rsqrt_name, set(stats), dtype)
    if found is None:
        return
    members, gamma, beta = found
    _emit(rw, x, mean, float(eps.reshape(())), [*stats, *members], gamma, beta, dtype)


def _int_vector(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind == "i" and value.ndim <= 1 and value.size > 0


def _private(rw: _Rewriter, name: str) -> bool:
    """Whether ``name``'s output may vanish into a fused node: nobody outside the graph sees it."""
    return not (
        name in rw.pinned
        or name in rw.fetched_nodes
        or name in rw.absorbed
        or name in rw.emitted
        or name in rw.multi_port
        or any((name, p) in rw.fed for p in range(rw.graph.num_outputs[name]))
    )


def _tail(
    rw: _Rewriter, x: TensorId, mean: str, rsqrt: str, stats: set[str], dtype: np.dtype[Any]
) -> tuple[list[str], Any, Any] | None:
    """The affine tail after the statistics: its nodes (the last is the one whose output leaves), gamma and
    beta; None when the nodes reading ``mean`` and ``rsqrt`` are not exactly such a tail."""
    sources = {x, (mean, 0), (rsqrt, 0)}
    # elementwise nodes downstream of mean and rsqrt, in graph order, each reading only the sources,
    # constants and earlier members; a node that reads anything else ends the walk along its path
    group: list[str] = []
    consts: dict[TensorId, Any] = {}
    seen: set[str] = set(stats)
    heap = [(rw.position[u], u) for u in rw.uses.get((mean, 0), []) + rw.uses.get((rsqrt, 0), [])]
    heapq.heapify(heap)
    while heap and len(group) < _TAIL_MAX_NODES:
        _, u = heapq.heappop(heap)
        if u in seen or u in rw.absorbed or u in rw.emitted:
            continue
        seen.add(u)
        node = rw.nodes[u]
        if node.op not in _TAIL_OPS or node.control_inputs or node.attr_dtype("T", dtype) != dtype:
            continue
        mine: dict[TensorId, Any] = {}
        for t in node.inputs:
            if t in sources or (t[1] == 0 and t[0] in group):
                continue
            c = rw.const(t)
            if not isinstance(c, np.ndarray) or c.dtype != dtype:
                break
            mine[t] = c
        else:
            group.append(u)
            consts.update(mine)
            for v in rw.uses.get((u, 0), []):
                heapq.heappush(heap, (rw.position[v], v))
    # the sink is the one member whose output leaves; the statistics and every other member feed only the
    # tail. The largest such tail wins.
    for sink in reversed(group):
        members = [u for u in group if u in _ancestors(rw, sink, set(group))]
        inside = set(members)
        if sink in rw.multi_port or not set(rw.uses.get((rsqrt, 0), [])) <= inside:
            continue
        if not set(rw.uses.get((mean, 0), [])) <= inside | stats:
            continue
        if not all(_private(rw, u) and set(rw.uses.get((u, 0), [])) <= inside for u in members[:-1]):
            continue
        used = {t: c for t, c in consts.items() if any(t in rw.nodes[u].inputs for u in members)}
        try:
            shape = np.broadcast_shapes(*(c.shape for c in used.values()))
        except ValueError:
            return None
        found = _affine(rw, members, used, shape, dtype, (x, (mean, 0), (rsqrt, 0)))
        if found is not None:
            return found
    return None


def _ancestors(rw: _Rewriter, sink: str, inside: set[str]) -> set[str]:
    found = {sink}
    stack = [sink]
    while stack:
        for t in rw.nodes[stack.pop()].inputs:
            if t[0] in inside and t[0] not in found:
                found.add(t[0])
                stack.append(t[0])
    return found


def _affine(
    rw: _Rewriter,
    group: list[str],
    consts: dict[TensorId, Any],
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    xmr: tuple[TensorId, TensorId, TensorId],
) -> tuple[list[str], Any, Any] | None:
    """gamma and beta when the group computes ``(x - mean) * rsqrt * gamma + beta``, probed in float64."""
    ctx = OpContext()

    def f(x: Any, m: Any, r: Any) -> Any:
        values: dict[TensorId, Any] = dict(zip(xmr, (x, m, r), strict=True))
        for u in group:
            ins = [values[t] if t in values else consts[t].astype(np.float64) for t in rw.nodes[u].inputs]
            values[(u, 0)] = np.asarray(rw.graph.kernels[u](ctx, ins)[0], np.float64)
        out = values[(group[-1], 0)]
        if out.shape != shape:
            raise ValueError("the tail changes the shape")
        return out

    zero, one = np.zeros(shape), np.ones(shape)
    try:
        with np.errstate(all="ignore"):
            beta = f(zero, zero, one)
            gamma = f(one, zero, one) - beta
            rng = np.random.default_rng(0)
            for _ in range(2):
                x, m, r = (rng.uniform(-3.0, 3.0, shape) for _ in range(3))
                want = (x - m) * r * gamma + beta
                if not np.all(np.abs(f(x, m, r) - want) <= 1e-9 * (1.0 + np.abs(want))):
                    return None
    except Exception:  # a kernel that refuses the probe: not a layer norm
        return None
    return group, gamma.astype(dtype), beta.astype(dtype)


def _emit(
    rw: _Rewriter,
    x: TensorId,
    mean: Any,
    epsilon: float,
    chain: list[str],
    gamma: Any,
    beta: Any,
    dtype: np.dtype[Any],
) -> None:
    name = chain[-1]
    nd = node_def_pb2.NodeDef(name=name, op="_FusedLayerNorm", device=mean.device)
    nd.attr["T"].CopyFrom(attr_value(dtype))
    nd.attr["epsilon"].f = epsilon
    nd.attr["axes"].CopyFrom(attr_value([int(a) for a in rw.const(mean.inputs[1]).reshape(-1)]))
    inputs = [
        x[0] if x[1] == 0 else f"{x[0]}:{x[1]}",
        rw.constant(f"{name}/_gamma", gamma),
        rw.constant(f"{name}/_beta", beta),
    ]
    rw.replace_chain(nd, inputs, chain)
