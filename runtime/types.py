"""The protocol between the runtime's layers, in one place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

# Anything numpy turns into a tensor: arrays, nested lists, scalars, bytes/str for DT_STRING.
TensorLike: TypeAlias = npt.ArrayLike | str | bytes
Array: TypeAlias = np.ndarray[Any, Any]
# A tensor is addressed by (node name, output port).
TensorId: TypeAlias = tuple[str, int]
# feed_dict: tensor name ("x:0") -> value.
Feeds: TypeAlias = Mapping[str, TensorLike]
# What Session.run accepts: a tensor or op name, or lists, tuples, dicts and namedtuples of them, nested.
Fetches: TypeAlias = str | Sequence["Fetches"] | Mapping[Any, "Fetches"]
