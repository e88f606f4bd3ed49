"""numpy kernels. Importing this package fills ``registry.KERNELS``."""

from runtime.kernels import array_ops, image_ops, math_ops, nn_ops, state_ops  # noqa: F401
from runtime.kernels.registry import KERNELS, Compute, KernelDef, OpContext, ResourceContainer, kernel, lookup

__all__ = ["KERNELS", "Compute", "KernelDef", "OpContext", "ResourceContainer", "kernel", "lookup"]
