from poolserve.proto import config_pb2 as _config_pb2
from poolserve.proto import tensor_pb2 as _tensor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunRequest(_message.Message):
    __slots__ = ("feeds", "fetches", "targets", "run_options", "trace", "use_run_handler_pool")
    class FeedsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _tensor_pb2.TensorProto
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_tensor_pb2.TensorProto, _Mapping]] = ...) -> None: ...
    FEEDS_FIELD_NUMBER: _ClassVar[int]
    FETCHES_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    RUN_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    USE_RUN_HANDLER_POOL_FIELD_NUMBER: _ClassVar[int]
    feeds: _containers.MessageMap[str, _tensor_pb2.TensorProto]
    fetches: _containers.RepeatedScalarFieldContainer[str]
    targets: _containers.RepeatedScalarFieldContainer[str]
    run_options: _config_pb2.RunOptions
    trace: str
    use_run_handler_pool: bool
    def __init__(self, feeds: _Optional[_Mapping[str, _tensor_pb2.TensorProto]] = ..., fetches: _Optional[_Iterable[str]] = ..., targets: _Optional[_Iterable[str]] = ..., run_options: _Optional[_Union[_config_pb2.RunOptions, _Mapping]] = ..., trace: _Optional[str] = ..., use_run_handler_pool: _Optional[bool] = ...) -> None: ...

class RunResponse(_message.Message):
    __slots__ = ("outputs", "request_id", "run_metadata", "trace_json")
    class OutputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _tensor_pb2.TensorProto
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_tensor_pb2.TensorProto, _Mapping]] = ...) -> None: ...
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_METADATA_FIELD_NUMBER: _ClassVar[int]
    TRACE_JSON_FIELD_NUMBER: _ClassVar[int]
    outputs: _containers.MessageMap[str, _tensor_pb2.TensorProto]
    request_id: str
    run_metadata: _config_pb2.RunMetadata
    trace_json: str
    def __init__(self, outputs: _Optional[_Mapping[str, _tensor_pb2.TensorProto]] = ..., request_id: _Optional[str] = ..., run_metadata: _Optional[_Union[_config_pb2.RunMetadata, _Mapping]] = ..., trace_json: _Optional[str] = ...) -> None: ...
