"""The tensor bundle reader: LevelDB's table format and TensorFlow's checkpoint entries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from poolserve.runtime.errors import DataLossError, NotFoundError
from poolserve.runtime.tensor_bundle import BundleReader, crc32c, mask_crc, read_table

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
