"""The models a server serves: each a ``Session`` and its ``Signature``s, loaded from the config.

A model's path is a GraphDef (``.pb``/``.pbtxt``: one signature, its Placeholders in and terminal nodes
out, or the configured aliases) or a SavedModel (a version folder, or a base path whose highest numbered
version is served, or the configured ``version``): every SignatureDef is served. ``signature`` is the one
a request gets unless it names another (TF Serving's ``signature_name``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from poolserve.proto import config_pb2
from poolserve.runtime.errors import InvalidArgumentError, OpError
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.saved_model import DEFAULT_SIGNATURE, is_saved_model_path, load_saved_model
from poolserve.runtime.session import Session
from poolserve.runtime.signature import Signature, TensorSpec
from poolserve.runtime.types import Array
from poolserve.server.batching import Batcher
from poolserve.server.config import BatchingSettings, Config, ModelConfig
from poolserve.server.statistics import ModelStats

log = logging.getLogger("poolserve")


@dataclass
class ModelEntry:
    """A loaded model: its session, its signatures by name and the one requests get by default."""

    name: str
    version: int
    session: Session
    signature: Signature
    path: str = ""
    signatures: dict[str, Signature] = field(default_factory=dict)
    signature_name: str = DEFAULT_SIGNATURE
    batcher: Batcher | None = None
    # SavedModels: each signature's method_name (tensorflow/serving/predict, .../classify, .../regress)
    methods: dict[str, str] = field(default_factory=dict)
    # what its requests and steps cost (Triton's statistics); shared by its views through other signatures
    stats: ModelStats = field(default_factory=ModelStats)

    def __post_init__(self) -> None:
        if not self.signatures:
            self.signatures = {self.signature_name: self.signature}

    def for_signature(self, name: str | None) -> ModelEntry:
        """This model seen through another of its signatures (None: the default one); InvalidArgumentError
        with TF Serving's message, listing the signatures, when it has no such signature."""
        if name is None or name == self.signature_name:
            return self
        signature = self.signatures.get(name)
        if signature is None:
            raise InvalidArgumentError(
                f'Serving signature name: "{name}" not found in signature def '
                f"(the model's signatures: {', '.join(sorted(self.signatures))})"
            )
        return dataclasses.replace(self, signature=signature, signature_name=name)

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
    try:
        signature.check_runnable()  # refused at start-up, not at its first request
    except OpError as e:
        raise type(e)(f"model '{name}': {e.message}", e.node_name) from None
    return ModelEntry(name, version, session, signature, path)


def load_model(mc: ModelConfig, config: Config) -> ModelEntry:
    """Loads a configured model into a Session, with its batcher if it batches. Errors name the model."""
    entry = _load(mc, config)
    if mc.batching is not None:
        entry.batcher = make_batcher(entry, mc.batching)
    return entry


def _load(mc: ModelConfig, config: Config) -> ModelEntry:
    proto = mc.config_proto()
    if config.runtime.inter_op_threads and not proto.inter_op_parallelism_threads:
        proto.inter_op_parallelism_threads = config.runtime.inter_op_threads
    if config.runtime.intra_op_threads and not proto.intra_op_parallelism_threads:
        proto.intra_op_parallelism_threads = config.runtime.intra_op_threads
    # a folder can only be a SavedModel: say what it lacks rather than "Is a directory"
    if mc.path.is_dir() or is_saved_model_path(mc.path):
        return _load_saved_model(mc, config, proto)
    try:
        graph_def = load_graph_def(mc.path)
        if not graph_def.node:
            # a zero-byte file parses as an empty GraphDef (a file being copied in is empty for a moment):
            # served, it would have no inputs or outputs and refuse every request
            raise InvalidArgumentError(
                f"{mc.path} is a GraphDef with no nodes (an empty file, or one still being copied in?)"
            )
        graph = Graph(graph_def)
    except OpError as e:
        raise type(e)(f"model '{mc.name}': {e.message}", e.node_name) from None
    session = Session(graph, proto, memory_limit_bytes=config.runtime.memory_limit_bytes)
    return make_entry(mc.name, mc.version, session, mc.inputs, mc.outputs, str(mc.path))


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
        shapes={s.tensor: s.shape for sig in entry.signatures.values() for s in sig.outputs},
    )


def _load_saved_model(mc: ModelConfig, config: Config, proto: config_pb2.ConfigProto) -> ModelEntry:
    # A version set in the config picks that version folder of a base path; otherwise the highest is
    # served and the folder's number is the model's version (TF Serving's default policy).
    explicit = mc.version if "version" in mc.model_fields_set else None
    try:
        if mc.inputs or mc.outputs:
            raise InvalidArgumentError(
                "inputs/outputs aliases apply to GraphDefs; a SavedModel's signatures name its tensors"
            )
        saved = load_saved_model(
            mc.path, mc.tags, proto, version=explicit, memory_limit_bytes=config.runtime.memory_limit_bytes
        )
    except OpError as e:
        raise type(e)(f"model '{mc.name}': {e.message}", e.node_name) from None
    name = mc.signature_name or saved.default_signature
    if name not in saved.signatures:
        saved.close()
        have = ", ".join(sorted(saved.signatures)) or "(none)"
        raise InvalidArgumentError(f"model '{mc.name}': no signature '{name}'; its signatures: {have}")
    for sig_name, sig in sorted(saved.signatures.items()):
        try:
            sig.check_runnable()
        except OpError as e:
            if sig_name == name:  # the one served by default: refused at start-up
                saved.close()
                raise type(e)(f"model '{mc.name}': signature '{name}': {e.message}", e.node_name) from None
            # TF Serving serves the other signatures; a request for this one gets the error (501)
            log.warning("model '%s': signature '%s' cannot run here: %s", mc.name, sig_name, e.message)
    version = saved.version if saved.version is not None else mc.version
    methods = {k: sd.method_name for k, sd in saved.meta_graph.signature_def.items() if k in saved.signatures}
    return ModelEntry(
        mc.name,
        version,
        saved.session,
        saved.signatures[name],
        str(saved.path),
        dict(saved.signatures),
        name,
        methods=methods,
    )


__all__ = ["ModelEntry", "load_model", "make_entry"]
