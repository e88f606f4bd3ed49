"""Generates the optional-op fixtures under ``tests/fixtures/control_flow`` (dev only), for
tests/test_kernels_optional.py.

    /opt/tfenv/bin/python tools/make_optional_fixtures.py

Writes:

- ``tf1_bn_cfv2/``: a TF1 SavedModel (``tf.compat.v1`` graph and Session, control flow v2 on, as a TF1 model
  built under TensorFlow 2 is): conv -> ``tf.compat.v1.layers.batch_normalization(training=is_training)`` ->
  relu -> mean -> dense, ``is_training`` a ``placeholder_with_default(False)``. cond_v2 puts the batch norm in
  an ``If`` whose branches also return their intermediates as ``OptionalFromValue`` (the true branch, a
  ``FusedBatchNormV3`` in training mode) and ``OptionalFromValue`` or ``OptionalNone``; the signature takes
  ``x`` and ``is_training``. ``tf1_bn_cfv2.pb``: the same graph frozen by
  ``tf.compat.v1.graph_util.convert_variables_to_constants``;
- ``optional.pb``: a ``tf.function`` whose ``tf.cond`` returns a ``tf.experimental.Optional`` (from a value
  in one branch, empty in the other), read by ``OptionalHasValue`` and, in another cond, ``OptionalGetValue``.

Each ``<name>.npz`` holds cases ``<case>/in/<tensor>`` and ``<case>/out/<tensor>`` (tensor names for the
graphs, signature keys for the SavedModel) with what TensorFlow computed, for both branches.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# tf.compat.v1.layers is tf_keras (Keras 2): TensorFlow 2.21 refuses it under Keras 3
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tensorflow as tf

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "control_flow"
SEED = 14
tf1 = tf.compat.v1


def save_cases(name: str, cases: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    arrays: dict[str, np.ndarray] = {}
    for case, (ins, outs) in cases.items():
        arrays.update({f"{case}/in/{k}": np.asarray(v) for k, v in ins.items()})
        arrays.update({f"{case}/out/{k}": np.asarray(v) for k, v in outs.items()})
    np.savez(OUT_DIR / f"{name}.npz", **arrays)


def make_tf1_batch_norm(rng: np.random.Generator) -> None:
    tf1.enable_control_flow_v2()
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 6, 6, 3], name="x")
        is_training = tf1.placeholder_with_default(False, [], name="is_training")
        h = tf1.layers.conv2d(x, 4, 3, padding="same")
        h = tf1.layers.batch_normalization(h, training=is_training)
        h = tf.reduce_mean(tf.nn.relu(h), [1, 2])
        out = tf.identity(tf1.layers.dense(h, 2), name="out")
        ops = {op.type for op in graph.get_operations()}
        assert "If" in ops, sorted(ops)
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            for v in tf1.global_variables():  # moving statistics far from the batch's: the branches differ
                if "moving" in v.name or "gamma" in v.name or "beta" in v.name:
                    sess.run(v.assign(rng.uniform(0.5, 1.5, v.shape.as_list()).astype(np.float32)))
            xs = (rng.standard_normal((2, 6, 6, 3)) * 3 + 2).astype(np.float32)
            cases = {
                "inference": ({"x": xs}, {"out": sess.run(out, {x: xs})}),
                "training": (
                    {"x": xs, "is_training": np.bool_(True)},
                    {"out": sess.run(out, {x: xs, is_training: True})},
                ),
            }
            path = OUT_DIR / "tf1_bn_cfv2"
            shutil.rmtree(path, ignore_errors=True)
            builder = tf1.saved_model.Builder(str(path))
            signature = tf1.saved_model.predict_signature_def(
                {"x": x, "is_training": is_training}, {"out": out}
            )
            builder.add_meta_graph_and_variables(
                sess, ["serve"], signature_def_map={"serving_default": signature}
            )
            builder.save()
            frozen = tf1.graph_util.convert_variables_to_constants(sess, graph.as_graph_def(), ["out"])
    (OUT_DIR / "tf1_bn_cfv2.pb").write_bytes(frozen.SerializeToString(deterministic=True))
    # the frozen graph's inference case leaves is_training to its default; a signature takes every input
    tensor_cases = {
        case: ({f"{k}:0": v for k, v in ins.items()}, {f"{k}:0": v for k, v in outs.items()})
        for case, (ins, outs) in cases.items()
    }
    save_cases("tf1_bn_cfv2_frozen", tensor_cases)
    cases["inference"][0]["is_training"] = np.bool_(False)
    save_cases("tf1_bn_cfv2", cases)


def make_optional(rng: np.random.Generator) -> None:
    spec = (tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.int32))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.bool)])
    def optional(x: Any, p: Any) -> Any:
        opt = tf.cond(
            p,
            lambda: tf.experimental.Optional.from_value((x * 3.0, tf.size(x))),
            lambda: tf.experimental.Optional.empty(spec),
        )
        has = opt.has_value()
        value = tf.cond(has, lambda: opt.get_value()[0] + tf.cast(opt.get_value()[1], tf.float32), lambda: -x)
        return has, value

    concrete = optional.get_concrete_function()
    graph_def = concrete.graph.as_graph_def()
    ops = {n.op for n in graph_def.node} | {n.op for f in graph_def.library.function for n in f.node_def}
    assert {"OptionalFromValue", "OptionalNone", "OptionalHasValue", "OptionalGetValue"} <= ops, sorted(ops)
    (OUT_DIR / "optional.pb").write_bytes(graph_def.SerializeToString(deterministic=True))
    inputs = [t.name for t in concrete.inputs]
    outputs = [t.name for t in concrete.outputs]
    xs = rng.standard_normal(5).astype(np.float32)
    cases = {}
    for case, p in (("value", True), ("none", False)):
        values = [xs, np.bool_(p)]
        results = concrete(*[tf.constant(v) for v in values])
        cases[case] = (
            dict(zip(inputs, values, strict=True)),
            {t: r.numpy() for t, r in zip(outputs, results, strict=True)},
        )
    save_cases("optional", cases)


def main() -> None:
    rng = np.random.default_rng(SEED)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    make_tf1_batch_norm(rng)
    make_optional(rng)
    print(f"wrote tf1_bn_cfv2/, tf1_bn_cfv2.pb, optional.pb and their .npz under {OUT_DIR}")


if __name__ == "__main__":
    main()
