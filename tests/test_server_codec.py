"""server.codec, the one tensor codec of the three protocols: its rules, and that the same mistake gets
the same status and message, naming the input, through native, KServe v2 and TF Serving."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from fastapi import FastAPI

from poolserve.proto import tensor_pb2, types_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.signature import TensorSpec
from poolserve.server import admission, codec, native, tfserving
from poolserve.server.app import create_app
from poolserve.server.config import make_config

# --- decoding JSON values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "dtype", "expected"),
    [
        ([1.0, -2.0], np.int32, np.array([1, -2], np.int32)),  # integral floats are integers
        ([[1, 2.5]], np.float32, np.array([[1, 2.5]], np.float32)),
        ([0, 2**64 - 1, 3], np.uint64, np.array([0, 2**64 - 1, 3], np.uint64)),
        ([-(2**63), 2**63 - 1], np.int64, np.array([-(2**63), 2**63 - 1], np.int64)),
        ([[1, 2], [3, 4]], np.complex64, np.array([1 + 2j, 3 + 4j], np.complex64)),
        ([[], []], np.int8, np.zeros((2, 0), np.int8)),
        (True, np.bool_, np.array(True)),
    ],
)
def test_from_json_casts_to_the_dtype(data: Any, dtype: Any, expected: Any) -> None:
    arr = codec.from_json("input 'x'", data, np.dtype(dtype))
    assert arr.dtype == expected.dtype
    np.testing.assert_array_equal(arr, expected)


@pytest.mark.parametrize(
    ("data", "dtype"),
    [
        ([1.5, 2], np.float32),
        ([1, 2], np.int64),
        ([True, False], np.bool_),
        (["a", {"b64": base64.b64encode(b"\xff").decode()}], object),
    ],
)
def test_an_untyped_input_is_read_the_same_by_every_adapter(data: Any, dtype: Any) -> None:
    """No dtype in the signature: JSON's own types, floats as float32 (native read float64 before)."""
    untyped = TensorSpec("x", "x:0", types_pb2.DT_INVALID, None)
    arrays = [
        codec.from_json("input 'x'", data, None),
        native.decode_tensor("input 'x'", data, untyped),
        tfserving.to_array(data, types_pb2.DT_INVALID, "input 'x'"),
    ]
    for arr in arrays:
        assert arr.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(arr, arrays[0])


@pytest.mark.parametrize(
    ("data", "dtype", "message"),
    [
        ([1.5], np.int32, "expected integers for dtype int32, got a fractional or non-finite number"),
        ([float("inf")], np.int64, "got a fractional or non-finite number"),
        ([128], np.int8, r"value 128 is out of range for dtype int8 \[-128, 127\]"),
        ([-1, 2**63], np.int64, "value 9223372036854775808 is out of range for dtype int64"),
        ([1, 0], np.bool_, "expected true/false for dtype bool, got numbers"),
        (["1"], np.float32, "expected numbers for dtype float32, got text"),
        ([[1], [2, 3]], np.float32, "ragged nested lists"),
        ([["a"], ["b", "c"]], object, "ragged nested lists"),
        ([{"b64": "!!"}], object, "invalid base64"),
        (["a", "\ud800"], object, r"text holds a lone surrogate \('\\ud800'\), which is not Unicode"),
        ([{"b64": "AA=="}], np.float32, "base64 is for string inputs"),
        ([1, None], np.int32, "got a mix of types"),
        ([1, 2, 3], np.complex64, r"complex values are \[real, imag\] pairs"),
    ],
)
def test_from_json_refuses_naming_the_input(data: Any, dtype: Any, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"^input 'x': .*{message}"):
        codec.from_json("input 'x'", data, np.dtype(dtype))


def test_from_json_with_a_shape() -> None:
    arr = codec.from_json("input 'x'", [1, 2, 3, 4, 5, 6], np.dtype(np.float32), (2, 3))
    assert arr.shape == (2, 3)
    with pytest.raises(InvalidArgumentError, match=r"shape \[4\] needs 4 values but the data holds 6"):
        codec.from_json("input 'x'", [[1, 2, 3], [4, 5, 6]], np.dtype(np.float32), (4,))


# --- shapes no array can have ---------------------------------------------------------------------------

TOO_MANY_DIMS = (1,) * (codec.MAX_RANK + 1)


def tensor_proto(dims: tuple[int, ...], dtype: int = types_pb2.DT_FLOAT) -> tensor_pb2.TensorProto:
    proto = tensor_pb2.TensorProto(dtype=dtype)  # type: ignore[arg-type]
    for size in dims:
        proto.tensor_shape.dim.add(size=size)
    return proto


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((2**62,), r"shape \[4611686018427387904\] is impossible: no array of float32 has that many"),
        ((2**62, 2**62), r"shape \[4611686018427387904, 4611686018427387904\] is impossible"),
        # a 0 makes no elements, but numpy still refuses dimensions whose product overflows
        ((2**32, 2**32, 0), r"shape \[4294967296, 4294967296, 0\] is impossible"),
        (TOO_MANY_DIMS, rf"shape \[1, 1, 1, 1, \.\.\.\] has {len(TOO_MANY_DIMS)} dimensions; an array has"),
    ],
)
def test_a_shape_no_array_can_have_is_refused_naming_the_input_on_every_path(
    shape: tuple[int, ...], message: str
) -> None:
    """numpy's ValueError for such a shape was a 500: every place a client's shape meets numpy refuses it
    first (JSON data, binary data, typed values, TensorProtos), whatever the data."""
    f32 = np.dtype(np.float32)
    decodes = [
        lambda: codec.from_json("input 'x'", [], f32, shape),
        lambda: codec.from_json("input 'x'", [1.0], f32, shape),
        lambda: codec.from_binary("input 'x'", memoryview(b""), f32, shape),
        lambda: codec.from_values("input 'x'", [], f32, shape),
        lambda: codec.check_tensor_protos([("input 'x'", tensor_proto(shape))], 1 << 20),
    ]
    for decode in decodes:
        with pytest.raises(InvalidArgumentError, match=f"^input 'x': {message}"):
            decode()
    with pytest.raises(
        InvalidArgumentError, match=r"^input 'x': shape \[.*(impossible: no array of string|dimen)"
    ):
        codec.from_binary("input 'x'", memoryview(b""), codec.STRING, shape)


def test_the_largest_shapes_numpy_takes_still_decode() -> None:
    empty = (2**28, 2**28, 0)  # no elements, and the dimensions' product fits in any dtype
    assert codec.from_json("input 'x'", [], np.dtype(np.float32), empty).shape == empty
    assert codec.from_binary("input 'x'", memoryview(b""), codec.STRING, empty).shape == empty
    deepest = (1,) * codec.MAX_RANK
    assert codec.from_values("input 'x'", [1.0], np.dtype(np.float32), deepest).shape == deepest
    codec.check_tensor_protos([("input 'x'", tensor_proto(deepest)), ("input 'y'", tensor_proto(empty))], 64)


def test_tensor_protos_filled_from_fewer_values_take_at_most_the_limit_in_all() -> None:
    """TensorFlow fills a tensor given fewer values than its shape holds (the last value repeated, or
    zeros): what that expands to in one request is bounded, the values a body carries are not."""
    limit = 1000  # bytes
    floats = tensor_proto((100, 10))  # 4000 bytes of float32 once filled

    def check(*protos: tensor_pb2.TensorProto) -> None:
        codec.check_tensor_protos([(f"input '{i}'", p) for i, p in enumerate(protos)], limit)

    past = (
        "^input '{}': shape \\[100, 10\\] filled from {} of its 1000 values would take 4000 bytes of float32, "
        "past max_request_bytes \\(1000\\), what a request's tensors filled from fewer values than their "
        "shape holds may take in all; send every value"
    )
    with pytest.raises(InvalidArgumentError, match=past.format(0, 0)):
        check(floats)  # zeros
    padded = tensor_proto((100, 10))
    padded.float_val.extend([1.5, 2.5])  # the last value repeated
    with pytest.raises(InvalidArgumentError, match=past.format(1, 2)):
        check(tensor_proto((0,)), padded)
    # every value given, in its field or in tensor_content: they are the body's bytes
    full = tensor_proto((100, 10))
    full.float_val.extend([0.0] * 1000)
    content = tensor_proto((100, 10))
    content.tensor_content = bytes(4000)
    misplaced = tensor_proto((100, 10))
    misplaced.int_val.extend([0] * 1000)  # to_ndarray reads float_val: zeros, as many as the body carries
    check(full, content, misplaced)
    # within the limit a tensor is filled as TensorFlow fills it, in all: 2 x 400 bytes, then 3 x 400
    small = tensor_proto((10, 10))
    check(small, small, content)
    with pytest.raises(InvalidArgumentError, match=r"^input '2': shape \[10, 10\] filled from 0 of its 100"):
        check(small, small, small)


def test_lists_nested_deeper_than_an_array_can_be_are_refused_as_such() -> None:
    """numbers were "ragged nested lists"; text a ValueError (a 500), or a RecursionError deeper down."""
    numbers: Any = 1.0
    text: Any = "a"
    for _ in range(codec.MAX_RANK):
        numbers, text = [numbers], [text]
    assert codec.from_json("input 'x'", numbers, np.dtype(np.float32)).ndim == codec.MAX_RANK
    assert codec.from_json("input 'x'", text, None).ndim == codec.MAX_RANK
    too_deep = f"^input 'x': nested lists more than {codec.MAX_RANK} deep; an array has at most"
    for data, dtype in (
        ([numbers], np.dtype(np.float32)),
        ([numbers], None),
        ([text], codec.STRING),
        ([text], None),
    ):
        with pytest.raises(InvalidArgumentError, match=too_deep):
            codec.from_json("input 'x'", data, dtype)
    deeper = text
    for _ in range(900):
        deeper = [deeper]
    with pytest.raises(InvalidArgumentError, match=too_deep):
        codec.from_json("input 'x'", deeper, codec.STRING)


# --- JSON text ------------------------------------------------------------------------------------------


def test_loads_reads_nan_and_infinity_and_refuses_malformed_text() -> None:
    value = codec.loads(b'{"a": [NaN, Infinity, -Infinity, 1]}')
    assert np.isnan(value["a"][0]) and value["a"][1:] == [np.inf, -np.inf, 1]
    with pytest.raises(InvalidArgumentError, match="^malformed JSON: "):
        codec.loads(b"{oops")


@pytest.mark.parametrize(
    "arr",
    [
        np.linspace(0, 1, 7, dtype=np.float32),
        np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2],  # not contiguous
        np.arange(4, dtype=">i4"),  # big-endian
        np.array([0.5, 1.25], np.float16),
        np.array(3.5, np.float32),  # 0-d
        np.array([[True, False]]),
        np.array([2**64 - 1], np.uint64),
    ],
)
def test_numbers_are_written_without_tolist_and_read_back_exactly(arr: np.ndarray) -> None:
    value = codec.to_json("output 'y'", arr)
    assert not isinstance(value, list)  # the array (or numpy scalar) itself goes to orjson
    back = np.asarray(json.loads(codec.dumps({"y": value}))["y"], dtype=arr.dtype)
    np.testing.assert_array_equal(back, arr)


def test_nan_and_infinity_are_written_as_python_and_tf_serving_read_them() -> None:
    text = codec.dumps({"y": codec.to_json("output 'y'", np.array([np.nan, np.inf, 1], np.float32))})
    assert text == b'{"y":[NaN,Infinity,1.0]}'


def test_complex_and_strings() -> None:
    pairs = codec.to_json("output 'c'", np.array([1 + 2j], np.complex64))
    assert orjson.loads(codec.dumps(pairs)) == [[1.0, 2.0]]
    strings = np.array([[b"ok", b"\xff"]], dtype=object)
    assert codec.to_json("output 's'", strings) == [["ok", {"b64": "/w=="}]]
    assert codec.to_json("output 's'", strings, flat=True, strings="b64") == [
        {"b64": "b2s="},
        {"b64": "/w=="},
    ]
    with pytest.raises(InvalidArgumentError, match="^output 's' holds bytes that are not UTF-8"):
        codec.to_json("output 's'", strings, strings="text")
    with pytest.raises(UnimplementedError, match="output 'd' has dtype datetime64"):
        codec.to_json("output 'd'", np.array(["2020-01-01"], dtype="datetime64[D]"))


# --- binary tensors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.array([True, False, True]),
        np.arange(3, dtype=">i8"),
        np.array([b"a", b"", "\u00e9".encode()], dtype=object),
    ],
)
def test_binary_round_trip(arr: np.ndarray) -> None:
    raw = codec.to_binary("output 'y'", arr)
    dtype = np.dtype(object) if arr.dtype == object else arr.dtype.newbyteorder("=")
    back = codec.from_binary("input 'y'", memoryview(raw), dtype, arr.shape)
    assert back.tolist() == arr.tolist()


def test_from_binary_checks_the_size() -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"^input 'x': binary_data_size is 4 bytes but shape \[2\]"
    ):
        codec.from_binary("input 'x'", memoryview(b"\0" * 4), np.dtype(np.float32), (2,))


# --- versions and the event loop ------------------------------------------------------------------------


def test_parse_version() -> None:
    assert codec.parse_version(None) is None
    assert codec.parse_version("0") == 0 and codec.parse_version("12") == 12
    for bad in ("one", "-1", "1.0", "\u0661"):  # the last: an Arabic-Indic digit
        with pytest.raises(InvalidArgumentError, match=f"must be an integer, got '{bad}'"):
            codec.parse_version(bad)


def test_big_bodies_are_handled_off_the_event_loop() -> None:
    async def main() -> tuple[int, int, int]:
        small = await codec.sized(codec.OFFLOAD_BYTES - 1, threading.get_ident)
        big = await codec.sized(codec.OFFLOAD_BYTES, threading.get_ident)
        return threading.get_ident(), small, big

    loop_thread, small, big = asyncio.run(main())
    assert small == loop_thread and big != loop_thread


# --- loads_tensors: arrays of numbers read straight into numpy ------------------------------------------

BIG = 100  # values in the arrays below: over FAST_ARRAY_VALUES


@pytest.fixture
def any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """loads_tensors reads bodies of every size with simdjson (the bodies below are small)."""
    monkeypatch.setattr(codec, "SMALL_BODY", 0)


def test_loads_tensors_leaves_small_bodies_to_loads() -> None:
    text = {"x": [0.5 * i for i in range(BIG)]}
    small = json.dumps(text).encode()
    assert len(small) < codec.SMALL_BODY
    got = codec.loads_tensors(small)
    assert type(got["x"]) is list and got == json.loads(small)
    large = small + b" " * codec.SMALL_BODY  # the same document, past the size
    got = codec.loads_tensors(large)
    assert isinstance(got["x"], np.ndarray) and _same(got, json.loads(small))


def _same(got: Any, want: Any) -> bool:
    """``got`` (ndarrays allowed) holds the JSON values ``want``, each of the same Python kind."""
    if isinstance(got, np.ndarray):
        return np.shape(want) == got.shape and np.array_equal(got, np.asarray(want))
    if isinstance(got, dict):
        return (
            isinstance(want, dict) and got.keys() == want.keys() and all(_same(got[k], want[k]) for k in got)
        )
    if isinstance(got, list):
        return isinstance(want, list) and len(got) == len(want) and all(map(_same, got, want))
    return type(got) is type(want) and (got == want or (got != got and want != want))


def _arrays_made(got: Any) -> list[str]:
    """The paths (keys and indices joined by dots) of the ndarrays in a loads_tensors result, sorted."""
    made = []
    stack = [("", got)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, np.ndarray):
            made.append(path)
        elif isinstance(value, dict):
            stack += [(f"{path}.{k}".lstrip("."), v) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(f"{path}.{i}", v) for i, v in enumerate(value)]
    return sorted(made)


@pytest.mark.parametrize(
    ("text", "arrays"),
    [
        ({"x": [[0.5 * i for i in range(BIG)]] * 3, "shape": [3, BIG]}, ["x"]),  # the shape stays a list
        ({"x": list(range(-BIG, BIG))}, ["x"]),  # integers: int64
        ({"x": [[[1.5] * 4] * 5] * 6, "s": "a [bracket] in text", "k[": 1}, ["x"]),
        ({"x": [1.5] * BIG + [2**53 + 1]}, []),  # an integer float64 cannot hold, among floats: Python's
        ({"x": [2**64 - 1] * BIG}, []),  # beyond int64
        ({"x": [1.5] * BIG + [True]}, []),
        ({"x": [1.5] * BIG + [None]}, []),
        ({"x": [[1.5] * BIG, [1.5] * (BIG - 1), [1.5] * (BIG + 1)]}, []),  # ragged, the same count
        ({"x": [1.5] * BIG + [[], [2.5, 3.5]]}, []),  # lists among the numbers, the same count
        ({"x": [1.5] * BIG + [[2.5]]}, []),
        ({"x": [[1.5] * BIG, [[1.5]] * BIG]}, []),
        ({"x": [{"y": [0.25] * BIG}, {"y": [1] * BIG}]}, ["x.0.y", "x.1.y"]),
        ({"x": ["text"] * BIG, "y": [[]] * BIG}, []),
        ({"x": [1.5] * BIG, "y": [1.5] * BIG}, ["x", "y"]),
    ],
)
@pytest.mark.parametrize("on_text", [False, True], ids=["list_by_list", "on_text"])
@pytest.mark.usefixtures("any_size")
def test_loads_tensors_reads_the_values_loads_reads(
    text: Any, arrays: list[str], on_text: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if on_text:  # every array's shape checked on the body's text (see _skeletons_match)
        monkeypatch.setattr(codec, "CHECK_LISTS_ON_TEXT", -1)
    body = json.dumps(text).encode()
    got = codec.loads_tensors(body)
    assert _same(got, json.loads(body))
    made = _arrays_made(got)
    assert made == arrays
    for path in made:
        value: Any = got
        for key in path.split("."):
            value = value[int(key)] if isinstance(value, list) else value[key]
        assert value.dtype == (np.int64 if all(float(v).is_integer() for v in value.ravel()) else np.float64)


@pytest.mark.parametrize(
    "body",
    [
        b'{"x": [' + b"1.5," * BIG + b"NaN]}",  # simdjson refuses NaN: the plain reading takes it
        b'{"x": [' + b"1.5," * BIG + b'2], "s": "\\u005b"}',  # an escape: a bracket it spells is not counted
        b'{"x": [' + b"1.5," * BIG + b'2], "x": [3]}',  # a repeated key: the last one, as orjson reads it
        b'{"x": [' + b"1.5," * BIG + b"1e400]}",  # out of float64's range: inf, as Python reads it
        b'{"x": [' + b"1," * BIG + b"100000000000000000000]}",  # beyond 64 bits: Python's int
        b'{"y": 100000000000000000000, "x": [' + b"1.5," * BIG + b"2]}",
    ],
)
@pytest.mark.usefixtures("any_size")
def test_loads_tensors_leaves_what_simdjson_reads_otherwise_to_loads(body: bytes) -> None:
    assert _same(codec.loads_tensors(body), codec.loads(body))


ROWS = [[0.5]] * 70  # 70 lists of one number: past CHECK_LISTS_ON_TEXT with two of them


@pytest.mark.parametrize(
    ("text", "arrays"),
    [
        ({"x": [ROWS, ROWS]}, ["x"]),
        # brackets in keys, text and plain values before and after the arrays
        ({"k[": [1, [2]], "s": "a [b, ]", "x": [ROWS, ROWS], "t": "]", "y": [[1.0] * 70] * 80}, ["x", "y"]),
        ({"a": [{"x": [ROWS, ROWS]}, {"x": [ROWS, ROWS]}]}, ["a.0.x", "a.1.x"]),
        ({"x": [ROWS, [*ROWS[:69], [0.5, 0.5]]], "y": [ROWS, ROWS]}, ["y"]),  # ragged, the same count
        ({"x": [ROWS, [*ROWS[:69], []]], "y": [0.5]}, []),
        ({"x": [ROWS, [*ROWS[:69], 0.5]]}, []),  # a number among the lists
        ({"x": [ROWS, [*ROWS[:68], [], [0.5, 0.5]]]}, []),
        ({"x": [ROWS, ROWS[:69]]}, []),
        ({"x": [ROWS, [*ROWS, [0.5]]]}, []),
    ],
)
@pytest.mark.usefixtures("any_size")
def test_loads_tensors_checks_arrays_of_many_lists_on_the_text(text: Any, arrays: list[str]) -> None:
    body = json.dumps(text).encode()
    got = codec.loads_tensors(body)
    assert _same(got, json.loads(body))
    assert _arrays_made(got) == arrays


@pytest.mark.usefixtures("any_size")
def test_loads_tensors_refuses_malformed_text_as_loads_does() -> None:
    with pytest.raises(InvalidArgumentError, match="malformed JSON"):
        codec.loads_tensors(b'{"x": [' + b"1.5," * BIG + b"]")


def deep(depth: int, leaf: bytes = b"1") -> bytes:
    """JSON text: ``leaf`` in ``depth`` lists."""
    return b"[" * depth + leaf + b"]" * depth


def test_json_nested_too_deeply_is_refused_as_such() -> None:
    """orjson stops at 1024 levels and Python's json, its fallback, raised RecursionError past Python's
    recursion limit: it escaped loads (a 500)."""
    for depth in (1100, 100_000):
        for read in (codec.loads, codec.loads_tensors):
            with pytest.raises(InvalidArgumentError, match=r"^malformed JSON: nested too deeply$"):
                read(b'{"inputs": ' + deep(depth) + b"}")
    settings = b'{"enabled": ' + deep(codec.SETTINGS_DEPTH - 1) + b"}"
    assert codec.loads(settings, codec.SETTINGS_DEPTH)["enabled"]
    too_deep = rf"^malformed JSON: nested too deeply \(at most {codec.SETTINGS_DEPTH} levels\)$"
    for body in (
        b'{"enabled": ' + deep(codec.SETTINGS_DEPTH) + b"}",
        deep(1000),
        b"[" + deep(1000, b"[]") + b"]",
    ):
        with pytest.raises(InvalidArgumentError, match=too_deep):
            codec.loads(body, codec.SETTINGS_DEPTH)


@pytest.mark.usefixtures("any_size")
def test_loads_tensors_counts_the_lists_of_a_deep_value_without_recursion() -> None:
    """A value within simdjson's 1024 levels beside an array of numbers: its lists are counted with a
    stack (recursion went past Python's limit, a RecursionError)."""
    body = b'{"x": [' + b"1.5," * BIG + b'1.5], "deep": ' + deep(1000) + b"}"
    got = codec.loads_tensors(body)
    assert isinstance(got["x"], np.ndarray) and got["x"].shape == (BIG + 1,)
    depth, value = 0, got["deep"]
    while isinstance(value, list):
        depth, value = depth + 1, value[0]
    assert (depth, value) == (1000, 1)


# --- the same mistake through every protocol -------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    root: Path = tmp_path_factory.mktemp("codec_models")
    b = GraphBuilder()
    b.identity(b.placeholder("n", np.int32, (None,)), name="m")
    (root / "ints.pb").write_bytes(b.graph_def.SerializeToString())
    b = GraphBuilder()
    b.op("Identity", [b.placeholder("s", np.object_, (None,))], {"T": np.object_}, name="echo")
    (root / "strings.pb").write_bytes(b.graph_def.SerializeToString())
    return [
        {"name": "ints", "path": str(root / "ints.pb")},
        {"name": "strings", "path": str(root / "strings.pb")},
    ]


@pytest.fixture
async def client(models: list[dict[str, Any]]) -> AsyncIterator[httpx.AsyncClient]:
    app: FastAPI = create_app(make_config({"models": models}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        yield c
    app.state.service.close()


DATATYPES = {"n": "INT32", "s": "BYTES"}
MODELS = {"n": "ints", "s": "strings"}


async def three_ways(
    client: httpx.AsyncClient, name: str, data: Any, version: str | None = None
) -> list[httpx.Response]:
    """The same tensor sent through native :run, KServe infer and TF Serving :predict."""
    model = MODELS[name]
    v1 = f"/v1/models/{model}" + (f"/versions/{version}" if version else "")
    v2 = f"/v2/models/{model}" + (f"/versions/{version}" if version else "")
    try:
        shape = list(np.shape(data))
    except ValueError:  # ragged: the codec says so before it looks at the shape
        shape = [len(data)]
    kserve = {"name": name, "datatype": DATATYPES[name], "shape": shape, "data": data}
    return [
        await client.post(f"{v1}:run", json={"feeds": {name: data}}),
        await client.post(f"{v2}/infer", json={"inputs": [kserve]}),
        await client.post(f"{v1}:predict", json={"inputs": {name: data}}),
    ]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "data", "fragment"),
    [
        ("n", [1.5, 2], "expected integers for dtype int32, got a fractional or non-finite number"),
        ("n", [2**40, 1], "value 1099511627776 is out of range for dtype int32"),
        ("n", ["1", "2"], "expected integers for dtype int32, got text"),
        ("n", [[1], [2, 3]], "ragged nested lists"),
        ("n", [True, False], "expected integers for dtype int32, got true/false"),
        ("s", [{"b64": "!!"}], "invalid base64"),
        # the same mistakes in arrays long enough for loads_tensors to read them into numpy
        ("n", [1.5] + [2] * BIG, "expected integers for dtype int32, got a fractional or non-finite number"),
        ("n", [2**40] + [1] * BIG, "value 1099511627776 is out of range for dtype int32"),
        ("n", [[1] * BIG, [2] * (BIG - 1), [3] * (BIG + 1)], "ragged nested lists"),
        ("n", [1] * BIG + [[2]], "ragged nested lists"),
        ("n", [1] * BIG + [None], "expected integers for dtype int32, got a mix of types"),
        ("s", [1.5] * BIG, 'expected text or {"b64": "..."} for dtype string, got a number'),
    ],
)
@pytest.mark.usefixtures("any_size")
async def test_the_same_mistake_gets_the_same_answer(
    client: httpx.AsyncClient, name: str, data: Any, fragment: str
) -> None:
    answers = await three_ways(client, name, data)
    assert [r.status_code for r in answers] == [400, 400, 400], [r.text for r in answers]
    messages = {r.json()["error"] for r in answers}
    assert len(messages) == 1, messages
    (message,) = messages
    assert message.startswith(f"input '{name}': ") and fragment in message


@pytest.mark.anyio
async def test_big_arrays_of_numbers_decode_in_every_protocol(client: httpx.AsyncClient) -> None:
    data = [float(i) for i in range(-BIG, BIG)]
    native_r, kserve_r, tfs_r = await three_ways(client, "n", data)
    assert native_r.json()["outputs"]["m"]["data"] == list(range(-BIG, BIG))
    assert kserve_r.json()["outputs"][0]["data"] == list(range(-BIG, BIG))
    assert tfs_r.json() == {"outputs": list(range(-BIG, BIG))}
    rows = await client.post("/v1/models/ints:predict", json={"instances": list(range(BIG))})
    assert rows.status_code == 200 and rows.json() == {"predictions": list(range(BIG))}


@pytest.mark.anyio
async def test_integral_floats_are_integers_everywhere(client: httpx.AsyncClient) -> None:
    native_r, kserve_r, tfs_r = await three_ways(client, "n", [1.0, -2.0])
    assert native_r.json()["outputs"]["m"] == {"dtype": "int32", "shape": [2], "data": [1, -2]}
    assert kserve_r.json()["outputs"][0]["data"] == [1, -2]
    assert tfs_r.json() == {"outputs": [1, -2]}


@pytest.mark.anyio
@pytest.mark.parametrize(("version", "status"), [("one", 400), ("1.0", 400), ("0", 404), ("7", 404)])
async def test_versions_follow_one_rule(client: httpx.AsyncClient, version: str, status: int) -> None:
    answers = await three_ways(client, "n", [1], version)
    assert [r.status_code for r in answers] == [status] * 3
    assert len({r.json()["error"] for r in answers}) == 1


@pytest.mark.anyio
@pytest.mark.parametrize(("others", "behind"), [(1, False), (0, False), (0, True)])
async def test_big_bodies_and_answers_leave_the_event_loop_unless_the_request_is_alone(
    models: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, others: int, behind: bool
) -> None:
    offloaded: list[str] = []
    to_thread = codec.in_codec_thread
    if behind:  # another request came to admission right after each one (refused at its headers, say)
        admit = admission.Admission.admit

        def admit_one_behind(self: admission.Admission, *args: Any) -> admission.Ticket:
            ticket = admit(self, *args)
            self.arrivals += 1
            return ticket

        monkeypatch.setattr(admission.Admission, "admit", admit_one_behind)

    async def counting(fn: Any, *args: Any) -> Any:
        offloaded.append(f"{type(fn.__self__).__name__}.{fn.__name__}")
        return await to_thread(fn, *args)

    monkeypatch.setattr(codec, "in_codec_thread", counting)
    n = list(range(120_000))  # ~800 KB of JSON, 480 KB of int32 out: under ALONE_BYTES
    app: FastAPI = create_app(make_config({"models": models}))
    service = app.state.service
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        service.in_flight += others  # as if that many other requests were in flight
        try:
            answers = await three_ways(client, "n", n)
        finally:
            service.in_flight -= others
    service.close()
    assert [r.status_code for r in answers] == [200, 200, 200]
    assert answers[2].json()["outputs"][-1] == n[-1]
    # with company, a big body must not hold the loop; alone, it has nobody to delay and skips the hand-off
    assert offloaded == [
        f"{adapter}.{step}"
        for adapter in ("NativeAdapter", "KServeAdapter", "TFServingAdapter")
        for step in ("decode", "encode")
        if others or behind
    ]


@pytest.mark.anyio
async def test_sized_offloads_a_lone_request_only_from_alone_bytes() -> None:
    loop_thread = threading.get_ident()
    assert await codec.sized(codec.ALONE_BYTES - 1, threading.get_ident, alone=True) == loop_thread
    assert await codec.sized(codec.ALONE_BYTES, threading.get_ident, alone=True) != loop_thread
    assert await codec.sized(codec.OFFLOAD_BYTES, threading.get_ident, alone=False) != loop_thread


def test_from_binary_is_a_view_of_aligned_bytes_and_an_aligned_copy_of_others() -> None:
    # a tensor's offset in a body is whatever the header before it makes it: numpy's loops read an
    # unaligned array slowly, so it is copied once (and only then)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    body = b"\0" * 8 + x.tobytes() + b"\0"
    base = np.frombuffer(body, np.uint8)
    aligned = codec.from_binary("input 'x'", memoryview(body)[8:-1], np.dtype(np.float32), (3, 4))
    assert aligned.flags.aligned and np.shares_memory(aligned, base)
    np.testing.assert_array_equal(aligned, x)
    shifted = b"\0" + x.tobytes()
    view = codec.from_binary("input 'x'", memoryview(shifted)[1:], np.dtype(np.float32), (3, 4))
    assert view.flags.aligned and not np.shares_memory(view, np.frombuffer(shifted, np.uint8))
    np.testing.assert_array_equal(view, x)
