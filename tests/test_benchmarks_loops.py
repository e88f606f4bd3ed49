"""benchmarks/bench_loops.py's graphs (a 100-step Keras LSTM and a loop of two independent MatMuls, both v1
frames) compute what TensorFlow and numpy computed, on the caller's thread and on the inter-op pool. Nothing
is timed."""

from __future__ import annotations

import numpy as np

from benchmarks.bench_loops import FIXTURES, cases
from poolserve import Session, load_graph_def
from poolserve.proto.config_pb2 import RunOptions


def test_loop_benchmark_graphs_match_their_references() -> None:
    for name, (feeds, want, _) in cases().items():
        graph_def = load_graph_def(FIXTURES / f"{name}.pb")
        assert {"Enter", "Exit", "NextIteration", "LoopCond"} <= {n.op for n in graph_def.node}
        with Session(graph_def) as sess:
            for options in (None, RunOptions(inter_op_thread_pool=-1)):
                got = sess.run(list(want), feeds, options=options)
                for value, (tensor, expected) in zip(got, want.items(), strict=True):
                    np.testing.assert_allclose(
                        value, expected, rtol=1e-4, atol=1e-4, err_msg=f"{name} {tensor}"
                    )
