"""runtime/targets.py: TensorFlow's (target, graph, config) arguments and the session factories by scheme
(the remote one is tested against a server in test_remote.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError, NotFoundError
from poolserve.runtime.session import Session


def _double_graph() -> tuple[Any, str, str]:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None])
    y = b.mul(x, b.constant(2.0), name="y")
    return b.graph_def, x, y


def test_session_takes_tensorflows_argument_order_and_the_graph_first():
    graph, x, y = _double_graph()
    config = config_pb2.ConfigProto(inter_op_parallelism_threads=1)
    feed = {x: np.asarray([1.0, 2.0], np.float32)}
    for s in (
        Session(graph, config),
        Session("", graph, config),
        Session(graph=graph, config=config),
        Session(target="", graph=graph),
    ):
        with s:
            assert s.run(y, feed).tolist() == [2.0, 4.0] and s.target == ""
    with pytest.raises(InvalidArgumentError, match="graph must be a GraphDef"):
        Session("", 42)


def test_a_registered_factory_serves_its_scheme_and_unknown_ones_are_refused():
    from poolserve.runtime import targets as session_module

    made: list[str] = []

    class Recording(Session):
        def __init__(self, target: Any = None, graph: Any = None, config: Any = None, **kw: Any) -> None:
            made.append(target)
            super().__init__(graph, config)

    session_module.register_session_factory("test", Recording)
    try:
        graph, x, y = _double_graph()
        with Session("test://anywhere", graph) as s:
            assert isinstance(s, Recording) and made == ["test://anywhere"]
            assert s.run(y, {x: [3.0]}).tolist() == [6.0]
    finally:
        del session_module._factories["test"]
    # TensorFlow 2.21: tf.compat.v1.Session("bogus") raises NotFoundError "No session factory registered
    # for the given session options: ..."
    with pytest.raises(NotFoundError, match=r"known targets are '' \(in process\), 'http://'"):
        Session("test://anywhere")
    with pytest.raises(InvalidArgumentError, match="scheme"):
        session_module.register_session_factory("a://b", Session)
