"""A fake of the driver calls the single-GPU call path makes (schedgen/runtime/driver.py), recording each one, so
that the call path runs and is counted on a CPU-only machine. The parameter packing (driver.Params) is the real one;
tensor maps are checked by the driver's own rules (validate_tiled) and encoded as their sequence number."""
from __future__ import annotations

from schedgen.runtime import driver


class FakeDriver:
    """Records what the launcher asks of the driver; encodes tensor maps into their arguments."""

    def __init__(self, monkeypatch, sm_count=132, clusters=66):
        self.encoded, self.launches, self.functions, self.buffers = [], [], [], []
        self.params, self.sets, self.configs, self.capturing, self.downloads = [], [], [], False, []
        self.sm_count, self.clusters = sm_count, clusters
        self.events, self.pools = [], []     # workspace allocations, memsets, launches and frees, in order
        fake = self

        class Module:
            def __init__(self, cubin):
                fake.cubin = cubin

            def function(self, name, *, dynamic_smem=0):
                fake.functions.append((name, dynamic_smem))
                return "F"

        class Buffer:
            def __init__(self, nbytes, device=0):
                self.nbytes, self.device, self.ptr = nbytes, device, 0xC0000 + 0x10000 * len(fake.buffers)
                fake.buffers.append(self)

            def upload(self, host):
                self.uploaded = host.copy()

            def download(self, host):
                fake.downloads.append(self)

        def encode_tiled(ptr, dtype, shape, strides, box, *, swizzle, oob_nan):
            driver.validate_tiled(ptr, dtype, shape, strides, box, swizzle=swizzle)   # the driver's rules
            fake.encoded.append((ptr, dtype, tuple(shape), tuple(strides), tuple(box), swizzle, oob_nan))
            return len(fake.encoded).to_bytes(128, "little")

        def launch(func, **kw):
            fake.launches.append(kw)

        class Params(driver.Params):
            def __init__(self, args):
                super().__init__(args)
                fake.params.append(self)

            def set(self, i, a):
                fake.sets.append(i)
                super().set(i, a)

        class LaunchConfig:
            def __init__(self, func, *, grid, block, smem, cluster=None):
                g, b, c = driver.validate_launch(grid, block, smem, cluster)
                self.kw = dict(grid=g, block=b, smem=smem, cluster=c)
                fake.configs.append(self)

            def launch(self, params, stream):
                fake.launches.append(dict(self.kw, stream=stream, args=[params.get(i) for i in range(len(params))]))
                fake.events.append(("launch", stream))

        def workspace_pool(device, *, stream=0, who="schedgen"):
            if device not in fake.pools:
                if fake.capturing:
                    raise driver.CaptureError(f"{who}: the first launch of a kernel with a workspace on "
                                              f"cuda:{device} creates the workspace memory pool")
                fake.pools.append(device)
            return ("pool", device)

        def workspace_alloc(pool, nbytes, stream, zero=None):
            # a stream-ordered pool hands back the memory freed before on this stream: the same address
            live = sum(1 for e in fake.events if e[0] == "alloc") - sum(1 for e in fake.events if e[0] == "free")
            ptr = 0xD00000000 + 0x100000000 * pool[1] + 0x10000000 * live
            fake.events.append(("alloc", stream, ptr, nbytes, fake.capturing))
            fake.events.append(("memset0", stream, ptr, nbytes if zero is None else zero))
            return ptr

        def workspace_free(ptr, stream):
            fake.events.append(("free", stream, ptr))

        def memset0(ptr, nbytes, stream):          # a workspace from the caller's allocator (torch's), zeroed
            fake.events.append(("memset0", stream, ptr, nbytes))

        for name, value in {"Module": Module, "Buffer": Buffer, "encode_tiled": encode_tiled, "launch": launch,
                            "Params": Params, "LaunchConfig": LaunchConfig, "_counter_pools": {},
                            "is_capturing": lambda stream: fake.capturing,
                            "available": lambda target="sm_90a": (True, "fake GPU, sm_90"),
                            "ensure_context": lambda device=0: None,
                            "synchronize": lambda stream=0: None,
                            "device_info": lambda: {"sm_count": fake.sm_count},
                            "max_active_clusters": lambda func, **kw: fake.clusters,
                            "workspace_pool": workspace_pool, "workspace_alloc": workspace_alloc,
                            "workspace_free": workspace_free, "memset0": memset0}.items():
            monkeypatch.setattr(driver, name, value)
