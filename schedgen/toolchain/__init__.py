"""Turning rendered CUDA C++ into a cubin (NVRTC, nvJitLink) and reading back what the compiler made (SASS, resources)."""
