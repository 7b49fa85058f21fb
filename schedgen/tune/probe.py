"""Is something that speaks Ray's protocol at `--ray HOST:PORT`? A check bounded in time, made before `ray.init`.

`ray.init(address=...)` on an address where no Ray cluster answers does not fail: it retries the connection to the
cluster's GCS for as long as it runs (`tune --ray 127.0.0.1:1` never returned). So the address is checked first:
a TCP connection within `timeout` seconds, then the HTTP/2 greeting every gRPC server (Ray's GCS, its client
server behind `ray://`) answers with a SETTINGS frame. A refused connection, an unknown host, a silent or a
non-gRPC server is a one-line reason, in seconds. With TLS (RAY_USE_TLS) only the connection is checked.
`auto`, `local` and empty addresses are Ray's own to resolve: not checked here, except `auto` with RAY_ADDRESS set,
which names the address Ray would use.
"""
from __future__ import annotations

import os
import socket
import time

PROBE_TIMEOUT = 10.0            # seconds for the connection and for the server's first frame
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])   # + an empty SETTINGS frame
_SETTINGS = 4


def host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of `host:port`, `[v6]:port` or `ray://host:port`; None for what Ray resolves itself (`auto`,
    `local`, no port). ValueError for a port that is not one."""
    address = address.strip()
    if address.startswith("ray://"):
        address = address[len("ray://"):]
    if address in ("", "auto", "local") or ":" not in address:
        return None
    host, _, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise ValueError(f"{address!r} is not HOST:PORT (a port is 1..65535)")
    return host, int(port)


def unreachable(address: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Why no Ray cluster can be at `address` (one line), or None when it may be there (or Ray resolves it)."""
    if address.strip() == "auto" and os.environ.get("RAY_ADDRESS"):
        address = os.environ["RAY_ADDRESS"]
    try:
        where = host_port(address)
    except ValueError as exc:
        return str(exc)
    if where is None:
        return None
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection(where, timeout=timeout) as sock:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return None
            return _not_grpc(sock, deadline)
    except socket.gaierror as exc:
        return f"unknown host {where[0]!r} ({exc.strerror})"
    except (TimeoutError, socket.timeout):
        return f"nothing answered within {timeout:g} s"
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()


def _not_grpc(sock: socket.socket, deadline: float) -> str | None:
    """None when the server greets an HTTP/2 client as gRPC servers do (a SETTINGS frame), else why not."""
    sock.sendall(_PREFACE)
    head = b""
    while len(head) < 9:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        chunk = sock.recv(9 - len(head))        # a timeout raises: "nothing answered"
        if not chunk:
            return "the server closed the connection: it does not speak gRPC (not a Ray cluster's address)"
        head += chunk
    if head[3] != _SETTINGS:
        return "the server does not speak gRPC (not a Ray cluster's address)"
    return None
