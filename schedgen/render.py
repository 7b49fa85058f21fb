"""Render a plan through the Jinja templates of each backend (StrictUndefined: a missing field is an error)."""
from __future__ import annotations

import hashlib
import math
from functools import lru_cache
from pathlib import Path

import jinja2

TEMPLATE_FILES = {"cuda": "cuda/{family}.cu.j2", "pallas": "pallas/{family}.py.j2"}


def template_dir() -> Path:
    """templates/ of a source checkout, or the copy packaged inside the wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "templates", here / "_data" / "templates"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("schedgen's templates are missing from this installation")


def _pyfloat(value: float) -> str:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError("non-finite constant")
    return repr(value)


@lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["pyfloat"] = _pyfloat
    return env


def render(plan, backend: str) -> str:
    family = plan.family
    env = environment()
    ctx = {"p": plan, "approx_math": getattr(plan, "approx_math", False),
           "tma_ranks": plan.tma_ranks}
    return env.get_template(TEMPLATE_FILES[backend].format(family=family)).render(**ctx)


def templates_hash() -> str:
    """Hash of every template file (part of the build cache key)."""
    h = hashlib.sha256()
    root = template_dir()
    for path in sorted(root.rglob("*.j2")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def render_multimem(plan) -> str:
    """The NVLink multicast entries (a MultimemPlan) as CUDA: for CI to assemble, never to run (multicast is off on
    the lent machines)."""
    return environment().get_template("cuda/multimem.cu.j2").render(p=plan)
