import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from support import RUNS, sleep_op

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder, shape
from poolserve.runtime.errors import (
    CancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from poolserve.runtime.node import parse_input
from poolserve.runtime.session import Session


def mlp_graph():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 3))
    w = b.constant(np.arange(6, dtype=np.float32).reshape(3, 2), name="w")
    two = b.constant(np.float32(2), name="two")
    w2 = b.mul(w, two, name="w2")  # constant-only: folded
    y = b.add(b.matmul(x, w2, name="mm"), b.constant(np.ones(2, np.float32), name="bias"), name="y")
    return b, x, y


def expected_y(x):
    return np.asarray(x, np.float32) @ (np.arange(6, dtype=np.float32).reshape(3, 2) * 2) + 1


X = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
# Grappler's rewrites off: mm and y stay two nodes instead of one _FusedMatMul (tests/test_optimizer.py)
PLAIN = config_pb2.ConfigProto()
PLAIN.graph_options.rewrite_options.disable_meta_optimizer = True


# --- fetches and feeds -----------------------------------------------------------------------------------


def test_run_fetch_structures():
    b, x, y = mlp_graph()
    Pair = collections.namedtuple("Pair", "a b")
    with Session(b.graph_def) as s:
        np.testing.assert_allclose(s.run(y, {x: X}), expected_y(X))
        out = s.run({"k": [y, Pair(y, (x,))], "t": "y"}, {x: X})
        assert set(out) == {"k", "t"}
        assert out["t"] is None  # an op name is a target
        assert isinstance(out["k"][1], Pair) and isinstance(out["k"][1].b, tuple)
        np.testing.assert_allclose(out["k"][1].a, expected_y(X))
        np.testing.assert_array_equal(out["k"][1].b[0], X)  # a fed tensor fetched is the fed value


def test_fetch_asked_twice_is_computed_once():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (2,))
    s1 = sleep_op(b, x, 0, "count_me")
    with Session(b.graph_def) as s:
        a, c = s.run([s1, s1], {x: [1, 2]})
    assert RUNS["count_me"] == 1
    np.testing.assert_array_equal(a, c)


def test_feed_lists_and_scalars_convert_to_placeholder_dtype():
    b, x, y = mlp_graph()
    with Session(b.graph_def) as s:
        out = s.run(y, {x: [[1, 2, 3]]})
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected_y([[1, 2, 3]]))


def test_feed_errors_name_the_feed():
    b, x, y = mlp_graph()
    with Session(b.graph_def) as s:
        with pytest.raises(
            InvalidArgumentError, match=r"shape \(2, 4\) for Tensor 'x:0', which has shape \(\?, 3\)"
        ):
            s.run(y, {x: np.zeros((2, 4), np.float32)})
        np.testing.assert_allclose(s.run(y, {x: np.ones((1, 3), np.float64)}), expected_y(np.ones((1, 3))))
        with pytest.raises(InvalidArgumentError, match="You must feed a value for placeholder tensor 'x'"):
            s.run(y)
        with pytest.raises(NotFoundError, match="nope"):
            s.run(y, {"nope:0": X})
        with pytest.raises(NotFoundError, match="nope"):
            s.run("nope:0", {x: X})
        with pytest.raises(TypeError, match="invalid type"):
            s.run(42)


def test_argument_errors_are_also_the_python_errors_tensorflow_raises():
    # TensorFlow's Session.run raises ValueError for a feed of the wrong shape and for a fetch it cannot
    # interpret, TypeError for a feed_dict key it cannot interpret; poolserve's keep their canonical codes
    b, x, y = mlp_graph()
    with Session(b.graph_def) as s:
        with pytest.raises(ValueError, match=r"shape \(2, 4\) for Tensor 'x:0'") as shape_error:
            s.run(y, {x: np.zeros((2, 4), np.float32)})
        assert isinstance(shape_error.value, InvalidArgumentError)
        for fetch in ("nope:0", "nope", "y:1"):
            with pytest.raises(ValueError, match=fetch.split(":")[0]) as fetch_error:
                s.run(fetch, {x: X})
            assert isinstance(fetch_error.value, NotFoundError)
        with pytest.raises(TypeError, match="nonexistent") as key_error:
            s.run(y, {"nonexistent:0": X})
        assert isinstance(key_error.value, NotFoundError)
        for key in ("x:zz", "y:1", 7):
            with pytest.raises(TypeError) as key_error:
                s.run(y, {key: X})
            assert isinstance(key_error.value, (InvalidArgumentError, NotFoundError))
        with pytest.raises(TypeError, match=r"dtype complex64 for Tensor 'x:0'") as dtype_error:
            s.run(y, {x: np.ones((1, 3), np.complex64)})
        assert isinstance(dtype_error.value, InvalidArgumentError)
        # an operation's name as a feed key stands for its output 0: TensorFlow refuses it (TypeError),
        # poolserve keeps taking it, as the servers' clients name inputs by node
        np.testing.assert_allclose(s.run(y, {"x": X}), expected_y(X))


def test_lossy_feed_dtype_is_refused():
    b = GraphBuilder()
    i = b.placeholder("i", np.int32, (2,))
    y = b.add(i, i)
    with Session(b.graph_def) as s:
        assert s.run(y, {i: np.array([1, 2], np.int16)}).tolist() == [2, 4]  # widening is fine
        with pytest.raises(
            InvalidArgumentError, match=r"dtype float64 for Tensor 'i:0', which has dtype int32"
        ):
            s.run(y, {i: np.array([1.5, 2.0])})


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix
def test_array_subclasses_are_fed_as_their_plain_arrays():
    # TensorFlow feeds np.asarray(value): an np.matrix or a masked array goes in as its plain data
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 3))
    axis = b.constant(np.int32(0), name="axis")
    m = b.op("Max", [x, axis], {"T": np.float32, "Tidx": np.int32, "keep_dims": False}, name="m")
    with Session(b.graph_def) as s:
        out = s.run(m, {x: np.matrix([[1, 5, 3], [4, 2, 6]], np.float32)})
        assert type(out) is np.ndarray and out.tolist() == [4, 5, 6]
        masked = np.ma.masked_array(np.array([[1, 5, 3]], np.float32), mask=[[0, 1, 0]])
        out = s.run(m, {x: masked})
        assert type(out) is np.ndarray and out.tolist() == [1, 5, 3]
        fed = s.run(x, {x: np.matrix([[1, 2, 3]], np.float64)})
        assert type(fed) is np.ndarray and fed.dtype == np.float32


def test_feeds_that_would_wrap_or_are_not_strings_are_refused():
    # TensorFlow refuses a Python int its tensor's dtype cannot hold (TypeError) where numpy would wrap it,
    # and numbers fed to a string tensor
    b = GraphBuilder()
    i = b.placeholder("i", np.int32, ())
    v = b.placeholder("v", np.int32, (None,))
    u = b.placeholder("u", np.uint8, (None,))
    t = b.placeholder("t", object, ())
    with Session(b.graph_def) as s:
        assert s.run(i, {i: -(2**31)}) == -(2**31) and s.run(v, {v: [2**31 - 1]}).tolist() == [2**31 - 1]
        for tensor, value, shown in (
            (i, 2**31, "2147483648"),
            (i, 2**63, "9223372036854775808"),
            (v, [1, -(2**31) - 1], "-2147483649"),
            (v, np.array([1, 2**40], np.int64), "1099511627776"),
            (u, [255, 256], "256"),
            (u, -1, "-1"),
        ):
            with pytest.raises(TypeError, match=rf"{shown} .*out of the range of") as e:
                s.run(tensor, {tensor: value})
            assert isinstance(e.value, InvalidArgumentError)
        assert s.run(t, {t: "caf\u00e9"}) == "caf\u00e9".encode()
        fed_t = s.make_callable(t, [t])
        for value in (5, 5.0, True, np.array(5), np.array(5, object)):
            with pytest.raises(TypeError, match=r"Tensor 't:0', which has dtype string") as e:
                s.run(t, {t: value})
            assert isinstance(e.value, InvalidArgumentError)
            with pytest.raises(TypeError, match=r"Tensor 't:0', which has dtype string"):
                fed_t(value)


def test_feeding_an_inner_tensor_overrides_it():
    b, x, y = mlp_graph()
    with Session(b.graph_def) as s:
        out = s.run(y, {"mm:0": np.zeros((1, 2), np.float32)})  # x need not be fed: mm is cut off
    np.testing.assert_array_equal(out, [[1, 1]])


def test_a_value_fed_for_an_inner_tensor_takes_its_dtype_and_shape():
    # TensorFlow converts a value fed for any tensor to that tensor's dtype (from its op's definition and
    # attrs) and checks it against the shape the graph knows (a Const's, _output_shapes); poolserve
    # applies the conversion rules of placeholders
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 3))
    one = b.constant(np.float32(1), name="one")
    mid = b.op("AddV2", [x, one], {"T": np.float32, "_output_shapes": [shape([None, 3])]}, name="mid")
    out = b.matmul(mid, b.constant(np.ones((3, 2), np.float32)), name="out")
    ci = b.constant(np.array([1, 2], np.int32), name="ci")
    cic = b.add(ci, b.constant(np.int32(1)), name="cic")
    eq = b.op("Equal", [x, x], {"T": np.float32}, name="eq")
    parts = b.op("Split", [b.constant(np.int32(0)), x], {"T": np.float32, "num_split": 3}, num_outputs=3)
    with Session(b.graph_def) as s:
        got = s.run(out, {mid: np.ones((1, 3))})  # float64 fed: float32, as TensorFlow's [[3., 3.]]
        assert got.dtype == np.float32 and got.tolist() == [[3, 3]]
        got = s.run(cic, {ci: [5.7, 6.2]})  # a list converts, as TensorFlow's [6, 7]
        assert got.dtype == np.int32 and got.tolist() == [6, 7]
        fed = s.run(eq, {eq: [1, 0]})  # Equal's output is bool, whatever its T
        assert fed.dtype == np.bool_ and fed.tolist() == [True, False]
        assert s.run(parts[2], {parts[2]: [[7]]}).dtype == np.float32  # port 2 of T * num_split
        with pytest.raises(ValueError, match=r"shape \(1, 4\) for Tensor 'mid:0', which has shape \(\?, 3\)"):
            s.run(out, {mid: np.ones((1, 4), np.float32)})
        with pytest.raises(ValueError, match=r"shape \(3,\) for Tensor 'ci:0', which has shape \(2,\)"):
            s.run(cic, {ci: [1, 2, 3]})
        with pytest.raises(TypeError, match=r"dtype float64 for Tensor 'ci:0', which has dtype int32"):
            s.run(cic, {ci: np.array([1.5, 2.5])})


def test_a_fed_tensors_node_run_anyway_leaves_its_consumers_the_fed_value():
    # TensorFlow runs the node itself when it is a target (or another of its outputs is needed), while the
    # fed tensor's consumers read the fed value: a fed Placeholder run as a target fails as unfed
    import asyncio

    b, x, y = mlp_graph()
    pooled = config_pb2.RunOptions()
    pooled.experimental.use_run_handler_pool = True
    unfed = r"You must feed a value for placeholder tensor 'x' with dtype float32 and shape \[\?,3\]"
    with Session(b.graph_def) as s:
        for options in (None, pooled):
            with pytest.raises(InvalidArgumentError, match=unfed):
                s.run([y, "x"], {x: X}, options=options)
            with pytest.raises(InvalidArgumentError, match=unfed):
                asyncio.run(s.arun([y, "x"], {"x:0": X}, options=options))
    b = GraphBuilder()
    v = b.placeholder("v", np.float32, (3,))
    c = b.constant(np.array([1, 2], np.int32), name="c")
    pw = b.op(
        "PlaceholderWithDefault",
        [b.constant(np.float32([1, 2]))],
        {"dtype": np.float32, "shape": shape([2])},
        name="pw",
    )
    parts = b.op(
        "Split", [b.constant(np.int32(0)), v], {"T": np.float32, "num_split": 3}, name="split", num_outputs=3
    )
    total = b.add(parts[0], parts[1], name="total")
    c_out, pw_out = b.identity(c, name="c_out"), b.identity(pw, name="pw_out")
    with Session(b.graph_def) as s:
        got = s.run([c_out, "c", pw_out, "pw"], {c: [5, 6], pw: [7, 8]})
        assert got[0].tolist() == [5, 6] and got[2].tolist() == [7, 8] and got[1] is None is got[3]
        # split runs for its output 1; total reads the fed output 0
        assert s.run(total, {v: [1, 2, 3], parts[0]: [100]}).tolist() == [102]


def test_0_d_results_are_numpy_scalars_as_tensorflow_returns_them():
    # TensorFlow's Session.run returns np.float32(6.0) for a 0-d float, b'hello' for a 0-d string, and a
    # fetched fed tensor as it was fed (a 0-d array stays one); run, arun, callables and partial runs alike
    import asyncio

    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 3))
    axes = b.constant(np.array([0, 1], np.int32), name="axes")
    total = b.op("Sum", [x, axes], {"T": np.float32, "Tidx": np.int32, "keep_dims": False}, name="total")
    word = b.constant(np.array(b"hello", object), name="word")
    i = b.placeholder("i", np.int32, ())
    twice = b.add(i, i, name="twice")
    ones = np.ones((2, 3), np.float32)

    def check(got: list[Any]) -> None:
        assert type(got[0]) is np.float32 and got[0] == 6
        assert type(got[1]) is bytes and got[1] == b"hello"
        assert type(got[2]) is np.int32 and got[2] == 10
        assert type(got[3]) is np.ndarray and got[3].shape == () and got[3] == 5  # fed: as fed
        assert type(got[4]) is np.ndarray and got[4].shape == (2, 3)

    fetches = [total, word, twice, i, x]
    with Session(b.graph_def) as s:
        check(s.run(fetches, {x: ones, i: 5}))
        check(asyncio.run(s.arun(fetches, {x: ones, i: 5})))
        check(s.make_callable(fetches, [x, i])(ones, 5))
        assert type(s.run(total, {x: ones})) is np.float32
        h = s.partial_run_setup(fetches, [x, i])
        check([*s.partial_run(h, fetches[:2], {x: ones}), *s.partial_run(h, fetches[2:], {i: 5})])


def test_results_never_share_memory_with_the_callers_feeds():
    # TensorFlow's results are arrays of their own: writing into an Identity, Reshape, ExpandDims or
    # Squeeze of a fed array never changes what the caller fed (a fetched fed tensor is the value fed)
    import asyncio

    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (2, 3))
    same = b.identity(x, name="same")
    flat = b.reshape(x, [6], name="flat")
    axis = b.constant(np.int32(0), name="axis")
    wide = b.op("ExpandDims", [x, axis], {"T": np.float32, "Tdim": np.int32}, name="wide")
    narrow = b.op("Squeeze", [wide], {"T": np.float32, "squeeze_dims": [0]}, name="narrow")
    views = [same, flat, wide, narrow]
    with Session(b.graph_def) as s:
        f = s.make_callable(views, [x])

        def partial(fed: np.ndarray) -> Any:
            return s.partial_run(s.partial_run_setup(views, [x]), views, {x: fed})

        for run in (
            lambda fed: s.run(views, {x: fed}),
            lambda fed: asyncio.run(s.arun(views, {x: fed})),
            f,
            partial,
            lambda fed: [s.run(same, {x: fed})],
            lambda fed: [s.make_callable(same, [x])(fed)],
        ):
            fed = np.arange(6, dtype=np.float32).reshape(2, 3)
            for out in run(fed):
                assert not np.shares_memory(out, fed)
                out[...] = -1
            assert fed.tolist() == [[0, 1, 2], [3, 4, 5]]
        fed = np.ones((2, 3), np.float32)
        assert s.run(x, {x: fed}) is fed


def test_kernel_error_names_the_node():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, None)
    y = b.placeholder("y", np.float32, None)
    z = b.matmul(x, y, name="bad_mm")
    with Session(b.graph_def) as s, pytest.raises(InvalidArgumentError, match=r"\{\{node bad_mm\}\}") as e:
        s.run(z, {x: np.ones((2, 3)), y: np.ones((4, 5))})
    assert e.value.node_name == "bad_mm"


def test_concurrent_runs_on_one_session():
    b, x, y = mlp_graph()
    errors = []
    with Session(b.graph_def) as s:

        def client(seed):
            rng = np.random.default_rng(seed)
            for _ in range(30):
                v = rng.standard_normal((4, 3)).astype(np.float32)
                out = s.run(y, {x: v})
                if not np.allclose(out, expected_y(v), rtol=1e-5):
                    errors.append(seed)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert not errors


def test_concurrent_runs_overlap():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    y = sleep_op(b, x, 0.2, "slow")
    cfg = config_pb2.ConfigProto(inter_op_parallelism_threads=4, use_per_session_threads=True)
    with Session(b.graph_def, cfg) as s:
        t0 = time.monotonic()
        futures = [s.submit(y, {x: 1.0}) for _ in range(3)]
        for f in futures:
            f.result(10)
        elapsed = time.monotonic() - t0
    assert elapsed < 0.5  # three 0.2 s steps in parallel, not 0.6 s in a row


# --- executor cache and constant folding ----------------------------------------------------------------


def test_plan_cache_keyed_by_signature_in_any_order():
    b = GraphBuilder()
    a = b.placeholder("a", np.float32, ())
    c = b.placeholder("c", np.float32, ())
    s1 = b.add(a, c, name="s1")
    s2 = b.mul(a, c, name="s2")
    with Session(b.graph_def) as s:
        s.run([s2, s1], {c: 2, a: 1})
        s.run([s1, s2], {c: 2, a: 1}, options=config_pb2.RunOptions(timeout_in_ms=1000))
        plans = set(map(id, s._calls.plans.values()))
        assert len(plans) == 1  # reordered signature and other options hit the same plan
        assert len(s._calls.plans) == 3  # caller-order keys of both calls, plus the sorted key
        s.run([s1, s2], {a: 1, c: 2})  # the sorted order itself: no new key
        assert len(s._calls.plans) == 3
        assert s.run([s2, s1], {c: 2, a: 1}) == [2, 3]


def traced_nodes(s, fetch, feeds):
    md = config_pb2.RunMetadata()
    s.run(
        fetch,
        feeds,
        options=config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE),
        run_metadata=md,
    )
    return {n.node_name for n in md.step_stats.dev_stats[0].node_stats}, md


def test_constant_subgraphs_are_folded_once():
    b, x, y = mlp_graph()
    with Session(b.graph_def, PLAIN) as s:
        names, _ = traced_nodes(s, y, {x: X})
    assert names == {"mm", "y"}  # w2 = w * two was folded; Consts are never executed
    off = config_pb2.ConfigProto()
    off.CopyFrom(PLAIN)
    off.graph_options.optimizer_options.opt_level = config_pb2.OptimizerOptions.L0
    with Session(b.graph_def, off) as s:
        names, _ = traced_nodes(s, y, {x: X})
        np.testing.assert_allclose(s.run(y, {x: X}), expected_y(X))
    assert names == {"mm", "y", "w2"}


# --- RunOptions -------------------------------------------------------------------------------------------


def chain_graph(n, seconds):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    t = x
    for i in range(n):
        t = sleep_op(b, t, seconds, f"step{i}")
    return b, x, t


def test_timeout_cancels_the_step_and_session_stays_usable():
    b, x, t = chain_graph(40, 0.01)
    with Session(b.graph_def) as s:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceededError, match="50 ms"):
            s.run(t, {x: 1.0}, options=config_pb2.RunOptions(timeout_in_ms=50))
        elapsed = time.monotonic() - t0
        assert elapsed < 0.25  # 50 ms plus about one 10 ms node, with room for a slow machine
        started = sum(RUNS.get(f"step{i}", 0) for i in range(40))
        time.sleep(0.1)
        assert sum(RUNS.get(f"step{i}", 0) for i in range(40)) == started  # nothing more started
        assert started < 15
        # the session still works
        assert s.run(t, {x: 2.0}, options=config_pb2.RunOptions(timeout_in_ms=5000)) == 2.0


def test_operation_timeout_from_config():
    b, x, t = chain_graph(20, 0.01)
    with (
        Session(b.graph_def, config_pb2.ConfigProto(operation_timeout_in_ms=30)) as s,
        pytest.raises(DeadlineExceededError),
    ):
        s.run(t, {x: 1.0})


def test_timeout_also_applies_to_submit():
    b, x, t = chain_graph(40, 0.01)
    with Session(b.graph_def) as s:
        f = s.submit(t, {x: 1.0}, options=config_pb2.RunOptions(timeout_in_ms=40))
        with pytest.raises(DeadlineExceededError):
            f.result(5)


def test_inter_op_thread_pool_selection():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    y = sleep_op(b, x, 0, "where")
    cfg = config_pb2.ConfigProto()
    cfg.session_inter_op_thread_pool.add(num_threads=1)
    cfg.session_inter_op_thread_pool.add(num_threads=2)
    with Session(b.graph_def, cfg) as s:
        for bad in (-2, 2, 7):
            with pytest.raises(InvalidArgumentError, match=f"Invalid inter_op_thread_pool: {bad}"):
                s.run(y, {x: 1.0}, options=config_pb2.RunOptions(inter_op_thread_pool=bad))
        md = config_pb2.RunMetadata()
        opts = config_pb2.RunOptions(inter_op_thread_pool=-1, trace_level=config_pb2.RunOptions.FULL_TRACE)
        s.run(y, {x: 1.0}, options=opts, run_metadata=md)
        (dev,) = md.step_stats.dev_stats
        assert set(dev.thread_names.values()) == {threading.current_thread().name}
        md2 = config_pb2.RunMetadata()
        opts = config_pb2.RunOptions(inter_op_thread_pool=1, trace_level=config_pb2.RunOptions.FULL_TRACE)
        s.submit(y, {x: 1.0}, options=opts, run_metadata=md2).result(5)
        assert set(md2.step_stats.dev_stats[0].thread_names.values()) <= {
            "session_pool_1/0",
            "session_pool_1/1",
        }


def test_global_pool_cannot_be_resized():
    b, x, y = mlp_graph()
    cfg = config_pb2.ConfigProto()
    cfg.session_inter_op_thread_pool.add(num_threads=2, global_name="test_shared_pool")
    with Session(b.graph_def, cfg) as s1:
        other = config_pb2.ConfigProto()
        other.session_inter_op_thread_pool.add(num_threads=2, global_name="test_shared_pool")
        with Session(b.graph_def, other) as s2:
            assert s1._pools[0] is s2._pools[0]
        bad = config_pb2.ConfigProto()
        bad.session_inter_op_thread_pool.add(num_threads=3, global_name="test_shared_pool")
        with pytest.raises(
            InvalidArgumentError,
            match="Pool test_shared_pool configured previously with num_threads=2; cannot re-configure with num_threads=3",
        ):
            Session(b.graph_def, bad)


def test_trace_fills_step_stats_and_cost_graph():
    b, x, y = mlp_graph()
    with Session(b.graph_def, PLAIN) as s:
        md = config_pb2.RunMetadata()
        s.run(y, {x: X}, run_metadata=md)
        assert not md.HasField("step_stats")  # NO_TRACE records nothing
        names, md = traced_nodes(s, y, {x: X})
    (dev,) = md.step_stats.dev_stats
    assert dev.device == "/job:localhost/replica:0/task:0/device:CPU:0"
    assert dev.thread_names
    by_name = {n.node_name: n for n in dev.node_stats}
    mm = by_name["mm"]
    assert mm.timeline_label == "mm = MatMul(x, w2)"
    assert mm.all_start_micros > 1_600_000_000_000_000
    # the op is the whole of the node's execution here: both end together, after some time
    assert mm.op_end_rel_nanos == mm.all_end_rel_nanos > 0
    assert mm.op_end_rel_micros == mm.all_end_rel_micros == mm.all_end_rel_nanos // 1000
    assert mm.scheduled_micros <= mm.all_start_micros
    assert mm.thread_id in dev.thread_names
    (out,) = mm.output
    assert [d.size for d in out.tensor_description.shape.dim] == [2, 2]
    assert out.tensor_description.allocation_description.requested_bytes == 16
    assert mm.memory[0].allocator_name == "cpu"
    assert by_name["y"].all_start_nanos >= mm.all_start_nanos + mm.all_end_rel_nanos  # y waits for mm
    cost = {n.name: n for n in md.cost_graph.node}
    assert set(cost) == {"mm", "y"}
    assert cost["y"].is_final and not cost["mm"].is_final
    assert cost["y"].input_info[0].preceding_node == cost["mm"].id
    assert cost["mm"].output_info[0].size == 16


def test_each_run_replaces_what_its_run_metadata_held():
    # TensorFlow parses each run's RunMetadata into the message given: a traced run replaces what an earlier
    # run left there, an untraced one leaves it empty, whichever way the run goes
    import asyncio

    b, x, y = mlp_graph()
    traced = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE, output_partition_graphs=True)
    pooled = config_pb2.RunOptions()
    pooled.CopyFrom(traced)
    pooled.experimental.use_run_handler_pool = True
    md = config_pb2.RunMetadata()
    with Session(b.graph_def, PLAIN) as s:
        f = s.make_callable(y, [x], accept_options=True)
        runs: list[Callable[[config_pb2.RunOptions | None], Any]] = [
            lambda options: s.run(y, {x: X}, options=options, run_metadata=md),
            lambda options: s.submit(y, {x: X}, options=options, run_metadata=md).result(10),
            lambda options: asyncio.run(s.arun(y, {x: X}, options=options, run_metadata=md)),
            lambda options: f(X, options=options, run_metadata=md),
        ]
        for run in runs:
            for options in (traced, pooled, traced):
                run(options)
                assert len(md.step_stats.dev_stats) == 1 and len(md.partition_graphs) == 1
                assert sorted(n.name for n in md.cost_graph.node) == ["mm", "y"]
            run(None)
            assert md == config_pb2.RunMetadata()


def test_output_partition_graphs():
    b, x, y = mlp_graph()
    options = config_pb2.RunOptions(output_partition_graphs=True)
    with Session(b.graph_def, PLAIN) as s:
        md = config_pb2.RunMetadata()
        s.run(y, {x: X}, options=options, run_metadata=md)
    (g,) = md.partition_graphs
    ops = {n.name: n.op for n in g.node}
    assert ops["mm"] == "MatMul" and ops["y"] == "AddV2"
    assert ops["w2"] == "Const"  # folded
    assert ops["x"] == "Placeholder"  # fed: the graph is whole, as TensorFlow's partition graphs are
    assert {n.device for n in g.node} == {"/job:localhost/replica:0/task:0/device:CPU:0"}
    with Session(b.graph_def) as s:  # the graph optimizer on: the graph that ran is the rewritten one
        md = config_pb2.RunMetadata()
        s.run(y, {x: X}, options=options, run_metadata=md)
    ops = {n.name: n.op for n in md.partition_graphs[0].node}
    assert ops == {"x": "Placeholder", "y": "_FusedMatMul", "w2": "Const", "bias": "Const"}


def test_partition_graphs_are_whole_graphs():
    """Every input of a partition graph names one of its nodes, as in TensorFlow's (which
    ``tf.import_graph_def`` takes): a fed tensor, a fed second output of a node that runs, folded outputs of
    a two-output node and a control input on a folded node used to be left dangling. Run again, the graph
    gives the same values."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None,))
    u = b.op("Unique", [x], {"T": np.float32, "out_idx": np.int32}, name="u", num_outputs=2)
    idx = b.identity(u[1], name="idx")
    halves = {"T": np.float32, "num_split": 2}
    axis, c = b.constant(np.int32(0), name="axis"), b.constant(np.arange(4, dtype=np.float32), name="c")
    sp = b.op("Split", [axis, c], halves, name="sp", num_outputs=2)  # constant-only: folded
    z = b.add(u[0], sp[1], name="z")
    after = b.op("AddV2", [sp[0], u[0]], {"T": np.float32}, name="after", control_inputs=["sp"])
    feeds = {x: np.array([3, 1, 3], np.float32), u[1]: np.array([5, 6, 7], np.int32)}
    options = config_pb2.RunOptions(output_partition_graphs=True)
    md = config_pb2.RunMetadata()
    with Session(b.graph_def, PLAIN) as s:
        want = s.run([z, idx, after], feeds, options=options, run_metadata=md)
    (g,) = md.partition_graphs
    names = {n.name for n in g.node}
    assert all(parse_input(spec)[0] in names for n in g.node for spec in n.input)
    ops = {n.name: n.op for n in g.node}
    assert ops["x"] == ops["u/_port1"] == "Placeholder" and ops["sp/_port0"] == ops["sp/_port1"] == "Const"
    with Session(g, PLAIN) as again:
        got = again.run([z, idx, after], {x: feeds[x], "u/_port1:0": feeds[u[1]]})
    for a, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, w)


def test_partition_graphs_are_refused_where_the_config_disables_them():
    # TensorFlow: "RunOptions.output_partition_graphs() is not supported when
    # disable_output_partition_graphs is true.", before the step runs
    import asyncio

    b, x, y = mlp_graph()
    config = config_pb2.ConfigProto()
    config.experimental.disable_output_partition_graphs = True
    options = config_pb2.RunOptions(output_partition_graphs=True)
    refused = r"output_partition_graphs\(\) is not supported when disable_output_partition_graphs is true"
    with Session(b.graph_def, config) as s:
        f = s.make_callable(y, [x], accept_options=True)
        for run in (
            lambda: s.run(y, {x: X}, options=options),
            lambda: s.submit(y, {x: X}, options=options),
            lambda: asyncio.run(s.arun(y, {x: X}, options=options)),
            lambda: f(X, options=options),
        ):
            with pytest.raises(InvalidArgumentError, match=refused):
                run()
        md = config_pb2.RunMetadata()
        traced = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE)
        np.testing.assert_allclose(s.run(y, {x: X}, options=traced, run_metadata=md), expected_y(X))
        assert md.step_stats.dev_stats and not md.partition_graphs


def big_graph():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None,))
    a = b.op("Tile", [x, b.constant(np.array([1000], np.int32))], {"T": np.float32}, name="tile_big")
    c = b.add(a, a, name="sum_big")
    return b, x, c


def test_a_run_of_fed_fetches_only_leaves_the_run_metadata_alone():
    """TensorFlow 2.21's client runs no step when every fetch is fed (Session._run: no fetches, no
    targets left), so the RunMetadata it was given keeps what it held; ours was cleared and given an empty
    device."""
    b, x, y = mlp_graph()
    traced = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE, output_partition_graphs=True)
    md = config_pb2.RunMetadata()
    with Session(b.graph_def, PLAIN) as s:
        s.run(y, {x: X}, options=traced, run_metadata=md)
        before = md.SerializeToString()
        fed = np.ones((2, 2), np.float32)
        np.testing.assert_array_equal(s.run(y, {y: fed}, options=traced, run_metadata=md), fed)
        assert md.SerializeToString() == before
        s.run([y, "mm:0"], {y: fed, x: X}, options=traced, run_metadata=md)  # mm runs: a step, as in TF
        assert {ns.node_name for d in md.step_stats.dev_stats for ns in d.node_stats} == {"mm"}


def test_reporting_allocations_upon_oom_fills_step_stats():
    """TensorFlow 2.21's DirectSession collects a step's stats when it is to report its allocations upon
    OOM, and a successful run's RunMetadata gets them, at NO_TRACE too (no cost graph: that comes with
    build_cost_model in TensorFlow, with a trace_level here)."""
    b, x, y = mlp_graph()
    options = config_pb2.RunOptions(report_tensor_allocations_upon_oom=True)
    md = config_pb2.RunMetadata()
    with Session(b.graph_def, PLAIN) as s:
        np.testing.assert_allclose(s.run(y, {x: X}, options=options, run_metadata=md), expected_y(X))
    (dev,) = md.step_stats.dev_stats
    outputs = {ns.node_name: ns.output[0].tensor_description for ns in dev.node_stats}
    assert set(outputs) == {"mm", "y"}
    rows = np.asarray(X).shape[0]
    for desc in outputs.values():
        assert [d.size for d in desc.shape.dim] == [rows, 2]
        assert desc.allocation_description.requested_bytes == rows * 2 * 4
    assert not md.cost_graph.node


def test_oom_report_and_hint():
    b, x, c = big_graph()
    with Session(b.graph_def, memory_limit_bytes=200_000) as s:
        feeds = {x: np.ones(100, np.float32)}  # 400 kB per output
        with pytest.raises(ResourceExhaustedError, match="OOM") as e:
            s.run(c, feeds)
        assert "Hint: If you want to see a list of allocated tensors" in e.value.message
        opts = config_pb2.RunOptions(report_tensor_allocations_upon_oom=True)
        with pytest.raises(ResourceExhaustedError, match="OOM") as e:
            s.run(c, feeds, options=opts)
        assert (
            "Current usage from device: /job:localhost/replica:0/task:0/device:CPU:0, allocator: cpu"
            in e.value.message
        )
        assert "Hint" not in e.value.message
        # under the limit it runs
        assert s.run(c, {x: np.ones(10, np.float32)}).shape == (10000,)


def test_debug_identity_watch_writes_npy(tmp_path):
    b, x, y = mlp_graph()
    opts = config_pb2.RunOptions()
    opts.debug_options.debug_tensor_watch_opts.add(
        node_name="mm", output_slot=0, debug_ops=["DebugIdentity"], debug_urls=[f"file://{tmp_path}"]
    )
    with Session(b.graph_def) as s:
        out = s.run(y, {x: X}, options=opts)
        assert len(s._calls.plans) == 1
        s.run(y, {x: X})
        assert len(s._calls.plans) == 2  # watches are part of the signature
    (f,) = tmp_path.glob("mm_0_DebugIdentity_*.npy")
    np.testing.assert_allclose(np.load(f), out - 1)


def test_run_handler_pool_options_are_accepted():
    b, x, y = mlp_graph()
    opts = config_pb2.RunOptions()
    opts.experimental.use_run_handler_pool = True
    opts.experimental.run_handler_pool_options.priority = 5
    with Session(b.graph_def) as s:
        np.testing.assert_allclose(s.run(y, {x: X}, options=opts), expected_y(X))


# --- lifetime, partial runs, extend -----------------------------------------------------------------------


def test_close_cancels_steps_in_flight():
    b, x, t = chain_graph(50, 0.01)
    s = Session(b.graph_def)
    f = s.submit(t, {x: 1.0})
    time.sleep(0.05)
    t0 = time.monotonic()
    s.close()
    assert time.monotonic() - t0 < 0.2
    with pytest.raises(CancelledError, match="Run call was cancelled"):
        f.result(1)
    with pytest.raises(RuntimeError, match="Attempted to use a closed Session."):
        s.run(t, {x: 1.0})


def test_future_cancel_cancels_the_step():
    b, x, t = chain_graph(50, 0.01)
    with Session(b.graph_def) as s:
        f = s.submit(t, {x: 1.0})
        time.sleep(0.03)
        assert f.cancel()
        with pytest.raises(CancelledError):
            f.result(1)
        assert sum(RUNS.get(f"step{i}", 0) for i in range(50)) < 20


def test_partial_run():
    b = GraphBuilder()
    a = b.placeholder("a", np.float32, ())
    c = b.placeholder("c", np.float32, ())
    r1 = sleep_op(b, b.add(a, a, name="r1_in"), 0, "r1")
    r2 = b.mul(r1, c, name="r2")
    with Session(b.graph_def) as s:
        h = s.partial_run_setup([r1, r2], [a, c])
        assert s.partial_run(h, r1, {a: 1.0}) == 2.0
        assert s.partial_run(h, r2, {c: 10.0}) == 20.0
        assert RUNS["r1"] == 1  # r1 did not run again
        h2 = s.partial_run_setup([r1, r2], [a, c])
        with pytest.raises(InvalidArgumentError, match="not declared"):
            s.partial_run(h2, "r1_in:0", {a: 1.0})
        with pytest.raises(InvalidArgumentError, match="need feed"):
            s.partial_run(h2, r2, {a: 1.0})
        with pytest.raises(InvalidArgumentError, match="not valid"):
            s.partial_run("bogus", r2)


def test_extend_adds_nodes():
    b, x, y = mlp_graph()
    with Session(b.graph_def) as s:
        np.testing.assert_allclose(s.run(y, {x: X}), expected_y(X))
        more = GraphBuilder()
        more.op("Neg", ["y"], {"T": np.float32}, name="neg")
        s.extend(more.graph_def)
        np.testing.assert_allclose(s.run("neg:0", {x: X}), -expected_y(X))
        with pytest.raises(InvalidArgumentError, match="Duplicate node name"):
            s.extend(more.graph_def)


def test_two_inter_op_threads_run_branches_in_parallel():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    l = sleep_op(b, x, 0.15, "left")
    r = sleep_op(b, x, 0.15, "right")
    y = b.add(l, r)

    def timed(threads):
        cfg = config_pb2.ConfigProto(inter_op_parallelism_threads=threads, use_per_session_threads=True)
        with Session(b.graph_def, cfg) as s:
            t0 = time.monotonic()
            f = s.submit(y, {x: 1.0})
            assert f.result(5) == 2.0
            return time.monotonic() - t0

    assert timed(2) < 0.27 < timed(1) + 0.02


def test_resolved_signatures_are_cached_but_feeds_still_checked():
    b, x, y = mlp_graph()
    with Session(b.graph_def) as s:
        for v in (X, X * 2, X[:1]):
            np.testing.assert_allclose(s.run([y], {x: v})[0], expected_y(v))
        assert len(s._calls.signatures) == 1  # one flat signature, resolved once
        with pytest.raises(InvalidArgumentError, match=r"shape \(2, 4\) for Tensor 'x:0'"):
            s.run([y], {x: np.zeros((2, 4), np.float32)})  # the cached path still checks the feed
        np.testing.assert_allclose(s.run((y, y), {"x": X})[1], expected_y(X))  # other keys: other entries
        assert len(s._calls.signatures) == 2


def test_arun_awaits_the_step_and_cancelling_cancels_it():
    import asyncio

    from poolserve.runtime.session import StepRecord

    b, x, t = chain_graph(50, 0.01)
    with Session(b.graph_def) as s:

        async def main():
            record = StepRecord()
            assert await s.arun(t, {x: 3.0}, record=record) == 3.0
            assert record.started_at > 0 and not record.used_pool
            assert s.steps_running == 0
            with pytest.raises(InvalidArgumentError):  # refused before it starts
                await s.arun(t, {x: np.zeros(3)})
            assert s.steps_running == 0
            task = asyncio.ensure_future(s.arun(t, {x: 1.0}))
            await asyncio.sleep(0.05)
            assert s.steps_running == 1
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        deadline = time.monotonic() + 2
        while s.steps_running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.steps_running == 0  # the cancelled step really stopped
    assert sum(RUNS.get(f"step{i}", 0) for i in range(50)) < 50 + 15  # the cancelled run stopped early


def test_arun_records_the_pool_and_its_handler():
    import asyncio

    from poolserve.runtime.run_handler import RunHandlerPool
    from poolserve.runtime.session import StepRecord

    b, x, t = chain_graph(3, 0.0)
    pool = RunHandlerPool(num_threads=1)
    options = config_pb2.RunOptions()
    options.experimental.use_run_handler_pool = True
    with Session(b.graph_def, run_handler_pool=pool) as s:
        record = StepRecord()
        assert asyncio.run(s.arun(t, {x: 2.0}, options, record=record)) == 2.0
        assert record.used_pool and record.handler_id is not None
        assert pool.stats().handlers_acquired == 1
        # TensorFlow's rule: the caller's thread (-1) never goes through the pool, even when asked
        options.inter_op_thread_pool = -1
        record = StepRecord()
        assert asyncio.run(s.arun(t, {x: 2.0}, options, record=record)) == 2.0
        assert not record.used_pool and pool.stats().handlers_acquired == 1


def test_arun_answers_at_the_deadline_while_one_long_kernel_runs():
    import asyncio

    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    y = sleep_op(b, x, 0.6, "one_long_kernel")
    with Session(b.graph_def) as s:

        async def main():
            t0 = time.monotonic()
            with pytest.raises(DeadlineExceededError, match="deadline of 50 ms"):
                await s.arun(y, {x: 1.0}, config_pb2.RunOptions(timeout_in_ms=50))
            return time.monotonic() - t0

        # the kernel cannot notice the deadline; arun's backstop answers 50 ms after it
        assert asyncio.run(main()) < 0.4


def test_cost_estimates_are_learned_from_measured_times():
    b, x, y = mlp_graph()
    with Session(b.graph_def, PLAIN) as s:
        for _ in range(8):  # a later step's time weighs a tenth: one slow first call (263 us) is not all
            s.run(y, {x: X})
        (plan,) = set(s._calls.plans.values())
        mm = next(pn for pn in plan.nodes if pn.name == "mm")
        assert mm.measure and mm.learned
        assert mm.cost_us < 250 and not mm.expensive  # a tiny MatMul turns out cheap: it runs inline
        first = mm.cost_us
        mm.learn(first + 1000.0)
        assert mm.cost_us == pytest.approx(first + 100.0)  # (9 * previous + measured) / 10


def test_default_session_stack() -> None:
    from poolserve import InteractiveSession, get_default_session

    assert get_default_session() is None
    outer, inner = Session(), Session()
    with outer:
        assert get_default_session() is outer
        with inner.as_default():
            assert get_default_session() is inner
        assert get_default_session() is outer
        assert not inner.closed  # as_default does not close
    assert outer.closed and get_default_session() is None
    interactive = InteractiveSession()
    try:
        assert get_default_session() is interactive
    finally:
        interactive.close()
    assert get_default_session() is None
    inner.close()


# --- targets, factories, make_callable, list_devices ------------------------------------------------------


def test_make_callable_runs_the_fetches_with_its_feeds_in_order():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None])
    z = b.placeholder("z", np.float32, [None])
    y = b.op("Sub", [x, z], {"T": np.float32}, name="y")
    with Session(b.graph_def) as s:
        call = s.make_callable([y, y], [z, x])
        assert [v.tolist() for v in call([1.0], [5.0])] == [[4.0], [4.0]]
        with pytest.raises(InvalidArgumentError, match="takes 2 value"):
            call([1.0])
        with pytest.raises(InvalidArgumentError, match="Cannot feed value of shape"):
            call(np.ones((2, 2), np.float32), [1.0])
        traced = s.make_callable(y, [x, z], accept_options=True)
        metadata = config_pb2.RunMetadata()
        options = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE)
        assert traced([3.0], [1.0], options=options, run_metadata=metadata).tolist() == [2.0]
        assert any(n.node_name == "y" for d in metadata.step_stats.dev_stats for n in d.node_stats)
        with pytest.raises(InvalidArgumentError, match="fed twice"):
            s.make_callable(y, [x, x])


def test_list_devices_names_this_machines_cpu():
    with Session() as s:
        (device,) = s.list_devices()
    assert device.name == "/job:localhost/replica:0/task:0/device:CPU:0" and device.device_type == "CPU"


def _variables_graph() -> Any:
    from poolserve.runtime.builder import shape

    b = GraphBuilder()
    for name, container in (("va", "a"), ("vb", "")):
        attrs = {"shape": shape([]), "dtype": np.float32, "container": container, "shared_name": ""}
        v = b.op("VariableV2", [], attrs, name=name)
        b.op("Assign", [v, b.constant(1.0)], {"T": np.float32}, name=f"init_{name}")
    return b.graph_def


def test_clear_containers_drops_only_the_named_containers_state():
    with Session(_variables_graph()) as s:
        s.run(["init_va", "init_vb"])
        s.clear_containers(["a"])
        assert s.run("vb:0") == 1.0
        with pytest.raises(FailedPreconditionError, match="va"):
            s.run("va:0")
        s.clear_containers(["localhost"])  # TensorFlow's name for the default container
        with pytest.raises(FailedPreconditionError, match="vb"):
            s.run("vb:0")


def test_reset_clears_and_closes_the_in_process_sessions():
    first, second = Session(_variables_graph()), Session(_variables_graph())
    first.run(["init_va", "init_vb"])
    Session.reset("", ["a"])
    assert first.closed and second.closed
    with pytest.raises(RuntimeError, match="closed"):
        first.run("vb:0")
    with Session(_variables_graph()) as fresh, pytest.raises(FailedPreconditionError):
        fresh.run("vb:0")
    with pytest.raises(NotFoundError, match="known targets"):
        Session.reset("nope://x")


def relu_chain(n: int) -> tuple[GraphBuilder, str, str, np.ndarray, np.ndarray]:
    """x [None, 4] -> n times (add a constant, Relu): cheap nodes only. The graph, x, the chain's end, a
    feed and what the chain gives for it."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 4])
    y = x
    feed = np.arange(8, dtype=np.float32).reshape(2, 4)
    want = feed.copy()
    for i in range(n):
        y = b.op("Relu", [b.add(y, b.constant(np.float32(i - n // 2)))], {"T": np.float32}, name=f"r{i}")
        want = np.maximum(want + np.float32(i - n // 2), 0)
    return b, x, y, feed, want


def test_a_step_on_the_callers_slot_runs_as_a_straight_loop():
    # a step that runs from start to end on its caller's pool slot runs the plan's nodes in one order, with
    # no pending counts, lock or hand-offs (chain200.b1: 689 -> 514 us a Session.run, 791 -> 475 an arun)
    import asyncio

    b, x, y, feed, want = relu_chain(20)
    bad = b.op("Reshape", [x, b.constant(np.array([3], np.int32))], {"T": np.float32}, name="bad")
    pooled = config_pb2.RunOptions()
    pooled.experimental.use_run_handler_pool = True
    with Session(b.graph_def) as s:
        meta = config_pb2.RunMetadata()
        meta.partition_graphs.add()  # an untraced run leaves it empty, as TensorFlow's
        for _ in range(3):  # the first steps learn the plan's cost; then it takes the caller's slot
            np.testing.assert_array_equal(s.run(y, {x: feed}, options=pooled, run_metadata=meta), want)
        np.testing.assert_array_equal(asyncio.run(s.arun(y, {x: feed}, options=pooled, alone=True)), want)
        plans = [p for p in s._calls.plans.values() if p.serial is not None]
        assert len(plans) == 1 and len(plans[0].serial.code) == plans[0].num_nodes
        assert not meta.partition_graphs and not meta.HasField("step_stats")
        assert s.steps_running == 0
        for _ in range(3):
            with pytest.raises(InvalidArgumentError, match="bad"):  # the failing node is named
                s.run(bad, {x: feed}, options=pooled)


def test_a_step_wholly_on_the_callers_thread_runs_as_a_straight_loop_without_the_pool_too():
    # no node expensive, or inter_op_thread_pool = -1: the executor would run every node on the caller's
    # thread (chain200.b1 650 -> 491 us a run, wide_and_deep 308 -> 236); deadlines still stop it between
    # nodes, and a failing node is named
    b, x, y, feed, want = relu_chain(10)
    slow = b.op("Relu", [sleep_op(b, y, 0.2, "straight_sleep")], {"T": np.float32}, name="after_sleep")
    after = b.op("Relu", [slow], {"T": np.float32}, name="after")
    caller = config_pb2.RunOptions(inter_op_thread_pool=-1)
    with Session(b.graph_def) as s:
        np.testing.assert_array_equal(s.run(y, {x: feed}), want)
        np.testing.assert_array_equal(s.run(y, {x: feed}, options=caller), want)
        assert [p.serial is not None for p in s._calls.plans.values()] == [True]
        late = config_pb2.RunOptions(inter_op_thread_pool=-1, timeout_in_ms=50)
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            s.run(after, {x: feed}, options=late)
        assert time.monotonic() - t0 < 5.0
        assert RUNS.get("straight_sleep") == 1  # it ran once, and the step ended at its deadline
        assert s.steps_running == 0
