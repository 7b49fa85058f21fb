"""Render a plan through the Jinja templates of each backend (StrictUndefined: a missing field is an error).

Templates live in the top-level `templates/` folder (a wheel carries it as `schedgen/_data/templates`,
`registry.template_root`): a family's in `templates/<kind>/`, the folder its manifest registers (loader names
`<kind>/cuda.cu.j2`, `<kind>/pallas.py.j2`, ...), the shared partials in `templates/common/` (`common/...`).
"""
from __future__ import annotations

import hashlib
import math
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import jinja2

from .. import registry as families
from ..comment import comment_text
from ..frontend import expr as ex
from ..frontend import spelling
from ..plan import dims
from ..plan.common import cxx_float
from ..plan.exprs import spell

def template_roots() -> dict[str, Path]:
    """Loader prefix -> template folder: 'common' (the shared partials), then one per registered family."""
    common = families.COMMON_TEMPLATES
    return {common: families.template_folder(common), **{f.kind: f.templates for f in families.all_families()}}


def _pyfloat(value: float) -> str:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError("non-finite constant")
    return repr(value)


# ---- expressions: a plan keeps validated trees (a PlanExpr, schedgen/plan/exprs.py, carrying one as `.expr`) over
# the spec's names, and a {name: role} map; these filters spell them in a template's language.

def _pystr(value: str) -> str:
    """A string from the spec as a Python string literal (repr: every quote, backslash and control character
    escaped), so generated code holds it as data."""
    if not isinstance(value, str):
        raise TypeError(f"pystr takes a str, got {type(value).__name__}")
    return repr(value)


def _tree(value) -> ex.Expr:
    expr = getattr(value, "expr", value)
    if not isinstance(expr, ex.Expr):
        raise TypeError(f"not a validated expression: {value!r}")
    return expr


def _spelled(roles: Mapping[str, str], **spelling) -> dict[str, str]:
    """`{{ roles | spelled(operand="v_{}", size=p.sizes, ...) }}`: each name of a {name: role} map -> its
    identifier: the role's spelling with `{}` standing for the name, or a {name: value} map (the name spelled as
    its value); every role must be given one."""
    return spell(roles, spelling)


def _cxx(value, names: Mapping[str, str]) -> str:
    """A float expression as float32 C++ (its names through `names`)."""
    return spelling.render_cxx(_tree(value), names)


def _jnp(value, names: Mapping[str, str]) -> str:
    """A float expression as jax.numpy source (its names through `names`)."""
    return spelling.render_jnp(_tree(value), names)


def _ranges(value):
    ranges = getattr(value, "ranges", None)
    if ranges is None:
        raise ValueError(f"integer expression {value!r} carries no ranges to check it against")
    return ranges


def _pyint(value, names: Mapping[str, str]) -> str:
    """An integer expression as Python over int32 tracers; refused unless it fits 32 bits over the ranges the
    planner proved it over (a PlanExpr's `.ranges`)."""
    return spelling.render_py_int(_tree(value), names, ranges=_ranges(value))


def _cxxint(value, names: Mapping[str, str]) -> str:
    """An integer expression as C++ `int` math ('//' and '%' through sg_floordiv / sg_floormod); refused unless it
    fits 32 bits over the ranges the planner proved it over (a PlanExpr's `.ranges`)."""
    return spelling.render_cxx_int(_tree(value), names, ranges=_ranges(value))


def _cxxfloat(value: float) -> str:
    """A float constant as an exact C++ float literal."""
    return cxx_float(value)


# ---- extents (schedgen/plan/dims.py): an int, or an expression over dynamic sizes known at the call. A dynamic
# size is the kernel argument / Python local `sz_<name>` (the name is an identifier the front end checked).

def _cxxdim(value, fmt: str = "sz_{}") -> str:
    """An extent as C++ `int` math: a literal when static."""
    if isinstance(value, dims.Dim):
        return dims.spell(value, fmt.format, cdiv=lambda a, b: f"(({a} + {b} - 1) / {b})", floordiv="/",
                          minmax=("min", "max"))
    return str(int(value))


def _pydim(value, fmt: str = "sz_{}") -> str:
    """An extent as Python int math: a literal when static."""
    if isinstance(value, dims.Dim):
        return dims.spell(value, fmt.format, cdiv=lambda a, b: f"(-(-{a} // {b}))")
    return str(int(value))


def _pytuple(values) -> str:
    """A sequence as Python spells a tuple of its items' text: `(a, b)`, `(a,)` for one (a comment's shapes)."""
    items = [str(v) for v in values]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


@lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PrefixLoader({k: jinja2.FileSystemLoader(str(v)) for k, v in template_roots().items()}),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["pyfloat"] = _pyfloat
    env.filters["pystr"] = _pystr           # a spec's string as a Python literal (never pasted raw)
    env.filters["comment"] = comment_text   # text inside a one-line comment (the banners): it cannot end it
    env.filters["spelled"] = _spelled       # validated expressions (plan/exprs.py PlanExpr) spelled per language
    env.filters["cxx"] = _cxx               # float math
    env.filters["jnp"] = _jnp
    env.filters["cxxint"] = _cxxint         # 32-bit integer math (index maps, device ids)
    env.filters["pyint"] = _pyint
    env.filters["cxxfloat"] = _cxxfloat
    env.filters["cxxdim"] = _cxxdim         # extents that may be dynamic (plan/dims.py)
    env.filters["pydim"] = _pydim
    env.filters["pytuple"] = _pytuple        # a shape or grid's text in a comment
    env.tests["dynamic"] = lambda v: isinstance(v, dims.Dim)
    env.globals["size_sources"] = lambda operands: dims.sources([o.shape for o in operands])
    return env


def tma_ranks(plan) -> list[int]:
    """The ranks of the plan's tensor maps: which CUDA tensor-map helpers a kernel's source needs."""
    return sorted({len(a.shape) for a in plan.launch.kernel_args if a.kind == "tmap"})


def template_file(plan, backend: str) -> str:
    """The family template file of a backend for the plan's target: cuda.cu.j2 / pallas.py.j2 for sm_90a, and
    <stem>_<target>.<ext> for another target (cuda_sm_100a.cu.j2)."""
    file = families.BACKEND_TEMPLATES[backend]
    target = plan.launch.target
    if target != "sm_90a":
        stem, _, ext = file.partition(".")
        file = f"{stem}_{target}.{ext}"
    return file


def has_template(plan, backend: str) -> bool:
    """Whether the plan's family renders `backend` for the plan's target."""
    return families.of(plan).template(template_file(plan, backend)) is not None


def render(plan, backend: str) -> str:
    family = families.of(plan)
    file = template_file(plan, backend)
    target = plan.launch.target
    name = family.template(file)
    if name is None:
        raise ValueError(f"the {family.kind} family has no {backend} template for {target} ({file})")
    ctx = {"p": plan, "approx_math": getattr(plan, "approx_math", False), "tma_ranks": tma_ranks(plan)}
    return environment().get_template(name).render(**ctx)


def templates_hash() -> str:
    """Hash of every template file (part of the build cache key)."""
    h = hashlib.sha256()
    for prefix, root in sorted(template_roots().items()):
        for path in sorted(root.rglob("*.j2")):
            h.update(f"{prefix}/{path.relative_to(root)}".encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def render_multimem(plan) -> str:
    """The NVLink multicast entries (a MultimemPlan) as CUDA: for CI to assemble, never to run (NVLink multicast is
    not supported by this release)."""
    return environment().get_template("collective_matmul/multimem.cu.j2").render(p=plan)
