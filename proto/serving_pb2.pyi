from poolserve.proto import config_pb2 as _config_pb2
from poolserve.proto import graph_pb2 as _graph_pb2
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

class NamedTensorProto(_message.Message):
    __slots__ = ("name", "tensor")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    name: str
    tensor: _tensor_pb2.TensorProto
    def __init__(self, name: _Optional[str] = ..., tensor: _Optional[_Union[_tensor_pb2.TensorProto, _Mapping]] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("graph_def", "config", "target", "model")
    GRAPH_DEF_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    graph_def: _graph_pb2.GraphDef
    config: _config_pb2.ConfigProto
    target: str
    model: str
    def __init__(self, graph_def: _Optional[_Union[_graph_pb2.GraphDef, _Mapping]] = ..., config: _Optional[_Union[_config_pb2.ConfigProto, _Mapping]] = ..., target: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session_handle", "graph_version")
    SESSION_HANDLE_FIELD_NUMBER: _ClassVar[int]
    GRAPH_VERSION_FIELD_NUMBER: _ClassVar[int]
    session_handle: str
    graph_version: int
    def __init__(self, session_handle: _Optional[str] = ..., graph_version: _Optional[int] = ...) -> None: ...

class ExtendSessionRequest(_message.Message):
    __slots__ = ("session_handle", "graph_def", "current_graph_version")
    SESSION_HANDLE_FIELD_NUMBER: _ClassVar[int]
    GRAPH_DEF_FIELD_NUMBER: _ClassVar[int]
    CURRENT_GRAPH_VERSION_FIELD_NUMBER: _ClassVar[int]
    session_handle: str
    graph_def: _graph_pb2.GraphDef
    current_graph_version: int
    def __init__(self, session_handle: _Optional[str] = ..., graph_def: _Optional[_Union[_graph_pb2.GraphDef, _Mapping]] = ..., current_graph_version: _Optional[int] = ...) -> None: ...

class ExtendSessionResponse(_message.Message):
    __slots__ = ("new_graph_version",)
    NEW_GRAPH_VERSION_FIELD_NUMBER: _ClassVar[int]
    new_graph_version: int
    def __init__(self, new_graph_version: _Optional[int] = ...) -> None: ...

class RunStepRequest(_message.Message):
    __slots__ = ("session_handle", "feed", "fetch", "target", "options", "partial_run_handle")
    SESSION_HANDLE_FIELD_NUMBER: _ClassVar[int]
    FEED_FIELD_NUMBER: _ClassVar[int]
    FETCH_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_RUN_HANDLE_FIELD_NUMBER: _ClassVar[int]
    session_handle: str
    feed: _containers.RepeatedCompositeFieldContainer[NamedTensorProto]
    fetch: _containers.RepeatedScalarFieldContainer[str]
    target: _containers.RepeatedScalarFieldContainer[str]
    options: _config_pb2.RunOptions
    partial_run_handle: str
    def __init__(self, session_handle: _Optional[str] = ..., feed: _Optional[_Iterable[_Union[NamedTensorProto, _Mapping]]] = ..., fetch: _Optional[_Iterable[str]] = ..., target: _Optional[_Iterable[str]] = ..., options: _Optional[_Union[_config_pb2.RunOptions, _Mapping]] = ..., partial_run_handle: _Optional[str] = ...) -> None: ...

class RunStepResponse(_message.Message):
    __slots__ = ("tensor", "metadata")
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    tensor: _containers.RepeatedCompositeFieldContainer[NamedTensorProto]
    metadata: _config_pb2.RunMetadata
    def __init__(self, tensor: _Optional[_Iterable[_Union[NamedTensorProto, _Mapping]]] = ..., metadata: _Optional[_Union[_config_pb2.RunMetadata, _Mapping]] = ...) -> None: ...

class PartialRunSetupRequest(_message.Message):
    __slots__ = ("session_handle", "feed", "fetch", "target")
    SESSION_HANDLE_FIELD_NUMBER: _ClassVar[int]
    FEED_FIELD_NUMBER: _ClassVar[int]
    FETCH_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    session_handle: str
    feed: _containers.RepeatedScalarFieldContainer[str]
    fetch: _containers.RepeatedScalarFieldContainer[str]
    target: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_handle: _Optional[str] = ..., feed: _Optional[_Iterable[str]] = ..., fetch: _Optional[_Iterable[str]] = ..., target: _Optional[_Iterable[str]] = ...) -> None: ...

class PartialRunSetupResponse(_message.Message):
    __slots__ = ("partial_run_handle",)
    PARTIAL_RUN_HANDLE_FIELD_NUMBER: _ClassVar[int]
    partial_run_handle: str
    def __init__(self, partial_run_handle: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResetRequest(_message.Message):
    __slots__ = ("container",)
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    container: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, container: _Optional[_Iterable[str]] = ...) -> None: ...

class ResetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeviceAttributes(_message.Message):
    __slots__ = ("name", "device_type", "memory_limit", "incarnation")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    device_type: str
    memory_limit: int
    incarnation: int
    def __init__(self, name: _Optional[str] = ..., device_type: _Optional[str] = ..., memory_limit: _Optional[int] = ..., incarnation: _Optional[int] = ...) -> None: ...

class ListDevicesResponse(_message.Message):
    __slots__ = ("local_device",)
    LOCAL_DEVICE_FIELD_NUMBER: _ClassVar[int]
    local_device: _containers.RepeatedCompositeFieldContainer[DeviceAttributes]
    def __init__(self, local_device: _Optional[_Iterable[_Union[DeviceAttributes, _Mapping]]] = ...) -> None: ...
