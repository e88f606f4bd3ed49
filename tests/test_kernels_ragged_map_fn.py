"""RaggedTensorToVariant and RaggedTensorFromVariant (runtime/kernels/ragged_ops.py): ``tf.map_fn`` over
ragged tensors, frozen by TensorFlow 2.21, run end to end against what TensorFlow computed
(tools/make_ragged_map_fixture.py): ragged rows mapped to ragged rows and to numbers, a ragged rank 2 input
with int32 splits, values of rank 2; rows of every length, empty rows, no rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support import run_op

from poolserve import GraphBuilder, Session
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.graph import load_graph_def

FOLDER = Path(__file__).parent / "fixtures" / "kernels"


def test_map_fn_over_ragged_tensors_matches_tensorflow() -> None:
    with np.load(FOLDER / "ragged_map_fn.npz") as data:
        arrays = {k: data[k] for k in data.files}
    sets = sorted({k.split("/")[0] for k in arrays})
    assert len(sets) == 5
    with Session(load_graph_def(FOLDER / "ragged_map_fn.pb")) as sess:
        for k in sets:
            feeds = {key.split("/", 2)[2]: v for key, v in arrays.items() if key.startswith(f"{k}/in/")}
            outs = {key.split("/", 2)[2]: v for key, v in arrays.items() if key.startswith(f"{k}/out/")}
            fetches = [name.split("=")[1] for name in outs]
            got = sess.run(fetches, feeds)
            for (name, want), g in zip(outs.items(), got, strict=True):
                g = np.asarray(g)
                assert (g.dtype, g.shape) == (want.dtype, want.shape), f"set {k} {name}"
                np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6, err_msg=f"set {k} {name}")


def test_refuses_bad_splits_and_mismatched_ranks() -> None:
    values = np.arange(5, dtype=np.float32)
    attrs = {"RAGGED_RANK": 1, "Tvalues": np.float32, "Tsplits": np.int64, "batched_input": True}
    # TensorFlow 2.21's messages
    with pytest.raises(InvalidArgumentError, match="must be the number of ragged values\\(5\\) but is 9"):
        run_op("RaggedTensorToVariant", [np.array([0, 2, 9], np.int64), values], attrs)
    with pytest.raises(InvalidArgumentError, match="first element of ragged splits  must be 0 but is 1"):
        run_op("RaggedTensorToVariant", [np.array([1, 2, 5], np.int64), values], attrs)
    b = GraphBuilder()
    splits = b.constant(np.array([0, 2, 5], np.int64), dtype=np.int64)
    encoded = b.op("RaggedTensorToVariant", [splits, b.constant(values, dtype=np.float32)], attrs)
    for rank, tvalues, message in (
        (1, np.float32, "output_ragged_rank must be equal to input_ragged_rank"),
        (0, np.int32, "Expected values Tensor dtype: int32, found: float"),
    ):
        back = {"input_ragged_rank": rank, "output_ragged_rank": 1, "Tvalues": tvalues, "Tsplits": np.int64}
        b.op("RaggedTensorFromVariant", [encoded], back, name=f"back{rank}", num_outputs=2)
        with Session(b.graph_def) as sess, pytest.raises(InvalidArgumentError, match=message):
            sess.run(f"back{rank}:1")
