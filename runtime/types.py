"""The protocol between the runtime's layers, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

import numpy as np

# Anything numpy turns into a tensor: arrays, nested lists, scalars, bytes/str for DT_STRING.
TensorLike: TypeAlias = Any
Array: TypeAlias = np.ndarray[Any, Any]
# A tensor is addressed by (node name, output port).
TensorId: TypeAlias = tuple[str, int]
# feed_dict: tensor name ("x:0") -> value.
Feeds: TypeAlias = Mapping[str, TensorLike]
# What Session.run accepts: a name, or lists/tuples/dicts/namedtuples of names, in any nesting.
Fetches: TypeAlias = Any
