"""numpy kernels. Importing this package fills ``registry.KERNELS``."""

from poolserve.runtime.kernels import (  # noqa: F401
    array_ops,
    bucket_ops,
    control_flow_ops,
    conv3d_ops,
    conv_ops,
    detection_ops,
    erf_ops,
    functional_ops,
    fused_ops,
    gather_ops,
    image_decode_ops,
    image_ops,
    io_ops,
    linalg_ops,
    list_ops,
    lookup_ops,
    math_ops,
    nn_ops,
    parsing_ops,
    partition_ops,
    quant_ops,
    ragged_ops,
    segment_ops,
    slicing_ops,
    space_ops,
    sparse_ops,
    state_ops,
    string_ops,
    tensor_array_ops,
)
from poolserve.runtime.kernels.registry import (
    KERNELS,
    Compute,
    KernelDef,
    OpContext,
    ResourceContainer,
    kernel,
    lookup,
)

__all__ = ["KERNELS", "Compute", "KernelDef", "OpContext", "ResourceContainer", "kernel", "lookup"]
