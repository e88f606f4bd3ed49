"""poolserve's runtime: TensorFlow GraphDefs on numpy kernels.

Layers, in processing order: ``tensor`` (TensorProto <-> numpy) -> ``graph`` (parse, validate, prune) ->
``kernels`` -> ``evaluate`` (sequential reference) -> executor and session (next).
"""

from runtime.builder import GraphBuilder
from runtime.errors import OpError
from runtime.graph import Graph, load_graph_def

__all__ = ["Graph", "GraphBuilder", "OpError", "load_graph_def"]
