"""Writes ``keras.applications`` models as benchmark fixtures (dev only; run with TensorFlow's Python).

    /opt/tfenv/bin/python tools/export_keras_fixtures.py DIR EfficientNetB0 NASNetMobile ...

Each model is built as ``tools/check_keras_applications.py`` builds it (default settings, ``weights=None``,
its default input size, batch 1), frozen, and written as ``DIR/<name>.pb`` with ``DIR/<name>.npz`` holding a
random image (``in:<input tensor>``) and TensorFlow's output for it (``out:<output tensor>``), the layout of
``tests/fixtures/models/realistic``. Then, for instance::

    python -m benchmarks.bench_latency --fixtures DIR --tf-python /opt/tfenv/bin/python --intra-op-threads 1

The files are tens of megabytes each, so they are not committed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import check_keras_applications as keras_apps


def export(name: str, folder: Path) -> str:
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    model = keras_apps.build(name)
    shape = keras_apps.input_shape(model)
    spec = tf.TensorSpec([1, *shape], tf.float32, name="input")

    @tf.function(input_signature=[spec])
    def serve(x: Any) -> Any:
        return model(x, training=False)

    frozen = convert_variables_to_constants_v2(serve.get_concrete_function())
    graph_def = frozen.graph.as_graph_def()
    (folder / f"{name}.pb").write_bytes(graph_def.SerializeToString())
    image = np.random.default_rng(7).uniform(0, 255, (1, *shape)).astype(np.float32)
    inp, out = frozen.inputs[0].name, frozen.outputs[0].name
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        value = sess.run(out, {inp: image})
    np.savez(folder / f"{name}.npz", **{f"in:{inp}": image, f"out:{out}": value})
    return f"{name}: {len(graph_def.node)} nodes, {inp} -> {out}"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(argv[0])
    folder.mkdir(parents=True, exist_ok=True)
    for name in argv[1:]:
        print(export(name, folder), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
