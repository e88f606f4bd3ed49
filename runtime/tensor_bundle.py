"""Checkpoints in TensorFlow's tensor bundle format (V2), read without TensorFlow.

A checkpoint ``<prefix>`` is ``<prefix>.index``, an SSTable in LevelDB's table format mapping each tensor
name to a ``BundleEntryProto`` (the empty key holds the ``BundleHeaderProto``), and data shards
``<prefix>.data-<i>-of-<n>`` with the tensors' raw little-endian bytes at the entries' offsets.

The table format, as LevelDB documents it: a 48-byte footer at the end (two varint block handles, the
metaindex's and the index's, padded to 40 bytes, then the magic number), and blocks each followed by a
one-byte compression type and a masked crc32c. A block is a run of entries ``shared, non_shared,
value_length`` (varints), the key's new suffix and the value; keys share a prefix with the entry before,
except at restart points, whose offsets (uint32) and count end the block. The index block maps the last
key of each data block to that block's handle. TensorFlow writes bundle indexes uncompressed.

A partitioned variable (TF1's ``partitioner=``) is saved as slices of one logical tensor: its entry under
the tensor's name lists the slices (``TensorSliceProto``s) and holds no data; each slice's data is the entry
under a key that encodes the name and the slice (TensorFlow's ``EncodeTensorNameSlice``, in OrderedCode:
the number 0, the name, the rank, then each dimension's start and length, -1 for a whole dimension).
``read(name, slice)`` assembles any slice of such a tensor (or of a whole one) from what is stored.
"""

from __future__ import annotations

import struct
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import message

from poolserve.proto import tensor_bundle_pb2, types_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.errors import DataLossError, InvalidArgumentError, NotFoundError, UnimplementedError
from poolserve.runtime.tensor import shape_from_proto

_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_SIZE = 48
_BLOCK_TRAILER = 5  # compression type + crc32c
_NO_COMPRESSION = 0
# Tensors up to this size have their crc32c checked: the check is pure Python (~5 MB/s), so larger
# tensors are trusted rather than making a model's load take seconds per megabyte.
CRC_CHECK_MAX_BYTES = 1 << 20


# --- crc32c (Castagnoli), as LevelDB and the bundle writer use it ------------------------------------------


@cache
def _crc_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


def crc32c(data: bytes | memoryview, crc: int = 0) -> int:
    table = _crc_table()
    crc ^= 0xFFFFFFFF
    for b in bytes(data):
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def mask_crc(crc: int) -> int:
    """LevelDB stores checksums masked, so a checksum of data holding checksums stays well distributed."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# --- the SSTable ------------------------------------------------------------------------------------------


def _varint(data: bytes, pos: int, where: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise DataLossError(f"{where}: truncated or malformed varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _block(data: bytes, handle: tuple[int, int], where: str) -> bytes:
    offset, size = handle
    end = offset + size
    if end + _BLOCK_TRAILER > len(data):
        raise DataLossError(f"{where}: block at {offset} (+{size}) runs past the end of the file")
    if data[end] != _NO_COMPRESSION:
        raise UnimplementedError(
            f"{where}: block at {offset} is compressed (type {data[end]}); only uncompressed tables are read"
        )
    (stored,) = struct.unpack_from("<I", data, end + 1)
    if mask_crc(crc32c(data[offset : end + 1])) != stored:
        raise DataLossError(f"{where}: checksum mismatch in the block at offset {offset}")
    return data[offset:end]


def _block_entries(block: bytes, where: str) -> list[tuple[bytes, bytes]]:
    if len(block) < 4:
        raise DataLossError(f"{where}: block too short")
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 - 4 * restarts
    if limit < 0:
        raise DataLossError(f"{where}: bad restart count {restarts}")
    entries: list[tuple[bytes, bytes]] = []
    key = b""
    pos = 0
    while pos < limit:
        shared, pos = _varint(block, pos, where)
        non_shared, pos = _varint(block, pos, where)
        value_len, pos = _varint(block, pos, where)
        if shared > len(key) or pos + non_shared + value_len > limit:
            raise DataLossError(f"{where}: corrupt block entry at offset {pos}")
        key = key[:shared] + block[pos : pos + non_shared]
        pos += non_shared
        entries.append((key, block[pos : pos + value_len]))
        pos += value_len
    return entries


def read_table(path: Path) -> dict[bytes, bytes]:
    """Every key and value of an (uncompressed) LevelDB-format table."""
    where = str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise NotFoundError(f"checkpoint index not found: {path}") from None
    except OSError as e:
        raise InvalidArgumentError(f"cannot read checkpoint index {path}: {e.strerror}") from None
    if len(data) < _FOOTER_SIZE:
        raise DataLossError(f"{where}: too short to be a checkpoint index ({len(data)} bytes)")
    footer = data[-_FOOTER_SIZE:]
    (magic,) = struct.unpack_from("<Q", footer, _FOOTER_SIZE - 8)
    if magic != _TABLE_MAGIC:
        raise DataLossError(f"{where}: not a checkpoint index (bad table magic number)")
    pos = 0
    handles = []
    for _ in range(2):  # metaindex, index
        offset, pos = _varint(footer, pos, where)
        size, pos = _varint(footer, pos, where)
        handles.append((offset, size))
    out: dict[bytes, bytes] = {}
    for _, handle_bytes in _block_entries(_block(data, handles[1], where), where):
        offset, p = _varint(handle_bytes, 0, where)
        size, _ = _varint(handle_bytes, p, where)
        out.update(_block_entries(_block(data, (offset, size), where), where))
    return out


# --- the bundle -------------------------------------------------------------------------------------------


class BundleReader:
    """A checkpoint's index, read once; ``read(name)`` loads one tensor from its data shard."""

    def __init__(self, prefix: str | Path) -> None:
        self.prefix = str(prefix)
        self.index_path = Path(f"{self.prefix}.index")
        table = read_table(self.index_path)
        header = tensor_bundle_pb2.BundleHeaderProto()
        try:
            header.ParseFromString(table.pop(b"", b""))
        except message.DecodeError as e:
            raise DataLossError(f"{self.index_path}: corrupt bundle header: {e}") from None
        if header.endianness != tensor_bundle_pb2.BundleHeaderProto.LITTLE:
            raise UnimplementedError(f"{self.index_path}: big-endian checkpoints are not supported")
        self.num_shards = max(header.num_shards, 1)
        self._entries = table

    def names(self) -> list[str]:
        return sorted(k.decode("utf-8", "replace") for k in self._entries)

    def entry(self, name: str) -> tensor_bundle_pb2.BundleEntryProto:
        raw = self._entries.get(name.encode())
        if raw is None:
            raise NotFoundError(f"Key {name} not found in checkpoint {self.prefix}")
        return self._parse(raw, f"'{name}'")

    def _parse(self, raw: bytes, what: str) -> tensor_bundle_pb2.BundleEntryProto:
        entry = tensor_bundle_pb2.BundleEntryProto()
        try:
            entry.ParseFromString(raw)
        except message.DecodeError as e:
            raise DataLossError(f"{self.index_path}: corrupt entry for {what}: {e}") from None
        return entry

    def shard_path(self, shard: int) -> Path:
        return Path(f"{self.prefix}.data-{shard:05d}-of-{self.num_shards:05d}")

    def read(self, name: str, region: Slice | None = None) -> np.ndarray[Any, Any]:
        """The tensor ``name``, or its part ``region`` (a (start, length) per dimension)."""
        entry = self.entry(name)
        if not entry.slices:
            whole = self._read_entry(name, entry)
            if region is None:
                return whole
            _check_region(name, whole.shape, region)
            return whole[tuple(slice(a, a + n) for a, n in region)]
        full = shape_from_proto(entry.shape)
        if full is None or any(d < 0 for d in full):
            raise DataLossError(f"'{name}' in {self.index_path} has no fully defined shape")
        want = region if region is not None else tuple((0, d) for d in full)
        _check_region(name, full, want)
        out = np.empty([n for _, n in want], dtype=dtypes.as_numpy_dtype(entry.dtype))
        covered = 0
        for proto in entry.slices:
            stored = tuple(
                (e.start, e.length if e.HasField("length") else d)
                for e, d in zip(proto.extent, full, strict=True)
            )
            overlap = [(max(a, b), min(a + n, b + m)) for (a, n), (b, m) in zip(want, stored, strict=True)]
            if any(lo >= hi for lo, hi in overlap):
                continue
            key = _slice_key(name, proto, len(full))
            part = self._read_entry(f"{name} (slice {list(stored)})", self.entry_raw(key, name))
            src = tuple(slice(lo - b, hi - b) for (lo, hi), (b, _) in zip(overlap, stored, strict=True))
            dst = tuple(slice(lo - a, hi - a) for (lo, hi), (a, _) in zip(overlap, want, strict=True))
            out[dst] = part[src]
            covered += int(np.prod([hi - lo for lo, hi in overlap]))
        if covered < out.size:
            raise DataLossError(f"the slices of '{name}' in {self.prefix} do not cover the part asked for")
        out.flags.writeable = False
        return out

    def entry_raw(self, key: bytes, name: str) -> tensor_bundle_pb2.BundleEntryProto:
        """The entry of a slice of ``name``, by its encoded key."""
        raw = self._entries.get(key)
        if raw is None:
            raise DataLossError(f"a slice of '{name}' listed in {self.index_path} is missing from it")
        return self._parse(raw, f"a slice of '{name}'")

    def _read_entry(self, name: str, entry: tensor_bundle_pb2.BundleEntryProto) -> np.ndarray[Any, Any]:
        shape = shape_from_proto(entry.shape)
        if shape is None or any(d < 0 for d in shape):
            raise DataLossError(f"'{name}' in {self.index_path} has no fully defined shape")
        path = self.shard_path(entry.shard_id)
        try:
            with path.open("rb") as f:
                f.seek(entry.offset)
                raw = f.read(entry.size)
        except FileNotFoundError:
            raise NotFoundError(f"checkpoint data file not found: {path}") from None
        except OSError as e:
            raise InvalidArgumentError(f"cannot read checkpoint data {path}: {e.strerror}") from None
        if len(raw) != entry.size:
            raise DataLossError(
                f"{path}: '{name}' needs {entry.size} bytes at offset {entry.offset}; the file is too short"
            )
        # (strings are checksummed element by element as written; only numeric tensors are checked)
        checked = entry.dtype != types_pb2.DT_STRING and entry.size <= CRC_CHECK_MAX_BYTES
        if checked and mask_crc(crc32c(raw)) != entry.crc32c:
            raise DataLossError(f"{path}: checksum mismatch for '{name}'")
        return _decode(name, path, entry.dtype, shape, raw)


Slice = tuple[tuple[int, int], ...]


def parse_slice_spec(spec: str) -> tuple[tuple[int, ...], Slice | None]:
    """A ``shape_and_slices`` entry of RestoreV2, "<full shape> <slice>" with the slice ``start,length``
    or ``-`` (all of it) per dimension, ":"-separated: the full shape and the (start, length) of each
    dimension; ("", None) for an empty spec (the whole tensor)."""
    parts = spec.split()
    if not parts:
        return (), None
    try:
        full = tuple(int(d) for d in parts[:-1])
        dims = parts[-1].split(":")
        if len(dims) != len(full):
            raise ValueError
        region = []
        for d, text in zip(full, dims, strict=True):
            if text == "-":
                region.append((0, d))
            else:
                start, length = (int(v) for v in text.split(","))
                region.append((start, d - start if length == -1 else length))
    except ValueError:
        raise InvalidArgumentError(
            f"invalid slice spec '{spec}': want '<full shape> <start,length:...>'"
        ) from None
    return full, tuple(region)


def _check_region(name: str, full: tuple[int, ...], region: Slice) -> None:
    if len(region) != len(full) or any(
        a < 0 or n < 0 or a + n > d for (a, n), d in zip(region, full, strict=True)
    ):
        raise InvalidArgumentError(f"slice {list(region)} is outside '{name}' of shape {list(full)}")


def _ordered_number(n: int) -> bytes:
    """OrderedCode's WriteNumIncreasing: the byte count, then the number's bytes, big-endian."""
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return bytes([len(body)]) + body


# OrderedCode's header bits of a signed number of 1..10 bytes
_SIGNED_HEADERS = ((0, 0), (0x80, 0), (0xC0, 0), (0xE0, 0), (0xF0, 0), (0xF8, 0), (0xFC, 0), (0xFE, 0),
                   (0xFF, 0), (0xFF, 0x80), (0xFF, 0xC0))  # fmt: skip


def _ordered_signed(value: int) -> bytes:
    """OrderedCode's WriteSignedNumIncreasing: the length in leading header bits, then the bits."""
    x = ~value if value < 0 else value
    length = next(n for n in range(1, 11) if x < 1 << (7 * n - 1))
    raw = bytearray((value % (1 << (8 * length))).to_bytes(length, "big"))
    h0, h1 = _SIGNED_HEADERS[length]
    raw[0] ^= h0
    if length > 1:
        raw[1] ^= h1
    return bytes(raw)


def _slice_key(name: str, proto: Any, rank: int) -> bytes:
    """TensorFlow's EncodeTensorNameSlice: where a slice of a partitioned tensor is stored."""
    text = name.encode().replace(b"\xff", b"\xff\x00").replace(b"\x00", b"\x00\xff")
    key = _ordered_number(0) + text + b"\x00\x01" + _ordered_number(rank)
    for e in proto.extent:
        key += _ordered_signed(e.start) + _ordered_signed(e.length if e.HasField("length") else -1)
    return key


def _decode(name: str, path: Path, dtype: int, shape: tuple[int, ...], raw: bytes) -> np.ndarray[Any, Any]:
    count = int(np.prod(shape, dtype=np.int64))
    if dtype == types_pb2.DT_STRING:
        # every length as a varint64, a masked crc32c of the lengths (4 bytes), then the bytes
        lengths, pos = [], 0
        for _ in range(count):
            n, pos = _varint(raw, pos, str(path))
            lengths.append(n)
        pos += 4
        out = np.empty(count, dtype=object)
        for i, n in enumerate(lengths):
            out[i] = raw[pos : pos + n]
            pos += n
        return out.reshape(shape)
    np_dtype = dtypes.as_numpy_dtype(dtype)
    if count * np_dtype.itemsize != len(raw):
        raise DataLossError(
            f"{path}: '{name}' has {len(raw)} bytes, but shape {list(shape)} of {dtypes.name(dtype)} needs "
            f"{count * np_dtype.itemsize}"
        )
    arr = np.frombuffer(raw, dtype=np_dtype.newbyteorder("<")).astype(np_dtype, copy=False).reshape(shape)
    arr.flags.writeable = False
    return arr


__all__ = ["CRC_CHECK_MAX_BYTES", "BundleReader", "crc32c", "mask_crc", "parse_slice_spec", "read_table"]
