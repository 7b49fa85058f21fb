"""Every GPU of a node: which GPUs this process sees (CUDA_VISIBLE_DEVICES, else `nvidia-smi -L`), which of them a run
takes (`schedgen tune --gpus all|N|0,2,5`), and `PoolRunner`: one supervised measuring worker per GPU, each pinned
to its GPU with CUDA_VISIBLE_DEVICES, measuring concurrently. The driver stays the one writer of the database."""
from __future__ import annotations

import os
import queue
import re
import subprocess
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..errors import clip, quoted
from .measure import DEFAULT_TIMEOUT, START_TIMEOUT, VERIFY_TIMEOUT, Result, WorkerRunner, gpu_environment


@dataclass(frozen=True)
class Gpu:
    id: str                     # what CUDA_VISIBLE_DEVICES takes for it: an index or a UUID
    name: str | None = None     # the model (nvidia-smi -L), None when unknown


_LISTED = re.compile(r"^GPU (\d+): (.+?) \(UUID: ([^)\s]+)\)")


def nvidia_smi_list() -> str:
    """`nvidia-smi -L`'s output ('' where there is no nvidia-smi or it fails)."""
    try:
        q = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return ""
    return q.stdout if q.returncode == 0 else ""


def _listed(text: str) -> list[tuple[str, str, str]]:
    """(index, name, uuid) of each `GPU i: NAME (UUID: GPU-...)` line."""
    return [m.groups() for m in map(_LISTED.match, text.splitlines()) if m]


def visible_gpus(environ: Mapping[str, str] | None = None, smi: Callable[[], str] | None = None) -> list[Gpu]:
    """The GPUs a CUDA program started here would see, in CUDA's order: CUDA_VISIBLE_DEVICES' entries when it is set
    (indices or UUIDs, a UUID's prefix as CUDA takes it; like CUDA, the list ends at the first entry that names no
    GPU), else every GPU `nvidia-smi -L` lists. Names come from the listing (None where it has no such line, say
    without nvidia-smi, or a MIG instance)."""
    environ = os.environ if environ is None else environ
    listed = _listed((smi or nvidia_smi_list)())
    if "CUDA_VISIBLE_DEVICES" not in environ:
        return [Gpu(i, name) for i, name, _ in listed]
    out = []
    for entry in (e.strip() for e in environ["CUDA_VISIBLE_DEVICES"].split(",")):
        match = [name for i, name, uuid in listed if entry == i or (entry.startswith("GPU-") and uuid.startswith(entry))]
        if match:
            out.append(Gpu(entry, match[0]))
        elif entry.startswith("MIG-") or (not listed and (entry.isdigit() or entry.startswith("GPU-"))):
            out.append(Gpu(entry))          # a MIG instance, or nothing to check it against: taken as written
        else:
            break
    return out


def pick_gpus(choice: str, visible: Sequence[Gpu]) -> list[Gpu]:
    """`--gpus`: `all` (every visible GPU), `N` (the first N) or a comma list of device numbers as CUDA numbers the
    visible GPUs (`0,2,5`; one GPU: `3,`). ValueError saying what is wrong and what is legal."""
    text = str(choice).strip()
    n = len(visible)
    legal = (f"give all, a count 1..{n}, or device numbers 0..{n - 1} separated by commas (one device: '3,')"
             if n else "no GPU is visible here (CUDA_VISIBLE_DEVICES, nvidia-smi -L)")
    if text == "all":
        if not n:
            raise ValueError(f"--gpus all: {legal}")
        return list(visible)
    shown = clip(text, 80)
    if _number(text) is not None:
        if not 1 <= _number(text) <= n:
            raise ValueError(f"--gpus {shown}: {n} GPU{'s' if n != 1 else ''} visible; {legal}")
        return list(visible[:_number(text)])
    parts = [p.strip() for p in text.split(",")]
    parts = parts[:-1] if len(parts) > 1 and parts[-1] == "" else parts
    bad = [p for p in parts if _number(p) is None or _number(p) >= n]
    if bad or not parts:
        raise ValueError(f"--gpus {shown}: {', '.join(quoted(b, 24) for b in bad[:8]) or 'nothing'}"
                         f"{f' (and {len(bad) - 8} more)' if len(bad) > 8 else ''} is not a visible device; {legal}")
    if len(set(map(_number, parts))) != len(parts):
        raise ValueError(f"--gpus {shown}: a device is named twice; {legal}")
    return [visible[_number(p)] for p in parts]


def _number(text: str) -> int | None:
    """A device number or count: ASCII digits, at most 9 of them (int() of thousands of digits is an error)."""
    return int(text) if text.isascii() and text.isdigit() and len(text.lstrip("0")) <= 9 else None


def one_model(gpus: Sequence[Gpu]) -> tuple[list[Gpu], str]:
    """The GPUs of the first one's model, and a note naming those left out (empty when all are one model). The
    database keys a result by the GPU model it was timed on, and one ranking mixes no two models' times, so a run
    measures on one model; `--gpus` picks another."""
    if not gpus:
        return [], ""
    first = gpus[0].name
    kept = [g for g in gpus if g.name == first]
    other = [g for g in gpus if g.name != first]
    if not other:
        return kept, ""
    return kept, (f"measuring on the {len(kept)} {first or 'GPU'}(s) ({', '.join(g.id for g in kept)}); left out "
                  f"as another model: {', '.join(f'{g.id} ({g.name})' for g in other)} (results are kept per GPU "
                  f"model: tune on those with --gpus)")


class PoolRunner:
    """One `WorkerRunner` per GPU, each worker started with CUDA_VISIBLE_DEVICES set to its GPU. `measure` may be
    called from several threads at once (`parallel` of them): each call takes an idle worker from a queue, measures
    on it and gives it back, so N threads keep N GPUs busy. A hang or a fault replaces only that worker (its
    WorkerRunner starts a fresh one on the same GPU). `verify` runs on one idle worker. The functions and options
    are WorkerRunner's; `env` (gpu, driver) names the machine: by default gpu_environment() with the pool's model."""

    def __init__(self, gpus: Sequence[Gpu], measure: Callable | None = None, verify: Callable | None = None, *,
                 setup: Callable | None = None, timeout: float = DEFAULT_TIMEOUT,
                 verify_timeout: float = VERIFY_TIMEOUT, start_timeout: float = START_TIMEOUT,
                 options: Mapping[str, Any] | None = None, env: Mapping[str, Any] | None = None):
        gpus, self.note = one_model(gpus)
        if not gpus:
            raise RuntimeError("no GPU to measure on (CUDA_VISIBLE_DEVICES, nvidia-smi -L list none)")
        self.gpus = gpus
        if env is None:
            env = gpu_environment()
            if gpus[0].name:
                env["gpu"] = gpus[0].name
        self.env = dict(env)
        self.workers = [WorkerRunner(measure, verify, setup=setup, timeout=timeout, verify_timeout=verify_timeout,
                                     start_timeout=start_timeout, options=options, env=self.env,
                                     worker_env={"CUDA_VISIBLE_DEVICES": g.id}) for g in gpus]
        self.idle: queue.Queue[WorkerRunner] = queue.Queue()
        for w in self.workers:
            self.idle.put(w)

    @property
    def parallel(self) -> int:
        """How many `measure` calls may run at once."""
        return len(self.workers)

    @property
    def starts(self) -> int:
        return sum(w.starts for w in self.workers)

    def start(self) -> None:
        for w in self.workers:
            w.start()

    def _on_idle(self, call: str, built, backend: str) -> Result:
        w = self.idle.get()
        try:
            return getattr(w, call)(built, backend)
        finally:
            self.idle.put(w)

    def measure(self, built, backend: str) -> Result:
        return self._on_idle("measure", built, backend)

    def verify(self, built, backend: str) -> Result:
        return self._on_idle("verify", built, backend)

    def close(self) -> None:
        for w in self.workers:
            w.close()
