"""StatelessShuffle and seeded RandomShuffle (runtime/kernels/random_ops.py) against what TensorFlow 2.21
computed (tools/make_op_case_fixtures.py, group "shuffle"): the same permutation from the same key and
counter (or seeds, for RandomShuffle's first run), vectors, matrices moved by rows, strings, one row, both
Philox algorithm ids, and an algorithm id TensorFlow refuses."""

from __future__ import annotations

import numpy as np
import pytest
from support import OpCases

from poolserve import Session
from poolserve.runtime.builder import GraphBuilder

CASES = OpCases("shuffle")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=0)


def test_fixture_covers_results_and_refusals() -> None:
    errors = {name for name, m in CASES.meta.items() if "error" in m}
    assert errors == {"stateless_bad_alg"}


def test_random_shuffle_runs_continue_the_stream_as_tensorflow() -> None:
    """Each run of a seeded RandomShuffle moves the node's stream on by the Philox calls of its n - 1 draws:
    TensorFlow 2.21's first three runs of tf.raw_ops.RandomShuffle(value=range(10), seed=7, seed2=11)."""
    b = GraphBuilder()
    b.op("RandomShuffle", [b.constant(np.arange(10, dtype=np.int64))], {"seed": 7, "seed2": 11}, name="rs")
    want = [[3, 9, 5, 6, 1, 7, 0, 4, 8, 2], [9, 6, 0, 4, 8, 1, 3, 7, 5, 2], [8, 3, 2, 9, 7, 0, 6, 4, 5, 1]]
    with Session(b.graph_def) as s:
        assert [s.run("rs:0").tolist() for _ in range(3)] == want
