"""Session targets: TensorFlow's ``(target, graph, config)`` arguments and the session factories by target
scheme (``""`` in process, ``http(s)://`` a poolserve server, others as registered)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from poolserve.proto import config_pb2, graph_pb2
from poolserve.runtime.errors import InvalidArgumentError, NotFoundError
from poolserve.runtime.graph import Graph

if TYPE_CHECKING:
    from poolserve.runtime.session import Session


@dataclasses.dataclass(frozen=True)
class DeviceAttributes:
    """A device a session runs on, as ``Session.list_devices()`` reports it (TensorFlow's fields)."""

    name: str
    device_type: str
    memory_limit_bytes: int
    incarnation: int


GraphArg = graph_pb2.GraphDef | Graph | None


def split_args(target: Any, graph: Any, config: Any) -> tuple[str, GraphArg, config_pb2.ConfigProto | None]:
    """TensorFlow's ``(target, graph, config)`` from a call made either way: a graph first (poolserve's own
    ``Session(graph_def, config)``) still means the graph."""
    if isinstance(target, (graph_pb2.GraphDef, Graph)):
        if isinstance(graph, config_pb2.ConfigProto):
            target, graph, config = "", target, graph
        else:
            target, graph = "", target
    if target is None:
        target = ""
    if not isinstance(target, str):
        raise InvalidArgumentError(f"A session target is a string such as 'http://host:port'; got {target!r}")
    return target, graph, config


_factories: dict[str, type[Session]] = {}
_BUILT_IN = frozenset({"http", "https"})  # RemoteSession, registered when first asked for


def register_session_factory(scheme: str, factory: type[Session]) -> None:
    """Makes ``Session(target)`` with a target ``scheme://...`` construct ``factory(target, graph,
    config)``, a Session subclass (as TensorFlow's ``SessionFactory::Register``). An empty target is the
    in-process session."""
    if not scheme or "://" in scheme:
        raise InvalidArgumentError(f"A session factory's scheme is a name such as 'http'; got {scheme!r}")
    _factories[scheme] = factory


def session_factory(target: str) -> type[Session]:
    """The class that serves ``target``; NotFoundError naming the known ones if none does (TensorFlow's
    ``SessionFactory::GetFactory`` answers NOT_FOUND "No session factory registered for the given session
    options")."""
    if not target:
        from poolserve.runtime.session import Session

        return Session
    scheme = target.split("://", 1)[0] if "://" in target else ""
    if scheme in _BUILT_IN and scheme not in _factories:
        import poolserve.runtime.remote  # noqa: F401  (registers RemoteSession; httpx only when used)
    factory = _factories.get(scheme)
    if factory is None:
        schemes = sorted(set(_factories) | _BUILT_IN)
        known = ", ".join(["'' (in process)", *(f"'{k}://'" for k in schemes)])
        raise NotFoundError(
            f"No session factory registered for the target '{target}': known targets are {known}"
        )
    return factory
