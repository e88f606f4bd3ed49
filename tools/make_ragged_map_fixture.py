"""Generates ``tests/fixtures/kernels/ragged_map_fn.{pb,npz}`` (dev only): ``tf.map_fn`` over ragged tensors,
frozen, and what TensorFlow computed with it.

    /opt/tfenv/bin/python tools/make_ragged_map_fixture.py

One tf.function, frozen into a GraphDef (its While loops lowered to v1 control flow, as
``convert_variables_to_constants_v2`` writes them), maps four ragged inputs row by row: float rows to
ragged rows and to their sums (RaggedTensorToVariant with ``batched_input``, a TensorList of variants,
RaggedTensorFromVariant in the loop body and after it), a ragged rank 2 tensor with int32 splits to ragged
rows, and rows of 2-vectors (values of rank 2) to ragged rows. ``ragged_map_fn.npz`` holds, per input set
``<k>``, the feeds (``<k>/in/<placeholder>``) and TensorFlow's outputs (``<k>/out/<name>``): rows of every
length, empty rows, and no rows at all. Test: tests/test_kernels_ragged_map_fn.py.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "kernels"
SPEC = [
    tf.TensorSpec([None], tf.float32, name="values"),
    tf.TensorSpec([None], tf.int64, name="splits"),
    tf.TensorSpec([None], tf.int64, name="values2"),
    tf.TensorSpec([None], tf.int32, name="outer2"),
    tf.TensorSpec([None], tf.int32, name="inner2"),
    tf.TensorSpec([None, 2], tf.float32, name="pairs"),
    tf.TensorSpec([None], tf.int64, name="pair_splits"),
]


@tf.function(input_signature=SPEC)
def mapped(values, splits, values2, outer2, inner2, pairs, pair_splits):  # type: ignore[no-untyped-def]
    rt = tf.RaggedTensor.from_row_splits(values, splits)
    scaled = tf.map_fn(
        lambda r: r * 2.0 + tf.reduce_sum(r), rt, fn_output_signature=tf.RaggedTensorSpec([None], tf.float32)
    )
    sums = tf.map_fn(tf.reduce_sum, rt, fn_output_signature=tf.float32)
    rt2 = tf.RaggedTensor.from_nested_row_splits(values2, [outer2, inner2])
    spec2 = tf.RaggedTensorSpec([None, None], tf.int64, ragged_rank=1, row_splits_dtype=tf.int32)
    shifted = tf.map_fn(lambda r: r + tf.cast(r.nrows(), tf.int64), rt2, fn_output_signature=spec2)
    rt3 = tf.RaggedTensor.from_row_splits(pairs, pair_splits)
    firsts = tf.map_fn(
        lambda r: r[:, 0] - r[:, 1], rt3, fn_output_signature=tf.RaggedTensorSpec([None], tf.float32)
    )
    return {
        "scaled_values": scaled.flat_values,
        "scaled_splits": scaled.row_splits,
        "sums": sums,
        "shifted_values": shifted.flat_values,
        "shifted_outer": shifted.row_splits,
        "shifted_inner": shifted.values.row_splits,
        "firsts_values": firsts.flat_values,
        "firsts_splits": firsts.row_splits,
    }


def inputs(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
    def splits(n: int, dtype: type) -> np.ndarray:
        lengths = rng.integers(0, 4, n)
        return np.concatenate([[0], np.cumsum(lengths)]).astype(dtype)

    s = splits(rows, np.int64)
    outer = splits(rows, np.int32)
    inner = splits(int(outer[-1]), np.int32)
    ps = splits(rows, np.int64)
    return {
        "values": rng.normal(size=int(s[-1])).astype(np.float32),
        "splits": s,
        "values2": rng.integers(-50, 50, int(inner[-1])).astype(np.int64),
        "outer2": outer,
        "inner2": inner,
        "pairs": rng.normal(size=(int(ps[-1]), 2)).astype(np.float32),
        "pair_splits": ps,
    }


def main() -> None:
    function = mapped.get_concrete_function()
    frozen = convert_variables_to_constants_v2(function)
    graph_def = frozen.graph.as_graph_def()
    (OUT_DIR / "ragged_map_fn.pb").write_bytes(graph_def.SerializeToString(deterministic=True))
    feeds = [t.name for t in frozen.inputs]
    # a dict's outputs are flattened in the order of its sorted keys
    names = sorted(function.structured_outputs)
    fetches = {name: t.name for name, t in zip(names, frozen.outputs, strict=True)}
    rng = np.random.default_rng(41)
    arrays: dict[str, np.ndarray] = {}
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        for k, rows in enumerate([3, 1, 8, 20, 0]):
            feed = dict(zip(feeds, inputs(rng, rows).values(), strict=True))
            out = sess.run(fetches, feed)
            arrays |= {f"{k}/in/{name}": value for name, value in feed.items()}
            arrays |= {f"{k}/out/{name}={fetches[name]}": value for name, value in out.items()}
    np.savez_compressed(OUT_DIR / "ragged_map_fn.npz", **arrays)
    print(f"{len(graph_def.node)} nodes; {sorted({n.op for n in graph_def.node if 'Ragged' in n.op})}")


if __name__ == "__main__":
    main()
