"""tensorflow-serving-api's own stubs against a running poolserve's gRPC port (dev only, by hand).

Run with the TensorFlow environment (tensorflow-serving-api installed there, or beside it with
``pip install --no-deps --target DIR tensorflow-serving-api`` and ``PYTHONPATH=DIR``), against
``poolserve serve`` on the embedded default config::

    /opt/tfenv/bin/python tools/check_tfserving_grpc.py 127.0.0.1:8501

Predict (by version and by the label ``stable``), GetModelMetadata, GetModelStatus, and three errors
(wrong dtype, unknown model, Classify), each printed.
"""

import sys

import grpc
import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

ch = grpc.insecure_channel(sys.argv[1])
stub = prediction_service_pb2_grpc.PredictionServiceStub(ch)
x = np.random.default_rng(0).random((4, 64), dtype=np.float32)
req = predict_pb2.PredictRequest()
req.model_spec.name = "mlp"
req.model_spec.signature_name = "serving_default"
req.inputs["input"].CopyFrom(tf.make_tensor_proto(x))
resp = stub.Predict(req, timeout=10)
y = tf.make_ndarray(resp.outputs["probabilities"])
print(
    "Predict:",
    y.shape,
    y.dtype,
    "rows sum to 1:",
    np.allclose(y.sum(1), 1),
    "spec:",
    resp.model_spec.name,
    resp.model_spec.version.value,
)
req.model_spec.version_label = "stable"
print(
    "Predict by label 'stable':", np.allclose(tf.make_ndarray(stub.Predict(req).outputs["probabilities"]), y)
)
meta = stub.GetModelMetadata(
    get_model_metadata_pb2.GetModelMetadataRequest(
        model_spec={"name": "mlp"}, metadata_field=["signature_def"]
    )
)
sdm = get_model_metadata_pb2.SignatureDefMap()
meta.metadata["signature_def"].Unpack(sdm)
sd = sdm.signature_def["serving_default"]
print(
    "GetModelMetadata:",
    sd.method_name,
    dict(sd.inputs)["input"].name,
    tf.DType(sd.inputs["input"].dtype).name,
)
status = model_service_pb2_grpc.ModelServiceStub(ch).GetModelStatus(
    get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "mlp"})
)
print(
    "GetModelStatus:",
    [
        (s.version, get_model_status_pb2.ModelVersionStatus.State.Name(s.state))
        for s in status.model_version_status
    ],
)
for name, call in [
    (
        "wrong dtype",
        lambda: stub.Predict(
            predict_pb2.PredictRequest(
                model_spec={"name": "mlp"}, inputs={"input": tf.make_tensor_proto(x.astype(np.float64))}
            )
        ),
    ),
    (
        "unknown model",
        lambda: stub.Predict(
            predict_pb2.PredictRequest(model_spec={"name": "nope"}, inputs={"input": tf.make_tensor_proto(x)})
        ),
    ),
    ("Classify", lambda: stub.Classify(classification_pb2.ClassificationRequest(model_spec={"name": "mlp"}))),
]:
    try:
        call()
        print(name, "answered OK?!")
    except grpc.RpcError as e:
        print(f"{name}: {e.code().name}: {e.details()}")
