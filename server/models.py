"""The models a server serves: each a ``Session`` and its ``Signature``, loaded from the config."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from poolserve.runtime.errors import InvalidArgumentError, OpError
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.session import Session
from poolserve.runtime.signature import Signature, TensorSpec
from poolserve.runtime.types import Array
from poolserve.server.batching import Batcher
from poolserve.server.config import BatchingSettings, Config, ModelConfig


@dataclass
class ModelEntry:
    """A loaded model: its session and its public inputs and outputs."""

    name: str
    version: int
    session: Session
    signature: Signature
    path: str = ""
    batcher: Batcher | None = None

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self.signature.inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self.signature.outputs

    @property
    def graph(self) -> Graph:
        return self.session.graph

    def input_spec(self, name: str) -> TensorSpec:
        """The spec of a public input name, an alias, or any graph tensor; InvalidArgumentError if none."""
        try:
            return self.signature.input(name)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"Model '{self.name}' has {e.message}") from None

    def output_spec(self, name: str) -> TensorSpec:
        try:
            return self.signature.output(name)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"Model '{self.name}' has {e.message}") from None

    def feeds(self, named: Mapping[str, Array]) -> dict[str, Array]:
        """A request's inputs keyed by graph tensor (``node:port``)."""
        feeds: dict[str, Array] = {}
        for name, value in named.items():
            tensor = self.input_spec(name).tensor
            if tensor in feeds:
                raise InvalidArgumentError(f"Tensor '{tensor}' is fed twice (as '{name}' and another name)")
            feeds[tensor] = value
        return feeds

    def fetches(self, names: Sequence[str]) -> list[str]:
        return [self.output_spec(n).tensor for n in names]


def make_entry(
    name: str,
    version: int,
    session: Session,
    inputs: Mapping[str, str] | None = None,
    outputs: Mapping[str, str] | None = None,
    path: str = "",
) -> ModelEntry:
    """A model over a session; ``inputs``/``outputs`` (public name -> tensor) replace the graph's defaults."""
    try:
        signature = Signature.of(session.graph, inputs, outputs)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"model '{name}': {e.message}") from None
    return ModelEntry(name, version, session, signature, path)


def load_model(mc: ModelConfig, config: Config) -> ModelEntry:
    """Loads a configured model into a Session. Errors name the model."""
    try:
        graph = Graph(load_graph_def(mc.path))
    except OpError as e:
        raise type(e)(f"model '{mc.name}': {e.message}", e.node_name) from None
    proto = mc.config_proto()
    if config.runtime.inter_op_threads and not proto.inter_op_parallelism_threads:
        proto.inter_op_parallelism_threads = config.runtime.inter_op_threads
    if config.runtime.intra_op_threads and not proto.intra_op_parallelism_threads:
        proto.intra_op_parallelism_threads = config.runtime.intra_op_threads
    session = Session(graph, proto, memory_limit_bytes=config.runtime.memory_limit_bytes)
    entry = make_entry(mc.name, mc.version, session, mc.inputs, mc.outputs, str(mc.path))
    if mc.batching is not None:
        entry.batcher = make_batcher(entry, mc.batching)
    return entry


def make_batcher(entry: ModelEntry, settings: BatchingSettings) -> Batcher:
    """The model's batcher; InvalidArgumentError if an input has no batch dimension (dimension 0 of
    unknown size), as requests could not be concatenated."""
    for spec in entry.inputs:
        if spec.shape is not None and (len(spec.shape) == 0 or spec.shape[0] != -1):
            shape = "[" + ", ".join("?" if d < 0 else str(d) for d in spec.shape) + "]"
            raise InvalidArgumentError(
                f"model '{entry.name}': batching needs a batch dimension (dimension 0 of unknown size) on "
                f"every input; input '{spec.name}' has shape {shape}. Remove [models.batching] or export "
                "the model with a batch dimension"
            )
    return Batcher(
        entry.name,
        entry.session,
        settings.max_batch_size,
        settings.max_queue_delay_us,
        settings.preferred_batch_sizes,
        settings.max_concurrent_batches,
    )


__all__ = ["ModelEntry", "load_model", "make_entry"]
