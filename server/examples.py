"""Classify and Regress, as TF Serving runs them: tf.Examples fed to a classify or regress signature, its
outputs read back as classifications or regressions. One set of rules for the gRPC calls
(``server.tfserving_grpc``: Classify, Regress, MultiInference) and the REST ``:classify`` and ``:regress``
(``server.tfserving``); each protocol keeps only its envelope (how examples arrive, how results leave).

A signature serves a method when its ``method_name`` says so (TF Serving's rule; a GraphDef's only
signature is a predict one), takes the serialized Examples as its one input ``inputs``, and answers
``classes`` and/or ``scores`` (classify) or ``outputs`` (regress). A context Example's features go into
every example: its serialized bytes go before each example's, which protobuf merges, the example's own
features winning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.types import Array
from poolserve.server.models import ModelEntry
from poolserve.server.service import InferRequest

PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
INPUT = "inputs"  # the one input of a classify or regress signature: the serialized Examples


def method_of(entry: ModelEntry) -> str:
    """The method of the signature ``entry`` serves by."""
    return entry.methods.get(entry.signature_name, PREDICT_METHOD)


def serialized(examples: Sequence[bytes], context: bytes = b"") -> Array:
    """Serialized Examples as the string vector a signature's ``inputs`` takes, the context's bytes before
    each example's."""
    if not examples:
        raise InvalidArgumentError("Input is empty: the request has no examples")
    out = np.empty(len(examples), dtype=object)
    out[:] = [context + e for e in examples] if context else list(examples)
    return out


@dataclass(frozen=True)
class Method:
    """Classify or regress: the signature method it needs and the outputs it reads."""

    name: str  # tensorflow/serving/classify or .../regress
    kind: str  # "classification" or "regression", in errors

    def fetches(self, entry: ModelEntry) -> list[str]:
        """The outputs to fetch from the signature ``entry`` serves by, once it is found to be of this
        method with one input ``inputs``; InvalidArgumentError as TF Serving words it otherwise."""
        method = method_of(entry)
        if method != self.name:
            raise InvalidArgumentError(
                f"Expected {self.kind} signature method_name to be {self.name}. Was: {method} "
                f"(model '{entry.name}', signature '{entry.signature_name}')"
            )
        if [s.name for s in entry.inputs] != [INPUT]:
            raise InvalidArgumentError(
                f"Expected one input Tensor named '{INPUT}' in {self.kind} signature "
                f"'{entry.signature_name}', which has: {', '.join(s.name for s in entry.inputs)}"
            )
        outputs = {s.name for s in entry.outputs}
        if self.name == CLASSIFY_METHOD:
            names: list[str] = [n for n in ("classes", "scores") if n in outputs]
            if not names:
                raise InvalidArgumentError(
                    f"Expected classification signature '{entry.signature_name}' outputs to contain "
                    "'classes', 'scores' or both"
                )
            return names
        if "outputs" not in outputs:
            raise InvalidArgumentError(
                f"Expected one output Tensor named 'outputs' in regression signature '{entry.signature_name}'"
            )
        return ["outputs"]

    def request(
        self, entry: ModelEntry, signature_name: str, examples: Sequence[bytes], context: bytes = b""
    ) -> InferRequest:
        """The service's request running serialized ``examples`` (with a serialized ``context``) through
        the model's signature ``signature_name`` ("": the default one), once it is found to serve this
        method."""
        entry = entry.for_signature(signature_name or None)
        fetches = self.fetches(entry)
        return InferRequest(
            entry.name,
            {INPUT: serialized(examples, context)},
            fetches=fetches,
            version=entry.version,
            signature_name=entry.signature_name,
        )


CLASSIFY = Method(CLASSIFY_METHOD, "classification")
REGRESS = Method(REGRESS_METHOD, "regression")
METHODS = {m.name: m for m in (CLASSIFY, REGRESS)}


def classifications(classes: Any, scores: Any) -> list[list[tuple[str, np.float32]]]:
    """A classify signature's ``classes`` and ``scores`` (either may be None), [batch, classes] each, as
    each example's (label, score) pairs: a missing label is "", a missing score 0; scores as the float32
    the protocols carry."""
    for name, value in (("classes", classes), ("scores", scores)):
        if value is not None and np.ndim(value) != 2:
            raise InvalidArgumentError(
                f"Expected Tensor shape: [batch_size num_classes] but got {list(np.shape(value))} "
                f"for output '{name}'"
            )
    shape = np.shape(classes if classes is not None else scores)
    if classes is not None and scores is not None and np.shape(scores) != shape:
        raise InvalidArgumentError(
            f"Output 'classes' has shape {list(shape)} but 'scores' {list(np.shape(scores))}"
        )
    values = np.asarray(scores, np.float32) if scores is not None else np.zeros(shape, np.float32)
    return [
        [(_label(classes[i, j]) if classes is not None else "", values[i, j]) for j in range(shape[1])]
        for i in range(shape[0])
    ]


def _label(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def regressions(outputs: Any) -> Array:
    """A regress signature's ``outputs``, [batch] or [batch, 1], as one float32 value per example."""
    values = np.asarray(outputs)
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim != 1:
        raise InvalidArgumentError(
            f"Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got "
            f"{list(np.shape(outputs))}"
        )
    return values.astype(np.float32, copy=False)
