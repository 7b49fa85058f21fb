"""The one list of names that generated code defines, which user names spelled into it must avoid.

Generated code spells most user names with a prefix (CUDA: ``v_x``, ``c_scale``, ``S_M``, ``g_i``, ``in_x_slot``;
Pallas: ``v_x``, ``_c_scale``, ``r_o``, ``t_h``), which no template name carries. Two kinds of name go in as-is,
into the Pallas module and the package ``__init__`` of every family:

- the spec's ``name``: ``def <name>(...)`` at the top level of both modules, so it must not equal any of their
  module-level names (``GRID``, ``NUM_BLOCKS``, ``make``, ``kernel``, ``plan``...) nor a builtin or global the
  modules' functions read (``tuple``, ``zip``, ``ValueError``...);
- input names: the parameters of that entry function, so they must not equal its other parameters (``out``,
  ``stream``, ``backend``, ``interpret``, ``mesh``, ``devices``), its locals, nor a global it reads (``make``,
  ``kernel``, ``plan``, ``pallas``...);

and one prefixed spelling collides with a template name: the matmul epilogue's accumulator is ``v_acc``, so no
input may be named ``acc``.

The lists below are what ``tests/regressions/generated_names.py`` derives from the rendered code of every bundled
spec through every template (symtable scopes of the Python, identifiers of the CUDA); its test fails when a
template change defines a name that is missing here. Checked by every family's planner (``reserved_problems``), for
every name that becomes a parameter (``parameter_fields``: the inputs and the operands a family adds, such as
grouped_matmul's ``op.group_offsets``).
"""
from __future__ import annotations

from collections.abc import Iterator
from types import MappingProxyType

from . import registry as families

_NAME = {  # the spec name must not be one of these
    'ACC_STAGES': 'a module-level name of the generated module',
    'AXIS': 'a module-level name of the generated module',
    'A_TRANSFORMS': 'a module-level name of the generated module',
    'BATCH': 'a module-level name of the generated module',
    'BLOCK_KV': 'a module-level name of the generated module',
    'BLOCK_Q': 'a module-level name of the generated module',
    'B_TRANSFORMS': 'a module-level name of the generated module',
    'CAUSAL_OFFSET': 'a module-level name of the generated module',
    'CHUNK': 'a module-level name of the generated module',
    'CHUNK_STEP': 'a module-level name of the generated module',
    'CLUSTER_M': 'a module-level name of the generated module',
    'CLUSTER_N': 'a module-level name of the generated module',
    'CLUSTER_SIZE': 'a module-level name of the generated module',
    'COLS_B': 'a module-level name of the generated module',
    'COL_VEC': 'a module-level name of the generated module',
    'CONSUMER_REGS': 'a module-level name of the generated module',
    'COUNTERS': 'a module-level name of the generated module',
    'DELAY_RELEASE': 'a module-level name of the generated module',
    'DTYPE': 'a module-level name of the generated module',
    'D_PART': 'a module-level name of the generated module',
    'D_SPLIT': 'a module-level name of the generated module',
    'EPILOGUE': 'a module-level name of the generated module',
    'EPI_BUFFERS': 'a module-level name of the generated module',
    'EPI_CHUNKS': 'a module-level name of the generated module',
    'EPI_CHUNKS_M': 'a module-level name of the generated module',
    'EPI_CHUNKS_N': 'a module-level name of the generated module',
    'EPI_COLS': 'a module-level name of the generated module',
    'EPI_ROWS': 'a module-level name of the generated module',
    'F32_TRANSFORMS': 'a module-level name of the generated module',
    'GRID': 'a module-level name of the generated module',
    'GRID_M': 'a module-level name of the generated module',
    'GRID_N': 'a module-level name of the generated module',
    'GROUP': 'a module-level name of the generated module',
    'HEADS_KV': 'a module-level name of the generated module',
    'HEADS_Q': 'a module-level name of the generated module',
    'HEAD_DIM': 'a module-level name of the generated module',
    'IN_DTYPE': 'a module-level name of the generated module',
    'K': 'a module-level name of the generated module',
    'KEYS': 'a module-level name of the generated module',
    'KV_BLOCKS': 'a module-level name of the generated module',
    'K_ITERS': 'a module-level name of the generated module',
    'LAYOUT': 'a module-level name of the generated module',
    'LN2': 'a module-level name of the generated module',
    'LOG2E': 'a module-level name of the generated module',
    'M': 'a module-level name of the generated module',
    'MMA': 'a module-level name of the generated module',
    'M_TOTAL': 'a module-level name of the generated module',
    'N': 'a module-level name of the generated module',
    'NUM_BLOCKS': 'a module-level name of the generated module',
    'NUM_CONSUMERS': 'a module-level name of the generated module',
    'NUM_DEVICES': 'a module-level name of the generated module',
    'NUM_TILES': 'a module-level name of the generated module',
    'NamedTuple': 'a module the generated code imports',
    'OUT_DTYPE': 'a module-level name of the generated module',
    'OUT_TRANSFORMS': 'a module-level name of the generated module',
    'PRODUCER': 'a module-level name of the generated module',
    'PRODUCER_REGS': 'a module-level name of the generated module',
    'Q_BLOCKS': 'a module-level name of the generated module',
    'RECEIVED': 'a module-level name of the generated module',
    'RECV_OFFSET': 'a module-level name of the generated module',
    'ROW': 'a module-level name of the generated module',
    'ROWS': 'a module-level name of the generated module',
    'ROW_VEC': 'a module-level name of the generated module',
    'RuntimeError': 'a global or builtin name the generated code reads',
    'SCALE': 'a module-level name of the generated module',
    'SCALE_LOG2': 'a module-level name of the generated module',
    'SEQ_KV': 'a module-level name of the generated module',
    'SEQ_Q': 'a module-level name of the generated module',
    'SLOTS': 'a module-level name of the generated module',
    'SOFTMAX': 'a module-level name of the generated module',
    'STAGES': 'a module-level name of the generated module',
    'S_BUFFERS': 'a module-level name of the generated module',
    'TILES_PER_STEP': 'a module-level name of the generated module',
    'TILE_K': 'a module-level name of the generated module',
    'TILE_M': 'a module-level name of the generated module',
    'TILE_N': 'a module-level name of the generated module',
    'TRANSFORMS': 'a module-level name of the generated module',
    'TypeError': 'a global or builtin name the generated code reads',
    'ValueError': 'a global or builtin name the generated code reads',
    'WG_TILE_M': 'a module-level name of the generated module',
    'WG_TILE_N': 'a module-level name of the generated module',
    'WORK': 'a module-level name of the generated module',
    'dataclasses': 'a module the generated code imports',
    'delta_of': 'a function the generated module defines',
    'dict': 'a global or builtin name the generated code reads',
    'divmod': 'a global or builtin name the generated code reads',
    'getattr': 'a global or builtin name the generated code reads',
    'hasattr': 'a global or builtin name the generated code reads',
    'kernel': 'a module-level name of the generated module',
    'list': 'a global or builtin name the generated code reads',
    'make': 'a function the generated module defines',
    'make_mesh': 'a function the generated module defines',
    'max': 'a global or builtin name the generated code reads',   # extents over dynamic sizes (pydim)
    'min': 'a global or builtin name the generated code reads',
    'pallas': 'a function the generated module defines',
    'plan': 'a module-level name of the generated module',
    'reversed': 'a global or builtin name the generated code reads',
    'run_into': 'a function the generated module defines',
    'run_shards': 'a function the generated module defines',
    'shard_mapped': 'a function the generated module defines',
    'sizes_of': 'a function the generated module defines',
    'str': 'a global or builtin name the generated code reads',
    'tuple': 'a global or builtin name the generated code reads',
    'zip': 'a global or builtin name the generated code reads',
}
_INPUTS = {  # no input may be named one of these
    'ValueError': 'a global or builtin name the generated code reads',
    'acc': "the matmul epilogue's accumulator (generated code spells inputs v_<name>, and the accumulator v_acc)",
    'backend': 'a parameter of the generated function',
    'devices': 'a parameter of the generated function',
    'devs': 'a local variable of the generated function',
    'i': 'a local variable of the generated function',
    'interpret': 'a parameter of the generated function',
    'kernel': 'a global or builtin name the generated code reads',
    'key': 'a local variable of the generated function',
    'lhs': 'a local variable of the generated function',
    'list': 'a global or builtin name the generated code reads',
    'make': 'a global or builtin name the generated code reads',
    'make_mesh': 'a global or builtin name the generated code reads',
    'mesh': 'a parameter of the generated function',
    'o': 'a local variable of the generated function',
    'out': 'a parameter of the generated function',
    'outs': 'a local variable of the generated function',
    'pallas': 'a global or builtin name the generated code reads',
    'plan': 'a global or builtin name the generated code reads',
    'rhs': 'a local variable of the generated function',
    'runner': 'a local variable of the generated function',
    'shard_mapped': 'a global or builtin name the generated code reads',
    'sizes_of': 'a global or builtin name the generated code reads',
    'stream': 'a parameter of the generated function',
    'tuple': 'a global or builtin name the generated code reads',
}

SPEC_NAME = MappingProxyType(_NAME)
INPUT_NAME = MappingProxyType(_INPUTS)


def parameter_fields(spec) -> dict[str, tuple]:
    """Every name that becomes a parameter of the generated entry function, and the field of the spec that names it:
    the inputs (`op.inputs.<name>`), then the operands the family passes after them (its `call_inputs`: grouped_matmul's
    `op.group_offsets`), each located at the op field holding that name."""
    op = spec.op
    fields = {n: ("op", "inputs", n) for n in op.inputs}
    for n in families.of(spec).call_inputs(op):
        if n not in fields:
            fields[n] = next((("op", f) for f in type(op).model_fields if getattr(op, f, None) == n), ("op",))
    return fields


def reserved_problems(spec) -> Iterator[tuple[tuple, str]]:
    """(field path, message) for the spec name and every parameter name that generated code would break on."""
    if spec.name in SPEC_NAME:
        yield ("name",), (f"'{spec.name}' is reserved: it is {SPEC_NAME[spec.name]} (the spec name becomes "
                          f"`def {spec.name}(...)` at the top level of the generated Pallas module and package); "
                          f"choose another name")
    for n, path in parameter_fields(spec).items():
        if n in INPUT_NAME:
            what = "input names become" if path[:2] == ("op", "inputs") else f"op.{path[-1]} names an operand, which becomes one of"
            yield path, (f"'{n}' is reserved: it is {INPUT_NAME[n]} ({what} the parameters of `def {spec.name}(...)` "
                         f"in the generated Pallas module and package); choose another name")
