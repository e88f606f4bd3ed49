from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DebugTensorWatch(_message.Message):
    __slots__ = ("node_name", "output_slot", "debug_ops", "debug_urls", "tolerate_debug_op_creation_failures")
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SLOT_FIELD_NUMBER: _ClassVar[int]
    DEBUG_OPS_FIELD_NUMBER: _ClassVar[int]
    DEBUG_URLS_FIELD_NUMBER: _ClassVar[int]
    TOLERATE_DEBUG_OP_CREATION_FAILURES_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    output_slot: int
    debug_ops: _containers.RepeatedScalarFieldContainer[str]
    debug_urls: _containers.RepeatedScalarFieldContainer[str]
    tolerate_debug_op_creation_failures: bool
    def __init__(self, node_name: _Optional[str] = ..., output_slot: _Optional[int] = ..., debug_ops: _Optional[_Iterable[str]] = ..., debug_urls: _Optional[_Iterable[str]] = ..., tolerate_debug_op_creation_failures: _Optional[bool] = ...) -> None: ...

class DebugOptions(_message.Message):
    __slots__ = ("debug_tensor_watch_opts", "global_step", "reset_disk_byte_usage")
    DEBUG_TENSOR_WATCH_OPTS_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_STEP_FIELD_NUMBER: _ClassVar[int]
    RESET_DISK_BYTE_USAGE_FIELD_NUMBER: _ClassVar[int]
    debug_tensor_watch_opts: _containers.RepeatedCompositeFieldContainer[DebugTensorWatch]
    global_step: int
    reset_disk_byte_usage: bool
    def __init__(self, debug_tensor_watch_opts: _Optional[_Iterable[_Union[DebugTensorWatch, _Mapping]]] = ..., global_step: _Optional[int] = ..., reset_disk_byte_usage: _Optional[bool] = ...) -> None: ...

class DebuggedSourceFile(_message.Message):
    __slots__ = ("host", "file_path", "last_modified", "bytes", "lines")
    HOST_FIELD_NUMBER: _ClassVar[int]
    FILE_PATH_FIELD_NUMBER: _ClassVar[int]
    LAST_MODIFIED_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    host: str
    file_path: str
    last_modified: int
    bytes: int
    lines: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, host: _Optional[str] = ..., file_path: _Optional[str] = ..., last_modified: _Optional[int] = ..., bytes: _Optional[int] = ..., lines: _Optional[_Iterable[str]] = ...) -> None: ...

class DebuggedSourceFiles(_message.Message):
    __slots__ = ("source_files",)
    SOURCE_FILES_FIELD_NUMBER: _ClassVar[int]
    source_files: _containers.RepeatedCompositeFieldContainer[DebuggedSourceFile]
    def __init__(self, source_files: _Optional[_Iterable[_Union[DebuggedSourceFile, _Mapping]]] = ...) -> None: ...
