"""SavedModels, loaded as TensorFlow's C++ loader (and so TF Serving) loads them, without TensorFlow.

``load_saved_model(path)`` takes a SavedModel folder (``saved_model.pb`` and ``variables/``) or a base path
of numbered version folders (the highest is served, as TF Serving's default policy does), and:

1. reads the ``SavedModel`` proto and picks the MetaGraphDef whose tag set is ``tags``;
2. puts back the attrs saved without their default values, keeps only what the signatures, the restore op
   and the init op need (the saver's SaveV2 and friends need no kernel), and inlines the function calls of
   TF2 exports (``runtime.functions``); the library stays when If/While nodes run functions from it;
3. makes a ``Session`` and runs the saver's restore op with the checkpoint prefix fed to its filename
   tensor (``RestoreV2`` reads the tensor bundle; VariableV2 and resource variables get their values),
   then the init op (TF2's ``__saved_model_init_op``, TF1's main op or legacy init op), asset paths fed;
4. exposes every SignatureDef as a ``Signature`` whose public names are the signature's keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import message, text_format

from poolserve.proto import config_pb2, graph_pb2, meta_graph_pb2, saved_model_pb2, saver_pb2
from poolserve.runtime.errors import InvalidArgumentError, NotFoundError, OpError, UnimplementedError
from poolserve.runtime.functions import (
    FunctionLibrary,
    add_default_attrs,
    inline_functions,
    prune_graph_def,
    uses_functions,
)
from poolserve.runtime.graph import Graph
from poolserve.runtime.node import parse_tensor_name
from poolserve.runtime.run_handler import RunHandlerPool
from poolserve.runtime.session import Session
from poolserve.runtime.signature import Signature, TensorSpec
from poolserve.runtime.tensor import shape_from_proto
from poolserve.runtime.types import Array

SAVED_MODEL_PB = "saved_model.pb"
SAVED_MODEL_PBTXT = "saved_model.pbtxt"
SERVE_TAG = "serve"
DEFAULT_SIGNATURE = "serving_default"
INIT_OP_SIGNATURE = "__saved_model_init_op"
MAIN_OP_COLLECTIONS = ("saved_model_main_op", "legacy_init_op")
_VARIABLE_OPS = frozenset({"VariableV2", "Variable", "VarHandleOp"})


@dataclass
class SavedModel:
    """A loaded SavedModel: its session (variables restored) and its signatures by name."""

    path: Path  # the version folder loaded
    version: int | None  # its number when the folder is numbered
    tags: tuple[str, ...]
    session: Session
    signatures: dict[str, Signature]
    meta_graph: meta_graph_pb2.MetaGraphDef = field(repr=False)

    @property
    def default_signature(self) -> str:
        """``serving_default`` when present, else the only (or first by name) signature."""
        if DEFAULT_SIGNATURE in self.signatures or not self.signatures:
            return DEFAULT_SIGNATURE
        return min(self.signatures)

    def signature(self, name: str | None = None) -> Signature:
        """A signature by name (the default one for None); InvalidArgumentError listing them otherwise."""
        key = name or self.default_signature
        try:
            return self.signatures[key]
        except KeyError:
            have = ", ".join(sorted(self.signatures)) or "(none)"
            raise InvalidArgumentError(
                f'Serving signature name: "{key}" not found in signature def (the model\'s signatures: '
                f"{have})"
            ) from None

    def run(
        self,
        inputs: Mapping[str, Any],
        signature_name: str | None = None,
        options: config_pb2.RunOptions | None = None,
        run_metadata: config_pb2.RunMetadata | None = None,
    ) -> dict[str, Array]:
        """Runs one signature: inputs by the signature's keys -> every output by key."""
        sig = self.signature(signature_name)
        feeds = {sig.input(k).tensor: v for k, v in inputs.items()}
        missing = sorted(s.name for s in sig.inputs if s.tensor not in feeds)
        if missing:
            raise InvalidArgumentError(f"signature inputs not given: {', '.join(missing)}")
        values = self.session.run([s.tensor for s in sig.outputs], feeds, options, run_metadata)
        return {s.name: v for s, v in zip(sig.outputs, values, strict=True)}

    def close(self) -> None:
        self.session.close()


# --- finding and reading -----------------------------------------------------------------------------------


def _has_saved_model(folder: Path) -> bool:
    return (folder / SAVED_MODEL_PB).is_file() or (folder / SAVED_MODEL_PBTXT).is_file()


def _folder(path: Path) -> Path:
    """A path naming saved_model.pb itself stands for its folder."""
    return path.parent if path.name in (SAVED_MODEL_PB, SAVED_MODEL_PBTXT) and path.is_file() else path


def is_saved_model_path(path: str | Path) -> bool:
    """A SavedModel folder (or its saved_model.pb), or a base path with a numbered version folder."""
    path = _folder(Path(path))
    if not path.is_dir():
        return False
    return _has_saved_model(path) or bool(versions(path))


def versions(base: Path) -> dict[int, Path]:
    """The numbered version folders holding a SavedModel under a base path, as TF Serving finds them."""
    try:
        children = list(base.iterdir())
    except OSError:
        return {}
    return {int(d.name): d for d in children if d.name.isdigit() and d.is_dir() and _has_saved_model(d)}


def resolve_version(path: str | Path, version: int | None = None) -> tuple[Path, int | None]:
    """(export folder, version) for a SavedModel folder or a base path (``version`` or the highest)."""
    path = _folder(Path(path))
    if not path.is_dir():
        raise NotFoundError(f"SavedModel path not found or not a folder: {path}")
    if _has_saved_model(path):
        number = int(path.name) if path.name.isdigit() else None
        if version is not None and number is not None and number != version:
            raise InvalidArgumentError(f"{path} is version {number}, not the version {version} asked for")
        return path, number if number is not None else version
    found = versions(path)
    if not found:
        raise NotFoundError(
            f"{path} holds no {SAVED_MODEL_PB} and no numbered version folder with one (a SavedModel is "
            f"<base>/<version>/{SAVED_MODEL_PB} with variables/ beside it)"
        )
    if version is None:
        version = max(found)
    if version not in found:
        have = ", ".join(str(v) for v in sorted(found))
        raise NotFoundError(f"{path} has no version {version}; its versions: {have}")
    return found[version], version


def read_saved_model(export_dir: Path) -> saved_model_pb2.SavedModel:
    """Parses ``saved_model.pb`` (or ``.pbtxt``); errors name the file."""
    binary = export_dir / SAVED_MODEL_PB
    path = binary if binary.is_file() else export_dir / SAVED_MODEL_PBTXT
    proto = saved_model_pb2.SavedModel()
    try:
        data = path.read_bytes()
        if path is binary:
            proto.ParseFromString(data)
        else:
            text_format.Parse(data.decode("utf-8"), proto, allow_unknown_field=True)
    except FileNotFoundError:
        raise NotFoundError(f"SavedModel file not found: {path}") from None
    except OSError as e:
        raise InvalidArgumentError(f"cannot read SavedModel file {path}: {e.strerror}") from None
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"{path} is not a valid SavedModel: {e}") from None
    if not proto.meta_graphs:
        raise InvalidArgumentError(f"{path} is not a valid SavedModel: it has no MetaGraphDef")
    return proto


def select_meta_graph(
    proto: saved_model_pb2.SavedModel, tags: Iterable[str], where: Path
) -> meta_graph_pb2.MetaGraphDef:
    """The MetaGraphDef whose tag set is exactly ``tags`` (TensorFlow's rule); NotFoundError listing the
    tag sets the file has otherwise."""
    want = set(tags)
    for mg in proto.meta_graphs:
        if set(mg.meta_info_def.tags) == want:
            return mg
    have = "; ".join("{" + ", ".join(sorted(mg.meta_info_def.tags)) + "}" for mg in proto.meta_graphs)
    raise NotFoundError(
        f"{where / SAVED_MODEL_PB}: no MetaGraphDef with tags {{{', '.join(sorted(want))}}}; the tag sets "
        f"present: {have}"
    )


# --- signatures and the ops to run at load ----------------------------------------------------------------


def _tensor_name(info: meta_graph_pb2.TensorInfo, where: str) -> str:
    if info.WhichOneof("encoding") != "name":
        kind = info.WhichOneof("encoding") or "composite"
        raise UnimplementedError(f"{where} is a {kind} tensor; only dense tensors are supported")
    node, port = parse_tensor_name(info.name)
    return f"{node}:{port}"


def _specs(infos: Mapping[str, meta_graph_pb2.TensorInfo], where: str) -> tuple[TensorSpec, ...]:
    return tuple(
        TensorSpec(
            key,
            _tensor_name(infos[key], f"{where} '{key}'"),
            int(infos[key].dtype),
            shape_from_proto(infos[key].tensor_shape),
        )
        for key in sorted(infos)
    )


def _init_op(mg: meta_graph_pb2.MetaGraphDef) -> str | None:
    init = mg.signature_def.get(INIT_OP_SIGNATURE)
    if init is not None and init.outputs:
        return parse_tensor_name(next(iter(init.outputs.values())).name)[0]
    for key in MAIN_OP_COLLECTIONS:
        col = mg.collection_def.get(key)
        if col is not None and col.node_list.value:
            return parse_tensor_name(col.node_list.value[0])[0]
    return None


def _asset_feeds(mg: meta_graph_pb2.MetaGraphDef, export_dir: Path) -> dict[str, Array]:
    feeds: dict[str, Array] = {}
    for asset in mg.asset_file_def:
        value = np.empty((), dtype=object)
        value[()] = str(export_dir / "assets" / asset.filename).encode()
        feeds[_tensor_name(asset.tensor_info, f"asset '{asset.filename}'")] = value
    return feeds


def _prepare_graph(mg: meta_graph_pb2.MetaGraphDef, keep: Sequence[str]) -> Graph:
    graph_def = graph_pb2.GraphDef()
    graph_def.CopyFrom(mg.graph_def)
    op_defs = {op.name: op for op in mg.meta_info_def.stripped_op_list.op}
    add_default_attrs(graph_def, op_defs)
    library = graph_def.library
    graph_def = inline_functions(prune_graph_def(graph_def, keep), op_defs)
    graph_def = prune_graph_def(graph_def, keep)
    if not uses_functions(graph_def):
        return Graph(graph_def)  # every call is inlined: the graph needs no library
    # If/While run their branch and loop functions from the library; the OpDefs resolve their output refs
    graph_def.library.CopyFrom(library)
    return Graph(graph_def, FunctionLibrary(library, op_defs))


def _scalar_string(text: str) -> Array:
    value = np.empty((), dtype=object)
    value[()] = text.encode()
    return value


def load_saved_model(
    path: str | Path,
    tags: Iterable[str] = (SERVE_TAG,),
    config: config_pb2.ConfigProto | None = None,
    *,
    version: int | None = None,
    memory_limit_bytes: int | None = None,
    run_handler_pool: RunHandlerPool | None = None,
) -> SavedModel:
    """Loads a SavedModel (a version folder, or a base path: ``version`` or the highest), restores its
    variables, and returns its session and signatures. Errors are OpErrors naming the file or node."""
    tags = tuple(tags)
    export_dir, number = resolve_version(path, version)
    mg = select_meta_graph(read_saved_model(export_dir), tags, export_dir)
    where = f"SavedModel {export_dir}"
    try:
        signatures = {
            name: (
                _specs(sd.inputs, f"signature '{name}' input"),
                _specs(sd.outputs, f"signature '{name}' output"),
            )
            for name, sd in sorted(mg.signature_def.items())
            if name != INIT_OP_SIGNATURE
        }
        saver = mg.saver_def if mg.HasField("saver_def") and mg.saver_def.restore_op_name else None
        init_op = _init_op(mg)
        keep = [s.tensor for ins, outs in signatures.values() for s in (*ins, *outs)]
        if saver is not None:
            keep += [saver.restore_op_name, saver.filename_tensor_name]
        if init_op is not None:
            keep.append(init_op)
        graph = _prepare_graph(mg, keep)
        session = Session(
            graph, config, memory_limit_bytes=memory_limit_bytes, run_handler_pool=run_handler_pool
        )
    except OpError as e:
        raise type(e)(f"{where}: {e.message}", e.node_name) from None
    try:
        _restore(session, graph, export_dir, saver)
        if init_op is not None:
            session.run(init_op, _asset_feeds(mg, export_dir))
        sigs = {name: _signature(graph, name, ins, outs) for name, (ins, outs) in signatures.items()}
    except OpError as e:
        session.close()
        raise type(e)(f"{where}: {e.message}", e.node_name) from None
    return SavedModel(export_dir, number, tags, session, sigs, mg)


def _restore(session: Session, graph: Graph, export_dir: Path, saver: saver_pb2.SaverDef | None) -> None:
    """Runs the saver's restore op on ``variables/variables``; a graph with variables needs the checkpoint."""
    prefix = export_dir / "variables" / "variables"
    index = Path(f"{prefix}.index")
    has_variables = any(n.op in _VARIABLE_OPS for n in graph.nodes.values())
    if not index.is_file():
        if has_variables:
            raise NotFoundError(f"the model has variables but their checkpoint index is missing: {index}")
        return
    if saver is None:
        if has_variables:
            raise InvalidArgumentError("the model has variables but no saver_def to restore them with")
        return
    session.run(saver.restore_op_name, {saver.filename_tensor_name: _scalar_string(str(prefix))})


def _signature(
    graph: Graph, name: str, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]
) -> Signature:
    for spec in (*inputs, *outputs):
        try:
            graph.tensor(spec.tensor)
        except OpError as e:
            raise InvalidArgumentError(f"signature '{name}' key '{spec.name}': {e.message}") from None
    return Signature(graph, inputs, outputs)


__all__ = [
    "DEFAULT_SIGNATURE",
    "SERVE_TAG",
    "SavedModel",
    "is_saved_model_path",
    "load_saved_model",
    "read_saved_model",
    "resolve_version",
    "select_meta_graph",
    "versions",
]
