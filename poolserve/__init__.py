"""poolserve: TensorFlow GraphDefs on numpy kernels, served over HTTP with a process-global RunHandlerPool.

The public API, in one import::

    from poolserve import Session, load_graph_def, load_saved_model, RunOptions, RunMetadata, Timeline

Everything here keeps its name and meaning across releases; modules below ``poolserve.runtime`` and
``poolserve.server`` are the implementation and may change.
"""

from poolserve.proto.config_pb2 import (
    ConfigProto,
    GPUOptions,
    GraphOptions,
    OptimizerOptions,
    RewriterConfig,
    RunMetadata,
    RunOptions,
)
from poolserve.proto.graph_pb2 import GraphDef
from poolserve.runtime import errors
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import OpError
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.run_handler import RunHandlerPool, configure_pool, get_pool
from poolserve.runtime.saved_model import SavedModel, load_saved_model
from poolserve.runtime.session import InteractiveSession, RunFuture, Session, get_default_session
from poolserve.runtime.targets import register_session_factory
from poolserve.runtime.timeline import Timeline

__version__ = "0.1.0"

__all__ = [
    "ConfigProto",
    "GPUOptions",
    "Graph",
    "GraphBuilder",
    "GraphDef",
    "GraphOptions",
    "InteractiveSession",
    "OpError",
    "OptimizerOptions",
    "RewriterConfig",
    "RunFuture",
    "RunHandlerPool",
    "RunMetadata",
    "RunOptions",
    "SavedModel",
    "Session",
    "Timeline",
    "configure_pool",
    "errors",
    "get_default_session",
    "get_pool",
    "load_graph_def",
    "load_saved_model",
    "register_session_factory",
]
