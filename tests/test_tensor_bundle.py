"""The tensor bundle reader: LevelDB's table format and TensorFlow's checkpoint entries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from poolserve.runtime.errors import DataLossError, InvalidArgumentError, NotFoundError
from poolserve.runtime.tensor_bundle import (
    BundleReader,
    _ordered_number,
    _ordered_signed,
    crc32c,
    mask_crc,
    parse_slice_spec,
    read_table,
)

PREFIX = Path(__file__).parent / "fixtures" / "saved_models" / "tf1_linear" / "1" / "variables" / "variables"


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(b"") == 0
    assert mask_crc(0) == 0xA282EAD8


def test_reads_the_index_and_tensors() -> None:
    reader = BundleReader(PREFIX)
    assert reader.names() == ["b", "w"]
    w = reader.read("w")
    assert w.shape == (4, 2) and w.dtype == np.float32 and not w.flags.writeable
    assert b"" in read_table(Path(f"{PREFIX}.index"))  # the header's key


def test_string_tensor() -> None:
    prefix = PREFIX.parents[3] / "tf2_mlp" / "1" / "variables" / "variables"
    graph = BundleReader(prefix).read("_CHECKPOINTABLE_OBJECT_GRAPH")
    assert graph.shape == () and isinstance(graph.item(), bytes) and len(graph.item()) > 10


def test_unknown_key_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="Key nope not found in checkpoint"):
        BundleReader(PREFIX).read("nope")
    with pytest.raises(NotFoundError, match=r"checkpoint index not found: .*missing\.index"):
        BundleReader(tmp_path / "missing")


def test_corrupt_index(tmp_path: Path) -> None:
    raw = bytearray(Path(f"{PREFIX}.index").read_bytes())
    (tmp_path / "short.index").write_bytes(bytes(raw[:10]))
    with pytest.raises(DataLossError, match="too short"):
        BundleReader(tmp_path / "short")
    raw[2] ^= 0xFF  # inside the first data block: its checksum no longer matches
    (tmp_path / "flipped.index").write_bytes(bytes(raw))
    with pytest.raises(DataLossError, match="checksum mismatch in the block"):
        BundleReader(tmp_path / "flipped")
    raw[-1] ^= 0xFF
    (tmp_path / "magic.index").write_bytes(bytes(raw))
    with pytest.raises(DataLossError, match="bad table magic"):
        BundleReader(tmp_path / "magic")


PARTITIONED = (
    Path(__file__).parent / "fixtures" / "saved_models" / "tf1_partitioned" / "1" / "variables" / "variables"
)


def test_a_partitioned_variable_reads_whole_or_by_slice() -> None:
    """The embedding [11, 4] saved in 3 row slices, the weight [5, 4] in 2 column slices."""
    reader = BundleReader(PARTITIONED)
    emb = reader.read("embedding")
    assert emb.shape == (11, 4)
    # a slice across two stored slices (rows 3-8 span parts 0, 1 and 2) is those rows of the whole
    np.testing.assert_array_equal(reader.read("embedding", ((3, 6), (1, 2))), emb[3:9, 1:3])
    w = reader.read("w")
    np.testing.assert_array_equal(reader.read("w", ((0, 5), (2, 2))), w[:, 2:])
    with pytest.raises(InvalidArgumentError, match="outside 'w'"):
        reader.read("w", ((0, 6), (0, 4)))


def test_slice_specs_and_keys() -> None:
    assert parse_slice_spec("") == ((), None)
    assert parse_slice_spec("11 4 0,4:-") == ((11, 4), ((0, 4), (0, 4)))
    assert parse_slice_spec("11 4 8,-1:1,2") == ((11, 4), ((8, 3), (1, 2)))
    with pytest.raises(InvalidArgumentError, match="invalid slice spec"):
        parse_slice_spec("11 4 0,4")
    # TensorFlow's keys for the slices (OrderedCode), as found in the fixture's index
    names = set(read_table(Path(f"{PARTITIONED}.index")))
    assert b"\x00embedding\x00\x01\x01\x02\x88\x83\x80\x84" in names  # rows 8-10, all 4 columns
    assert _ordered_signed(-1) == b"\x7f" and _ordered_signed(100) == b"\xc0\x64"
    assert _ordered_signed(-100) == b"\x3f\x9c" and _ordered_number(300) == b"\x02\x01\x2c"
