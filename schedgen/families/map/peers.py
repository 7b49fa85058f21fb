"""The map family's benchmark peer: `copy`, a device-to-device copy of the same number of bytes (what a
memory-bound kernel can reach). Rows give GB/s and the flat peer / peer_time_ms / ratio fields."""
from __future__ import annotations

from ...bench.case import Peer, guard

FLAT_PEER = "copy"
NESTED_PEERS = False


def _copy(case) -> Peer:
    from ...bench.timing import Contender
    from ...runtime import driver
    driver.ensure_context()
    half = case.plan.bytes_moved // 2
    held = {"src": driver.Buffer(half), "dst": driver.Buffer(half)}

    def call(i: int) -> None:
        driver.copy_d2d(held["dst"].ptr, held["src"].ptr, half)
    return Peer(Contender("copy", call, stream=0), {}, close=held.clear)


def peers(case) -> dict[str, Peer]:
    return {"copy": guard("copy", lambda: _copy(case))}
