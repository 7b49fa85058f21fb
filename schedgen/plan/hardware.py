"""Limits of the target GPU (NVIDIA H200, sm_90a) that the plan stage checks against."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hardware:
    name: str = "NVIDIA H200"
    arch: str = "sm_90a"
    sm_count: int = 132
    smem_per_block: int = 232448      # 227 KiB: the opt-in maximum of dynamic SMEM per block
    smem_per_sm: int = 233472         # 228 KiB per SM, shared by the blocks resident on it
    smem_reserved_per_block: int = 1024  # the driver keeps 1 KiB per resident block
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    regs_per_sm: int = 65536
    max_cluster_size: int = 8
    tma_max_box: int = 256            # elements per box dimension
    tma_max_rank: int = 5
    swizzles: tuple = (32, 64, 128)
    l2_bytes: int = 60 << 20          # as torch reports it on the H200


    def regs_per_block(self, threads: int) -> int:
        """Registers a block of `threads` holds when it runs alone on an SM (`__launch_bounds__(threads, 1)`): the
        per-thread cap, a multiple of 8 up to 256, times the threads. setmaxnreg moves registers among the block's
        warpgroups but never past this: 384 threads get 168 each, 64512 in all, not the SM's 65536."""
        return threads * (min(256, self.regs_per_sm // threads) // 8 * 8)


H200 = Hardware()
