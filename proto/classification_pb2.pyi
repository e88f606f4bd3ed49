from poolserve.proto import input_pb2 as _input_pb2
from poolserve.proto import model_pb2 as _model_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Class(_message.Message):
    __slots__ = ("label", "score")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    label: str
    score: float
    def __init__(self, label: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class Classifications(_message.Message):
    __slots__ = ("classes",)
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    classes: _containers.RepeatedCompositeFieldContainer[Class]
    def __init__(self, classes: _Optional[_Iterable[_Union[Class, _Mapping]]] = ...) -> None: ...

class ClassificationResult(_message.Message):
    __slots__ = ("classifications",)
    CLASSIFICATIONS_FIELD_NUMBER: _ClassVar[int]
    classifications: _containers.RepeatedCompositeFieldContainer[Classifications]
    def __init__(self, classifications: _Optional[_Iterable[_Union[Classifications, _Mapping]]] = ...) -> None: ...

class ClassificationRequest(_message.Message):
    __slots__ = ("model_spec", "input")
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    model_spec: _model_pb2.ModelSpec
    input: _input_pb2.Input
    def __init__(self, model_spec: _Optional[_Union[_model_pb2.ModelSpec, _Mapping]] = ..., input: _Optional[_Union[_input_pb2.Input, _Mapping]] = ...) -> None: ...

class ClassificationResponse(_message.Message):
    __slots__ = ("model_spec", "result")
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    model_spec: _model_pb2.ModelSpec
    result: ClassificationResult
    def __init__(self, model_spec: _Optional[_Union[_model_pb2.ModelSpec, _Mapping]] = ..., result: _Optional[_Union[ClassificationResult, _Mapping]] = ...) -> None: ...
