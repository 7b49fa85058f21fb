"""Running built kernels: the CUDA driver, array interop, the kernel call path and the multi-device host."""
from .kernel import Kernel, load_package

__all__ = ["Kernel", "load_package"]
