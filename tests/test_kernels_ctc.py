"""CTC greedy decoding. Expected values are TensorFlow 2.21's; tools/op_fuzz_audio.py ("ctc") compares the
kernel with TensorFlow on random cases."""

from __future__ import annotations

import numpy as np
import pytest
from support import run_op

from poolserve.runtime.errors import FailedPreconditionError, InvalidArgumentError

X = np.random.default_rng(0).normal(size=(5, 2, 4)).astype(np.float32)


def test_greedy_decoding_drops_blanks_and_merges_repeats():
    indices, values, shape, log_prob = run_op(
        "CTCGreedyDecoder", [X, np.array([5, 3], np.int32)], {"merge_repeated": True}, num_outputs=4
    )
    # TensorFlow 2.21: the best classes are [2, 3, 3, 0, 1] and [2, 1, 1] (3 is the blank)
    np.testing.assert_array_equal(indices, [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1]])
    np.testing.assert_array_equal(values, [2, 0, 1, 2, 1])
    np.testing.assert_array_equal(shape, [2, 3])
    np.testing.assert_allclose(log_prob.ravel(), [-3.1685779, -2.4516718], rtol=1e-6)
    # TensorFlow 2.21 answers these with FailedPrecondition and InvalidArgument errors
    with pytest.raises(FailedPreconditionError, match="len\\(sequence_length\\) != batch_size"):
        run_op("CTCGreedyDecoder", [X, np.array([5], np.int32)], num_outputs=4)
    with pytest.raises(InvalidArgumentError, match="inputs must not be empty"):
        run_op("CTCGreedyDecoder", [X[:0], np.array([0, 0], np.int32)], num_outputs=4)
