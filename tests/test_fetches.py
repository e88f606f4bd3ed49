import collections

import numpy as np
import pytest

from poolserve.runtime.fetches import FetchMapper, as_output, is_op_name, outputs

Pair = collections.namedtuple("Pair", "a b")


def values_for(mapper):
    """One distinct value per flattened name: what a step would fetch for them."""
    return [f"v{i}" for i in range(len(mapper.names))]


def test_a_single_name():
    m = FetchMapper("y:0")
    assert m.names == ["y:0"]
    assert m.build(["result"]) == "result"


@pytest.mark.parametrize("kind", [list, tuple])
def test_lists_and_tuples_keep_their_type_and_order(kind):
    m = FetchMapper(kind(["a:0", "b:0", "c"]))
    assert m.names == ["a:0", "b:0", "c"]
    out = m.build(values_for(m))
    assert type(out) is kind and out == kind(["v0", "v1", "v2"])
    empty = FetchMapper(kind())
    assert empty.names == [] and empty.build([]) == kind()


def test_dicts_keep_their_keys_and_type():
    m = FetchMapper({"z": "z:0", "a": "a:0"})
    assert m.names == ["z:0", "a:0"]
    out = m.build(["Z", "A"])
    assert out == {"z": "Z", "a": "A"} and list(out) == ["z", "a"]
    ordered = FetchMapper(collections.OrderedDict(k="k:0"))
    assert type(ordered.build(["K"])) is collections.OrderedDict


def test_namedtuples_are_rebuilt_as_themselves():
    m = FetchMapper(Pair("a:0", b="b:0"))
    out = m.build(["A", "B"])
    assert type(out) is Pair and out == Pair("A", "B") and out.b == "B"


def test_nesting_and_repeated_names():
    fetches = {"k": ["y:0", Pair("y:0", ("x:0",))], "t": "train", "d": {"inner": ["x:0"]}}
    m = FetchMapper(fetches)
    # every occurrence has its own position, in depth-first order: a step fetches repeats only once
    assert m.names == ["y:0", "y:0", "x:0", "train", "x:0"]
    out = m.build(values_for(m))
    assert out == {"k": ["v0", Pair("v1", ("v2",))], "t": "v3", "d": {"inner": ["v4"]}}
    assert isinstance(out["k"][1], Pair) and isinstance(out["k"][1].b, tuple)


def test_one_mapper_builds_many_results():
    m = FetchMapper(["a:0", ("b:0",)])
    assert m.build([1, 2]) == [1, (2,)]
    assert m.build([3, 4]) == [3, (4,)]  # the structure is compiled once, the values vary


@pytest.mark.parametrize(
    ("fetch", "shown", "kind"),
    [
        (42, "42", "int"),
        (None, "None", "NoneType"),
        (b"y:0", "b'y:0'", "bytes"),
        ({"y:0"}, "{'y:0'}", "set"),
        (["a:0", 1.5], "1.5", "float"),  # found inside a list too
        ({"k": [object]}, "<class 'object'>", "type"),
    ],
)
def test_bad_fetch_types_are_named(fetch, shown, kind):
    with pytest.raises(TypeError) as info:
        FetchMapper(fetch)
    assert str(info.value) == (
        f"Fetch argument {shown} has invalid type {kind}: a fetch must be a tensor or operation name, "
        "or a list, tuple, dict or namedtuple of them"
    )


@pytest.mark.parametrize(
    ("name", "is_op"),
    [
        ("train", True),
        ("scope/train", True),
        ("y:0", False),
        ("scope/y:12", False),
        ("a:b", True),  # not a port: part of the name
        ("a:0:1", False),  # the last ':' decides
    ],
)
def test_is_op_name(name, is_op):
    assert is_op_name(name) is is_op


def test_mappings_that_cannot_be_built_from_pairs_still_map():
    import collections
    import types

    dd = collections.defaultdict(list, {"a": "x:0"})
    out = FetchMapper(dd).build([1])
    assert type(out) is collections.defaultdict and out.default_factory is list and out == {"a": 1}
    proxy = types.MappingProxyType({"a": "x:0", "b": "y:0"})
    assert FetchMapper(proxy).build([1, 2]) == {"a": 1, "b": 2}  # comes back as a dict


def test_0_d_values_are_numpy_scalars_and_read_only_ones_are_copied():
    assert type(as_output(np.array(6.0, np.float32))) is np.float32
    word = as_output(np.array(b"hi", object))
    assert type(word) is bytes and word == b"hi"
    held = np.empty((), object)
    held[()] = {"a TensorList": 1}  # a Python object in a 0-d array (resources, TensorLists) stays an array
    assert as_output(held) is held
    constant = np.ones(2, np.float32)
    constant.flags.writeable = False
    out = as_output(constant)
    assert out is not constant and out.flags.writeable and out.tolist() == [1, 1]


def test_outputs_gives_a_fed_tensor_as_it_was_fed():
    fed, computed = np.array(5, np.int32), np.array(7, np.int32)
    got = outputs([fed, computed], [0, 1, None, 0], fed=1)
    assert got[0] is fed and type(got[1]) is np.int32 and got[1] == 7 and got[2] is None and got[3] is fed


def test_a_result_sharing_memory_with_a_feed_is_copied():
    feed = np.arange(6, dtype=np.float32)
    computed = feed + 1
    for result in (feed, feed.reshape(2, 3), feed[1:]):  # an Identity, a Reshape, a slice of the feed
        out = as_output(result, [feed], 1)
        assert out is not result and not np.shares_memory(out, feed) and out.tolist() == result.tolist()
    assert as_output(computed, [feed], 1) is computed  # its own memory: kept as it is
    assert as_output(feed.reshape(2, 3)).base is feed  # no feeds given: nothing to copy for
