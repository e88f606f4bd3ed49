"""The one tensor codec every protocol adapter uses: JSON and binary tensor data to numpy arrays and back.

An adapter (native, KServe v2, TF Serving) parses its envelope and hands each tensor here, so the same
mistake gets the same error, naming the input, in every protocol. The rules:

- A tensor decodes to the input's dtype from the model's signature (or the dtype the request names). JSON
  numbers become floats; integers accept integral floats (``1.0``) and refuse fractional or non-finite ones
  (TF Serving does); booleans are ``true``/``false`` only; complex values are ``[real, imag]`` pairs;
  strings are UTF-8 text or ``{"b64": "..."}``. An input whose dtype nobody tells keeps JSON's own types,
  with floats as float32 (TensorFlow's default float) and integers as int64.
- JSON goes through orjson, which writes numpy arrays without ``tolist()``. A request's arrays of numbers
  are read by simdjson straight into numpy (``loads_tensors``), with no Python number per value. NaN and
  Infinity are read and written as such (TF Serving's and Python's reading), through the standard library:
  orjson and simdjson have no form for them.
- A model version in a path is digits: anything else is a 400; a version the model does not have is a 404
  (the service's lookup).
- Bodies and answers from ``OFFLOAD_BYTES`` on are decoded and encoded off the event loop (``sized``), those
  of a request alone in the server from ``ALONE_BYTES`` on.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
import struct
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache, partial
from typing import Any, Literal, TypeVar

import numpy as np
import orjson
import simdjson

from poolserve.proto import tensor_pb2, types_pb2
from poolserve.runtime import dtypes, tensor
from poolserve.runtime.errors import InvalidArgumentError, OpError, UnimplementedError
from poolserve.runtime.types import Array

T = TypeVar("T")
Dtype = np.dtype[Any]

# JSON texts and answers from this size on are decoded/encoded off the event loop, in one thread shared by
# every request. Off the loop: a decode on it delays every socket read behind it, and under overload the
# decodes of the admitted requests made new arrivals wait 200-700 ms before admission saw them (a 100 KB
# body of [8, 28, 28, 1] nested lists costs ~19 ms in np.asarray; flat floats cost far less: orjson reads
# 65 KB in 0.19 ms and the codec makes it an array in 0.16 ms). One thread: decoding holds the GIL, so more
# threads add no throughput, only more threads the loop must win the GIL from.
OFFLOAD_BYTES = 32 * 1024
# A request alone in the server (no other one in flight) decodes and encodes on the loop below this size:
# there is nothing there for it to delay, and the hand-off to the codec thread and back cost it 0.4-0.5 ms
# (native :run, 65 KB JSON, the 784-input MLP, one client, quiet: the server's own p50 2.07-2.21 ms
# offloaded, 1.67-1.68 ms not). A request arriving meanwhile finds this one in flight and goes to the codec
# thread. From this size a lone body goes there too: a /health probe must not wait a long decode out.
ALONE_BYTES = 1024 * 1024
_CODEC_THREAD = ThreadPoolExecutor(1, thread_name_prefix="poolserve-codec")


def start_codec_thread() -> None:
    """Starts the codec thread now rather than at the first large body (a server lowers its priority with
    the other threads that compute: ``threadpool.lower_other_threads``)."""
    _CODEC_THREAD.submit(int).result()


STRING = np.dtype(object)
_U32 = struct.Struct("<I")
_DUMPS = orjson.OPT_SERIALIZE_NUMPY


# --- dtypes ---------------------------------------------------------------------------------------------


def _tf_names() -> dict[str, Dtype]:
    names: dict[str, Dtype] = {}
    for code in types_pb2.DataType.values():
        if code in (types_pb2.DT_INVALID, types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT) or code >= 100:
            continue
        try:
            names[dtypes.name(code)] = dtypes.as_numpy_dtype(code)
        except OpError:
            continue
    names.update(float=np.dtype(np.float32), double=np.dtype(np.float64), half=np.dtype(np.float16))
    return names


# TensorFlow's dtype names ("float32", "string", ...) plus the aliases tf.as_dtype takes
TF_DTYPES = _tf_names()

# KServe v2 datatypes (BYTES: object arrays of bytes, as the runtime holds DT_STRING; BF16, as Triton names
# it: ml_dtypes.bfloat16 arrays, the 16-bit patterns in binary data, numbers in JSON)
KSERVE_DATATYPES: dict[str, Dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "BF16": dtypes.BFLOAT16,
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": STRING,
}
# KServe v2 over gRPC: the InferTensorContents field of each datatype (FP16 and BF16 have none: raw
# contents only)
KSERVE_CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
_KSERVE_NAMES = {dt: name for name, dt in KSERVE_DATATYPES.items()}


def dtype_name(dtype: Dtype) -> str:
    """TensorFlow's name of a numpy dtype (``string`` for object arrays)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:  # str(dtype) costs ~3 us, and every answer names its outputs' dtypes
        name = _DTYPE_NAMES[dtype] = "string" if dtype.kind in "OSU" else str(dtype)
    return name


_DTYPE_NAMES: dict[Dtype, str] = {}


def spec_dtype(code: int) -> Dtype | None:
    """The numpy dtype of a signature's DataType; None when the graph does not tell (or numpy has none)."""
    if not code:
        return None
    try:
        return dtypes.as_numpy_dtype(code)
    except OpError:
        return None


def kserve_datatype(dtype: Dtype) -> str:
    """The KServe datatype of a numpy dtype (``bytes``/``str``/object arrays are BYTES)."""
    if dtype.kind in "SUO":
        return "BYTES"
    name = _KSERVE_NAMES.get(dtype.newbyteorder("=") if dtype.byteorder not in "=|" else dtype)
    if name is None:
        raise UnimplementedError(f"dtype {dtype} has no KServe v2 datatype")
    return name


def parse_version(raw: str | None) -> int | None:
    """A model version from a path: digits (400 otherwise); whether the model has it is the service's
    lookup (404)."""
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()):
        raise InvalidArgumentError(f"The model version must be an integer, got '{raw}'")
    return int(raw)


# --- JSON text ------------------------------------------------------------------------------------------


def loads(body: bytes | memoryview, max_depth: int | None = None) -> Any:
    """A JSON text; ``NaN``/``Infinity`` and the rest of Python's reading through the standard library.
    ``max_depth``: refused when nested deeper (``SETTINGS_DEPTH``, for a request of settings, whose
    values an error message may print: Python's repr recurses)."""
    value = _loads(body)
    if max_depth is not None and _deeper_than(value, max_depth):
        raise nested_too_deeply(max_depth)
    return value


def _loads(body: bytes | memoryview) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        first = e
    try:  # orjson refuses NaN and Infinity, which TF Serving and Python read
        return json.loads(bytes(body))
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgumentError(f"malformed JSON: {first}") from None
    except RecursionError:  # past orjson's 1024 levels, json recurses past Python's limit
        raise nested_too_deeply() from None


# a request of settings (the pool toggle, the repository calls) nests 2 or 3 levels
SETTINGS_DEPTH = 32


def nested_too_deeply(limit: int | None = None) -> InvalidArgumentError:
    """The error for JSON nested deeper than the server reads: past orjson's 1024 levels, past Python's
    recursion limit in code that walks or prints the values (``server.adapter`` answers a decode's
    RecursionError with it), or past a ``limit`` of ``loads``."""
    within = f" (at most {limit} levels)" if limit is not None else ""
    return InvalidArgumentError(f"malformed JSON: nested too deeply{within}")


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and objects nest in ``value`` deeper than ``limit``; level by level, no recursion."""
    level = [value] if isinstance(value, (list, dict)) else []
    for _ in range(limit):
        level = [
            item
            for v in level
            for item in (v.values() if isinstance(v, dict) else v)
            if isinstance(item, (list, dict))
        ]
        if not level:
            return False
    return bool(level)


def loads_tensors(body: bytes | memoryview) -> Any:
    """``loads`` for a request that carries tensors: the same values, except that a rectangular array of
    at least ``FAST_ARRAY_VALUES`` JSON numbers comes back as an ndarray of its shape (int64 when every
    value is an integer that fits, else float64), read by simdjson with no Python number per value.
    ``from_json`` takes such an array as it takes nested lists, with the same rules and errors. Anything
    else (text, booleans, objects, ragged or mixed nesting, integers float64 cannot hold among floats)
    comes back as Python values, and a text simdjson refuses (NaN, Infinity, a number out of range,
    malformed JSON), holds an escape, or repeats a key is read by ``loads``, with its errors. So is a
    body under ``SMALL_BODY`` bytes, whose arrays stay lists.

    Why: orjson makes a Python float of every value and np.asarray reads them all back; in the server
    that took ~0.4 ms of a 65 KB request of 3,136 floats (0.18 ms orjson, 0.21 ms the array), against
    ~0.18 ms for simdjson's parse and buffer.

    Rectangular: simdjson's buffer flattens any nesting, so the lists above the last level are checked
    one by one (each a list of its level's length), or, past ``CHECK_LISTS_ON_TEXT`` of them, on the
    body's text (its brackets and commas must be a full array's: ``_skeletons_match``); and the array's
    lists are counted: the body's ``[`` must number the lists of every value read plus those in its
    strings, so no list hides among the last level's numbers (escapes could spell a bracket in a string:
    such a body goes to ``loads``)."""
    raw = bytes(body)
    if len(raw) < SMALL_BODY or b"\\" in raw:
        return loads(raw)
    reader = _Reader()
    try:
        # a parser per call: thread-safe, and ~3 us (one kept per thread would keep its largest buffer)
        value = reader.native(simdjson.Parser().parse(raw))
    except Exception:
        # whatever simdjson refuses (an integer beyond 64 bits is a RuntimeError), or a document left to
        # loads (_Irregular): loads reads it, or names what is wrong with it
        return loads(raw)
    if reader.arrays:
        text = np.frombuffer(raw, np.uint8)
        opens = text == _OPEN
        plain_lists = [_brackets(v) for v in reader.plain]
        if reader.lists + sum(plain_lists) != np.count_nonzero(opens):
            return loads(raw)  # a list among an array's numbers: the codec reports it from the plain read
        if reader.unchecked and not _skeletons_match(raw, reader.unchecked, plain_lists):
            return loads(raw)  # a ragged array: the codec reports it from the plain read
    return value


def _skeletons_match(
    raw: bytes, unchecked: list[tuple[int, int, tuple[int, ...]]], plain_lists: list[int]
) -> bool:
    """Whether each array of ``unchecked`` (the lists counted before it outside plain values, the plain
    values before it, its shape) is rectangular in the body ``raw``: its brackets and commas, in order,
    are those of a full array of its shape (numbers hold none of them, and such an array holds nothing but
    numbers: ``_flat_numbers`` read them all). Its first ``[`` is the body's that follows all the lists
    read before it (in objects' keys and strings too), as the reader went through the body in order."""
    skeleton = raw.translate(None, _NOT_MARKS)  # ~1 ns a byte: a tenth of a numpy mask and gather
    starts = np.flatnonzero(np.frombuffer(skeleton, np.uint8) == _OPEN)
    for lists, plain, shape in unchecked:
        first = lists + sum(plain_lists[:plain])
        want = _skeleton(shape)
        if first >= starts.size:
            return False
        start = int(starts[first])
        if skeleton[start : start + len(want)] != want:
            return False
    return True


@lru_cache(maxsize=16)
def _skeleton(shape: tuple[int, ...]) -> bytes:
    """The brackets and commas of a JSON array of numbers of this shape, in order."""
    text = b"[" + b"," * (shape[-1] - 1) + b"]"
    for n in reversed(shape[:-1]):
        text = b"[" + b",".join([text] * n) + b"]"
    return text


# bodies shorter than this are read by ``loads`` in loads_tensors: simdjson's parse and the checks around it
# have a fixed cost of ~35 us, where orjson and numpy read a small body's lists sooner (in process, best of
# 7: 1.3 KB 43 against 8 us, 5.3 KB 49-60 against 25-28 us, 16 KB 88 against 76 us, 32 KB 129 against 165)
SMALL_BODY = 8192
# arrays of numbers from this many values on become ndarrays in loads_tensors (a shape or a short list of
# names stays a list)
FAST_ARRAY_VALUES = 64
_SJ_ARRAY = simdjson.Array
_SJ_OBJECT = simdjson.Object
_EXACT = float(2**53)  # integers beyond this are not all exact in float64
_OPEN = ord("[")
_NOT_MARKS = bytes(b for b in range(256) if b not in b"[],")  # all but an array's brackets and commas
# an array of more lists than this above its numbers is checked to be rectangular on the body's text
# (``_skeletons_match``) rather than list by list: [8, 28, 28, 1] took 1.2 ms list by list (70% of its
# decoding), 0.2 ms on the text
CHECK_LISTS_ON_TEXT = 64


class _Irregular(Exception):
    """A document ``loads_tensors`` leaves to ``loads`` (a repeated key: orjson keeps the last, simdjson
    finds the first)."""


class _Reader:
    """One ``loads_tensors`` document: its values, and the lists counted on the way (see there)."""

    __slots__ = ("arrays", "lists", "plain", "unchecked")

    def __init__(self) -> None:
        self.arrays = 0  # ndarrays made
        self.lists = 0  # lists accounted for, in ndarrays and objects' keys and values
        self.plain: list[Any] = []  # values converted whole (their lists are counted only if needed)
        # ndarrays still to be found rectangular on the body's text: self.lists and len(self.plain) before
        # each, and its shape (see _skeletons_match)
        self.unchecked: list[tuple[int, int, tuple[int, ...]]] = []

    def native(self, value: Any) -> Any:
        kind = type(value)
        if kind is _SJ_OBJECT:
            keys = list(value.keys())
            if len(set(keys)) != len(keys):
                raise _Irregular
            out = {}
            for k in keys:
                self.lists += k.count("[")
                out[k] = self.native(value[k])  # items() would convert the values itself
            return out
        if kind is _SJ_ARRAY:
            return self.array(value)
        if kind is str:
            self.lists += value.count("[")
        return value

    def array(self, arr: Any) -> Any:
        shape = []
        leaf = arr
        while type(leaf) is _SJ_ARRAY:
            n = len(leaf)
            shape.append(n)
            if n == 0:
                break
            leaf = leaf[0]
        kind = type(leaf)
        if kind is _SJ_OBJECT:
            self.lists += 1
            return [self.native(v) for v in arr]
        count = math.prod(shape)
        if (kind is float or kind is int) and count >= FAST_ARRAY_VALUES:
            values = _flat_numbers(arr, kind is int)
            on_text = math.prod(shape[:-1]) > CHECK_LISTS_ON_TEXT
            if values is not None and values.size == count and (on_text or _lengths(arr, shape, 0)):
                if on_text:
                    self.unchecked.append((self.lists, len(self.plain), tuple(shape)))
                self.arrays += 1
                self.lists += sum(math.prod(shape[:k]) for k in range(len(shape)))
                return values.reshape(shape)
        plain = arr.as_list()  # also a ragged or mixed array: the codec reports it as it always did
        self.plain.append(plain)
        return plain


def _flat_numbers(arr: Any, ints: bool) -> Array | None:
    """Every number in ``arr`` (nested arrays flattened), int64 if ``ints`` and all are; None when some
    value is not a number, or an integer may be beyond float64's exact range among floats."""
    try:
        if ints:
            try:
                return np.frombuffer(arr.as_buffer(of_type="i"), np.int64)
            except (TypeError, ValueError):  # floats too, or an integer beyond int64
                pass
        values = np.frombuffer(arr.as_buffer(of_type="d"), np.float64)
    except (TypeError, ValueError):  # text, true/false, null or an object somewhere
        return None
    if values.max() >= _EXACT or values.min() <= -_EXACT:
        return None  # Python's int keeps such an integer exact
    return values


def _lengths(arr: Any, shape: list[int], level: int) -> bool:
    """Whether every element of ``arr`` (at ``level`` of ``shape``) is a list of the next level's length,
    down to the lists of numbers."""
    if level + 1 == len(shape):
        return True
    want = shape[level + 1]
    deeper = level + 2 < len(shape)
    for sub in arr:
        if type(sub) is not _SJ_ARRAY or len(sub) != want:
            return False
        if deeper and not _lengths(sub, shape, level + 1):
            return False
    return True


def _brackets(value: Any) -> int:
    """The ``[`` a Python JSON value's text holds: its lists, and those in its strings and keys. With a
    stack, not recursion: simdjson reads 1024 levels, past Python's recursion limit."""
    count = 0
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            count += 1
            stack += v
        elif isinstance(v, str):
            count += v.count("[")
        elif isinstance(v, dict):
            count += sum(k.count("[") for k in v)
            stack += v.values()
    return count


def dumps(value: Any) -> bytes:
    """JSON bytes; numpy arrays and scalars as they are (see ``to_json``)."""
    return orjson.dumps(value, option=_DUMPS)


async def in_codec_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in the codec thread."""
    return await asyncio.get_running_loop().run_in_executor(_CODEC_THREAD, partial(fn, *args))


async def sized(size: int, fn: Callable[..., T], *args: Any, alone: bool = False) -> T:
    """``fn(*args)``, in the codec thread when ``size`` (bytes to decode or encode) is at least
    OFFLOAD_BYTES, or with ``alone`` (the request is alone in the server: ``InferenceService.alone``) at
    least ALONE_BYTES."""
    if size >= (ALONE_BYTES if alone else OFFLOAD_BYTES):
        return await in_codec_thread(fn, *args)
    return fn(*args)


# --- shapes ---------------------------------------------------------------------------------------------


def _max_rank() -> int:
    """numpy's most dimensions of an array: 64 from numpy 2, 32 before."""
    for rank in (64, 32):
        try:
            np.empty((1,) * rank, np.uint8)
        except ValueError:
            continue
        return rank
    return 32


MAX_RANK = _max_rank()
# numpy's bound on an array's size: its dimensions other than 0, times its itemsize, within a signed word
_MAX_NBYTES = int(np.iinfo(np.intp).max)


def shape_count(where: str, shape: tuple[int, ...], dtype: Dtype) -> int:
    """The number of elements of a client's ``shape`` (non-negative dimensions), or an InvalidArgumentError
    naming ``where`` and the shape when no array of ``dtype`` can have it: more than MAX_RANK dimensions,
    or its dimensions other than 0 multiply past numpy's bound (numpy's ValueError was a 500). Every shape
    a client gives comes here before numpy sees it: a product and a few comparisons."""
    if len(shape) > MAX_RANK:  # before the product: a million dimensions took math.prod a minute
        raise InvalidArgumentError(_too_many_dimensions(where, shape[:4], len(shape)))
    count = math.prod(shape)
    if (count or math.prod([d for d in shape if d])) * dtype.itemsize > _MAX_NBYTES:
        raise InvalidArgumentError(
            f"{where}: shape {list(shape)} is impossible: no array of {dtype_name(dtype)} has that many "
            f"elements (its dimensions other than 0 times {dtype.itemsize} bytes exceed {_MAX_NBYTES})"
        )
    return count


def _too_many_dimensions(where: str, first: Sequence[int], rank: int) -> str:
    shown = ", ".join(map(str, first))
    return f"{where}: shape [{shown}, ...] has {rank} dimensions; an array has at most {MAX_RANK}"


def _too_deep(where: str) -> str:
    return f"{where}: nested lists more than {MAX_RANK} deep; an array has at most {MAX_RANK} dimensions"


# --- JSON values -> arrays ------------------------------------------------------------------------------


def is_b64(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and "b64" in value


def b64_bytes(where: str, value: dict[str, str]) -> bytes:
    """The bytes of a ``{"b64": "..."}`` value (``is_b64``, its text a str)."""
    try:
        return base64.b64decode(value["b64"], validate=True)
    except binascii.Error as e:
        raise InvalidArgumentError(f"{where}: invalid base64 in a b64 value: {e}") from None


def from_json(where: str, data: Any, dtype: Dtype | None, shape: tuple[int, ...] | None = None) -> Array:
    """JSON data (nested lists or a scalar; flat or nested when ``shape`` is given) as an array of ``dtype``.

    ``dtype`` None: the input's dtype is unknown (see the module's rules). ``where`` names the tensor in
    every error (``input 'x'``). ``data`` may also be the ndarray ``loads_tensors`` read numbers into."""
    if dtype is None:
        dtype = _untyped(where, data)
    if dtype.kind == "O" and isinstance(data, np.ndarray):  # numbers for a string input: reported as such
        data = data.tolist()
    arr = _strings(where, data) if dtype.kind == "O" else _numbers(where, data, dtype)
    if shape is None:
        return arr
    count = shape_count(where, shape, arr.dtype)
    if arr.size != count:
        raise InvalidArgumentError(
            f"{where}: shape {list(shape)} needs {count} values but the data holds {arr.size}"
        )
    return arr.reshape(shape)


def _untyped(where: str, data: Any) -> Dtype:
    leaf = data
    while isinstance(leaf, list) and leaf:
        leaf = leaf[0]
    if isinstance(leaf, str) or is_b64(leaf):
        return STRING
    kind = _parse(where, data).dtype.kind
    if kind == "b":
        return np.dtype(np.bool_)
    if kind in "iu":
        return np.dtype(np.int64) if kind == "i" else np.dtype(np.uint64)
    if kind == "f":
        return np.dtype(np.float32)
    raise InvalidArgumentError(f"{where}: expected numbers, true/false or text, got {_found(data, kind)}")


def _parse(where: str, data: Any) -> Array:
    try:
        return np.asarray(data)
    except ValueError:
        depth, leaf = 0, data
        while isinstance(leaf, list) and leaf:
            depth, leaf = depth + 1, leaf[0]
        if depth > MAX_RANK:
            raise InvalidArgumentError(_too_deep(where)) from None
        raise InvalidArgumentError(f"{where}: {_RAGGED}") from None


def _numbers(where: str, data: Any, dtype: Dtype) -> Array:
    parsed = _parse(where, data)
    if parsed.size == 0:
        return np.zeros(parsed.shape, dtype)
    kind, want = parsed.dtype.kind, dtype.kind
    if want == "b":
        if kind != "b":
            raise InvalidArgumentError(
                f"{where}: expected true/false for dtype bool, got {_found(data, kind)}"
            )
        return parsed
    if kind not in "iuf":
        expected = "integers" if want in "iu" else "numbers"
        raise InvalidArgumentError(
            f"{where}: expected {expected} for dtype {dtype_name(dtype)}, got {_found(data, kind)}"
        )
    if want in "iu":
        return _integers(where, data, parsed, dtype)
    if want == "c":
        if parsed.shape[-1:] != (2,):
            raise InvalidArgumentError(f"{where}: complex values are [real, imag] pairs")
        return (parsed[..., 0] + 1j * parsed[..., 1]).astype(dtype)
    with np.errstate(over="ignore"):  # beyond float32/float16's range becomes inf, as a cast does
        return parsed.astype(dtype, copy=False)


def _integers(where: str, data: Any, parsed: Array, dtype: Dtype) -> Array:
    name = dtype_name(dtype)
    if parsed.dtype.kind == "f" and (not np.isfinite(parsed).all() or (np.floor(parsed) != parsed).any()):
        raise InvalidArgumentError(
            f"{where}: expected integers for dtype {name}, got a fractional or non-finite number"
        )
    if parsed.dtype == dtype:
        return parsed
    info = np.iinfo(dtype)
    if parsed.dtype.kind == "f" and np.abs(parsed).max() >= 2**53:
        # numpy made floats of integers beyond int64 mixed with others: read the JSON's own numbers
        exact = [int(v) for v in np.asarray(data, dtype=object).ravel().tolist()]
        parsed = np.empty(parsed.shape, object)
        parsed.ravel()[:] = exact
    low, high = int(parsed.min()), int(parsed.max())  # exact: the floats are integral
    if low < info.min or high > info.max:
        bad = low if low < info.min else high
        raise InvalidArgumentError(
            f"{where}: value {bad} is out of range for dtype {name} [{info.min}, {info.max}]"
        )
    return parsed.astype(dtype)


def _found(data: Any, kind: str) -> str:
    if kind in "US":
        return "text"
    if kind == "b":
        return "true/false"
    if kind in "iuf":
        return "numbers"
    if _contains_b64(data):
        return 'a {"b64": ...} value (base64 is for string inputs)'
    return "a mix of types (objects, nulls or text)"


def _contains_b64(value: Any) -> bool:
    if isinstance(value, list):
        return any(_contains_b64(v) for v in value)
    return is_b64(value)


def _strings(where: str, data: Any) -> Array:
    flat: list[bytes] = []
    try:
        shape = _walk_strings(where, data, flat, 0)
    except UnicodeEncodeError as e:  # JSON's "\ud800": a lone surrogate, which UTF-8 has no bytes for
        raise InvalidArgumentError(
            f"{where}: text holds a lone surrogate ({e.object[e.start : e.end]!r}), which is not Unicode; "
            'send such bytes as {"b64": "..."}'
        ) from None
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(shape)


def _walk_strings(where: str, value: Any, flat: list[bytes], depth: int) -> tuple[int, ...]:
    if not isinstance(value, list):
        flat.append(_string(where, value))
        return ()
    if depth == MAX_RANK:  # a list at this depth would be one dimension too many
        raise InvalidArgumentError(_too_deep(where))
    if not value or not isinstance(value[0], list):  # the last level: no call for each text
        flat += [v.encode("utf-8") if type(v) is str else _string(where, v) for v in value]
        return (len(value),)
    inner = depth + 1
    shapes = [_walk_strings(where, v, flat, inner) for v in value]
    if any(s != shapes[0] for s in shapes[1:]):
        raise InvalidArgumentError(f"{where}: {_RAGGED}")
    return (len(value), *shapes[0])


def _string(where: str, value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if is_b64(value) and isinstance(value["b64"], str):
        return b64_bytes(where, value)
    if isinstance(value, list):  # among the texts of a level
        raise InvalidArgumentError(f"{where}: {_RAGGED}")
    raise InvalidArgumentError(
        f'{where}: expected text or {{"b64": "..."}} for dtype string, got {json_kind(value)}'
    )


_RAGGED = "ragged nested lists (every list at one level must have the same length)"


# what a JSON value is, in errors; an ndarray is numbers that loads_tensors read as one array
_KINDS: dict[type, str] = {
    bool: "true/false",
    int: "a number",
    float: "a number",
    str: "text",
    list: "a list",
    np.ndarray: "a list",
}


def json_kind(value: Any) -> str:
    """What a decoded JSON value is, as errors name it ("a number", "a list", "an object", ...)."""
    if value is None:
        return "null"
    return _KINDS.get(type(value), "an object" if isinstance(value, dict) else type(value).__name__)


# --- arrays -> JSON values ------------------------------------------------------------------------------

Strings = Literal["text_or_b64", "b64", "text"]


def to_json(where: str, value: Any, flat: bool = False, strings: Strings = "text_or_b64") -> Any:
    """An array as a value ``dumps`` writes: numbers as the array itself (no ``tolist()``), complex as
    [real, imag] pairs, strings as text or ``{"b64"}`` (``strings``: "b64" always base64, "text" refuses
    bytes that are not UTF-8). ``flat``: row-major, one level."""
    arr = np.asarray(value)
    if flat:
        arr = arr.reshape(-1)
    kind = arr.dtype.kind
    if kind in "OSU":
        return _strings_json(where, arr, strings)
    if kind == "c":
        arr = np.stack([arr.real, arr.imag], axis=-1)
        kind = arr.dtype.kind
    if kind not in "biuf":
        if arr.dtype != dtypes.BFLOAT16:
            raise UnimplementedError(f"{where} has dtype {arr.dtype}, which has no JSON form")
        arr, kind = arr.astype(np.float32), "f"  # exact; written as the shortest float32 text
    if kind == "f" and not np.isfinite(arr).all():
        # orjson writes null for NaN: the standard library writes NaN and Infinity, which TF Serving,
        # Python and tritonclient read back
        return orjson.Fragment(json.dumps(arr.tolist(), separators=(",", ":")))
    if arr.ndim == 0:
        return arr[()]  # a numpy scalar (orjson refuses 0-d arrays)
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return np.ascontiguousarray(arr)


def _strings_json(where: str, arr: Array, strings: Strings) -> Any:
    items = [_string_json(where, v, strings) for v in arr.reshape(-1).tolist()]
    if arr.ndim <= 1:
        return items if arr.ndim else items[0]
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(arr.shape).tolist()


def _string_json(where: str, value: Any, strings: Strings) -> Any:
    if isinstance(value, str):
        return value if strings != "b64" else {"b64": base64.b64encode(value.encode()).decode("ascii")}
    if not isinstance(value, bytes):
        raise InvalidArgumentError(f"{where} holds a {type(value).__name__}, not bytes")
    if strings != "b64":
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            if strings == "text":
                raise InvalidArgumentError(f"{where} holds bytes that are not UTF-8") from None
    return {"b64": base64.b64encode(value).decode("ascii")}


# --- binary tensors (KServe's binary tensor data extension) ---------------------------------------------


def from_binary(
    where: str, buf: memoryview, dtype: Dtype, shape: tuple[int, ...], what: str = "binary_data_size"
) -> Array:
    """Raw little-endian, row-major bytes as an array of ``shape``; a zero-copy view of the body where
    possible: where the bytes start at an address the dtype aligns to (a tensor's offset in a body is
    whatever the header before it makes it), else an aligned copy: numpy reads an unaligned array through
    buffers, so every op reading it would pay about a copy's worth (a 4096 x 64 float32 input: +0.15 ms a
    Relu, +1.5 ms a MatMul, measured in one noisy run), where this pays one. Strings are a
    4-byte little-endian length and the bytes, per element. ``what`` names the bytes in errors (HTTP's
    binary_data_size, gRPC's raw_input_contents[i])."""
    count = shape_count(where, shape, dtype)
    if dtype.kind == "O":
        return _binary_strings(where, buf, shape, count, what)
    expected = count * dtype.itemsize
    if len(buf) != expected:
        raise InvalidArgumentError(
            f"{where}: {what} is {len(buf)} bytes but shape {list(shape)} of "
            f"{dtype_name(dtype)} needs {expected}"
        )
    if dtype.kind == "b":  # any non-zero byte is true; a bool view of other bytes is not a valid bool
        return np.frombuffer(buf, np.uint8).astype(np.bool_).reshape(shape)
    arr = np.frombuffer(buf, dtype.newbyteorder("<")).reshape(shape)
    return arr if arr.flags.aligned else arr.copy()


def _binary_strings(where: str, buf: memoryview, shape: tuple[int, ...], count: int, what: str) -> Array:
    # each element takes its 4-byte length at least: a shape the bytes cannot hold is refused before its
    # array is made (a 113-byte request of shape [100000000] made 800 MB of it, 1-1.4 s on the loop)
    if 4 * count > len(buf):
        raise InvalidArgumentError(
            f"{where}: shape {list(shape)} has {count} string elements, which need at least "
            f"{4 * count} bytes (a 4-byte length each), but {what} is {len(buf)} bytes"
        )
    out = np.empty(count, dtype=object)
    pos, end = 0, len(buf)
    for i in range(count):
        if pos + 4 > end:
            raise InvalidArgumentError(
                f"{where}: binary string data ends after {i} of the {count} elements "
                f"shape {list(shape)} needs"
            )
        (length,) = _U32.unpack_from(buf, pos)
        pos += 4
        if pos + length > end:
            raise InvalidArgumentError(
                f"{where}: string element {i} claims {length} bytes but only {end - pos} remain"
            )
        out[i] = bytes(buf[pos : pos + length])
        pos += length
    if pos != end:
        raise InvalidArgumentError(
            f"{where}: {what} is {end} bytes but the {count} string elements use {pos}"
        )
    return out.reshape(shape)


# --- typed values (gRPC's repeated fields: KServe's InferTensorContents) ---------------------------------


def from_values(where: str, values: Sequence[Any], dtype: Dtype, shape: tuple[int, ...]) -> Array:
    """A protobuf repeated field of values (numbers, bools or bytes) as an array of ``dtype`` and ``shape``;
    integers out of the dtype's range are refused, naming the value (a field of int32 carries int8s)."""
    count = shape_count(where, shape, dtype)
    if len(values) != count:
        raise InvalidArgumentError(
            f"{where}: shape {list(shape)} needs {count} values but the contents hold {len(values)}"
        )
    if dtype.kind == "O":
        out = np.empty(count, dtype=object)
        out[:] = list(values)
        return out.reshape(shape)
    if dtype.kind in "iu" and count:
        wide = np.array(values, dtype=np.uint64 if dtype.kind == "u" and dtype.itemsize == 8 else np.int64)
        info = np.iinfo(dtype)
        low, high = int(wide.min()), int(wide.max())
        if low < info.min or high > info.max:
            bad = low if low < info.min else high
            raise InvalidArgumentError(
                f"{where}: value {bad} is out of range for dtype {dtype_name(dtype)} [{info.min}, {info.max}]"
            )
        return wide.astype(dtype).reshape(shape)
    return np.array(values, dtype=dtype).reshape(shape)


# --- TensorProtos (TF Serving's gRPC API, the native protobuf endpoint) -----------------------------------


def _proto_dtypes() -> dict[int, Dtype]:
    out: dict[int, Dtype] = {}
    for code in types_pb2.DataType.values():
        try:
            out[code] = dtypes.as_numpy_dtype(dtypes.base_dtype(code))
        except OpError:
            continue
    return out


# a TensorProto's dtype (references too) as numpy's, for the checks before it is decoded
_PROTO_DTYPES = _proto_dtypes()


# the repeated fields a TensorProto's values may come in (float_val, int_val, string_val, ...)
_VALUE_FIELDS = tuple(f.name for f in tensor_pb2.TensorProto.DESCRIPTOR.fields if f.name.endswith("_val"))


def check_tensor_protos(tensors: Sequence[tuple[str, tensor_pb2.TensorProto]], fill_limit: int) -> None:
    """Refuses a request's TensorProtos (``where`` and the proto of each) before any is decoded: a shape
    no array can have (``shape_count``), and tensors filled from fewer values than their shape holds
    past ``fill_limit`` bytes in all (the server's max_request_bytes). TensorFlow fills such a tensor
    with its last value, or zeros (FromProto; ``to_ndarray`` does the same): a 25-byte body declaring
    [524288, 64] floats and no value was 128 MiB. What ``to_ndarray`` itself refuses (an unknown rank, a
    negative dimension, a dtype it cannot read) is left to it.

    Only a request whose tensors declare more than ``fill_limit`` bytes in all has its values counted:
    below it nothing can expand past the limit, and a tensor in ``tensor_content`` is as many bytes in
    the body as it declares, which max_request_bytes bounds already."""
    declared = 0
    for where, proto in tensors:
        read = _shape_of_proto(where, proto)
        if read is not None:
            dtype, shape = read
            declared += shape_count(where, shape, dtype) * dtype.itemsize
    if declared > fill_limit:
        _check_fills(tensors, fill_limit)


def _shape_of_proto(where: str, proto: tensor_pb2.TensorProto) -> tuple[Dtype, tuple[int, ...]] | None:
    """A TensorProto's numpy dtype and shape; None when ``to_ndarray`` refuses them itself."""
    dtype = _PROTO_DTYPES.get(proto.dtype)
    shape_proto = proto.tensor_shape
    if dtype is None or shape_proto.unknown_rank:
        return None
    dims = shape_proto.dim
    if len(dims) > MAX_RANK:  # before reading them all: a dimension is 2 bytes of the body
        raise InvalidArgumentError(_too_many_dimensions(where, [d.size for d in dims[:4]], len(dims)))
    shape = tuple([d.size for d in dims])
    if shape and min(shape) < 0:
        return None
    return dtype, shape


def _check_fills(tensors: Sequence[tuple[str, tensor_pb2.TensorProto]], limit: int) -> None:
    filled = 0
    for where, proto in tensors:
        read = _shape_of_proto(where, proto)
        if read is None:
            continue
        dtype, shape = read
        count = math.prod(shape)
        # values in any field count: ones in a field the dtype does not read are in the body all the same
        given = sum(len(getattr(proto, name)) for name in _VALUE_FIELDS)
        if given >= count or proto.tensor_content:  # no fill: its values are the body's bytes
            continue
        nbytes = count * dtype.itemsize
        filled += nbytes
        if filled > limit:
            raise InvalidArgumentError(
                f"{where}: shape {list(shape)} filled from {given} of its {count} values would take "
                f"{nbytes} bytes of {dtype_name(dtype)}, past max_request_bytes ({limit}), what a "
                "request's tensors filled from fewer values than their shape holds may take in all; "
                "send every value (tensor_content)"
            )


def from_tensor_proto(where: str, proto: tensor_pb2.TensorProto, code: int = 0) -> Array:
    """A TensorProto as an array; one whose dtype is not the input's DataType ``code`` (when the graph
    tells it) is refused, as TF Serving refuses it."""
    if code and proto.dtype != code:
        raise InvalidArgumentError(
            f"{where}: the model expects dtype {dtypes.name(code)} but the tensor holds "
            f"{dtypes.name(proto.dtype)}"
        )
    return tensor.to_ndarray(proto, where)


def to_tensor_proto(value: Any) -> tensor_pb2.TensorProto:
    """An array as a TensorProto (numbers in tensor_content, strings in string_val)."""
    return tensor.from_ndarray(value)


def to_binary(where: str, value: Any) -> bytes:
    """An array as raw little-endian, row-major bytes (strings: length-prefixed)."""
    data = binary_data(where, value)
    return data if isinstance(data, bytes) else data.tobytes()


def binary_data(where: str, value: Any) -> bytes | Array:
    """``to_binary``'s bytes without copying a numeric array that already is little-endian and
    contiguous: the array itself (its memory is the bytes), else a converted copy; strings as bytes."""
    arr = np.asarray(value)
    if arr.dtype.kind in "OSU":
        parts: list[bytes] = []
        for item in arr.ravel().tolist():
            data = item.encode("utf-8") if isinstance(item, str) else item
            if not isinstance(data, bytes):
                raise InvalidArgumentError(f"{where} holds a {type(item).__name__}, not bytes")
            parts.append(_U32.pack(len(data)))
            parts.append(data)
        return b"".join(parts)
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and not np.little_endian):
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return np.ascontiguousarray(arr)
