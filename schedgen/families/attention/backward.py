"""The attention family's backward hook (issue 19): the kernels of dq, dk, dv as an autodiff BackwardGraph.

The forward keeps its log-sum-exp (added as a second output, `lse` unless that name is taken, when the spec has
none): the backward recomputes P = exp(scale q k^T - lse) block by block from it (FlashAttention's backward), so
the forward saves 4 bytes a query row rather than the [Sq, Skv] probabilities. One step, an attention_backward
spec with the forward's sizes, dtypes, layout, mask and scale, computes dq, dk and dv together. `backward.save:
recompute` keeps nothing: a first step reruns the forward (with the log-sum-exp) inside the backward."""
from __future__ import annotations

from typing import Any

from ...autodiff import names
from ...autodiff.graph import BackwardGraph, Step
from ...autodiff.names import suffixed
from ...autodiff.spec import written, wrt_names
from ...frontend.expr import RESERVED, check_identifier
from ...plan.common import Problems
from ...reserved import INPUT_NAME

ROLES = ("q", "k", "v")


def _legal_input(name: str) -> bool:
    return name not in RESERVED and name not in INPUT_NAME and not name.startswith(("sg_", "__"))


def _fresh(want: str, fallback: str, taken: set[str], legal=_legal_input) -> str:
    """`want` if it is a legal name and free, else `fallback`, fallback_2, ... (names.fresh: legal, at most 63
    characters); the result is added to `taken`."""
    if want not in taken and check_identifier(want) is None and legal(want):
        taken.add(want)
        return want
    return names.fresh(fallback, taken, legal, sep="_")


def _lse_shape(op, q_shape: list) -> list:
    """[B, Hq, Sq] from q's shape entries (size names or ints)."""
    b, s, h = (q_shape[0], q_shape[1], q_shape[2]) if op.layout == "bshd" else (q_shape[0], q_shape[2], q_shape[1])
    return [b, h, s]


def _saved(spec, lse_name: str | None, problems: Problems) -> bool:
    """Whether the forward keeps its log-sum-exp (False: `save: recompute`)."""
    save = spec.backward.save
    if save == "recompute":
        return False
    legal = {lse_name or "lse", "lse"}
    for i, n in enumerate(save or ()):
        if n not in legal:
            problems.add(("backward", "save", i),
                         f"attention's backward keeps the forward's log-sum-exp only ({' or '.join(sorted(legal))}): "
                         f"it recomputes the probabilities from it block by block; got '{n}'; or save: recompute")
        elif n in save[:i]:
            problems.add(("backward", "save", i), f"'{n}' is listed twice")
    return True


def attention_backward_graph(spec, src: Any = None) -> tuple[BackwardGraph | None, Problems]:
    """The graph of the spec's backward: the forward with the log-sum-exp, one attention_backward step (after a
    recomputing forward step with `save: recompute`)."""
    problems = Problems()
    op = spec.op
    qn, kn, vn = op.inputs
    outs = list(op.outputs)
    on, user_lse = outs[0], (outs[1] if len(outs) > 1 else None)
    wrt = wrt_names(spec, problems)
    keep = _saved(spec, user_lse, problems)
    if problems:
        return None, problems
    data = written(spec)
    data.pop("backward", None)
    fwd_data = data
    lse = user_lse
    if lse is None:   # the forward writes its log-sum-exp too
        lse = _fresh("lse", "lse", {*op.sizes, *op.inputs, *op.outputs}, legal=lambda n: True)
        fwd_data = {**data, "op": {**data["op"], "outputs": {**data["op"]["outputs"], lse: {
            "shape": _lse_shape(op, list(op.inputs[qn].shape)), "dtype": "f32"}}}}
    taken = {*op.sizes, qn, kn, vn}
    o_in = _fresh(on, f"fwd_{on}", taken)
    do_in = _fresh(f"d{on}", f"grad_{on}", taken)
    lse_in = _fresh(lse, f"fwd_{lse}", taken)
    grads = {x: _fresh(f"d{x}", f"grad_{x}", taken, legal=lambda n: True) for x in (qn, kn, vn)}
    ops = data["op"]
    lse_operand = fwd_data["op"]["outputs"][lse]
    bwd_op = {"kind": "attention_backward", "sizes": ops.get("sizes", {}),
              "inputs": {qn: ops["inputs"][qn], kn: ops["inputs"][kn], vn: ops["inputs"][vn],
                         o_in: ops["outputs"][on], do_in: ops["outputs"][on], lse_in: lse_operand},
              "outputs": {grads[qn]: ops["inputs"][qn], grads[kn]: ops["inputs"][kn], grads[vn]: ops["inputs"][vn]}}
    for field in ("layout", "causal", "scale"):
        if field in ops:
            bwd_op[field] = ops[field]
    steps, notes = [], []
    lse_ref, o_ref = f"out:{lse}", f"out:{on}"
    if not keep:
        recompute = {**fwd_data, "name": suffixed(spec.name, "_recompute")}
        steps.append(Step("recompute", recompute, {qn: f"in:{qn}", kn: f"in:{kn}", vn: f"in:{vn}"},
                          {on: "value", lse: "value"}, why="the forward again, with its log-sum-exp (save: recompute)"))
        lse_ref, o_ref = f"step:recompute.{lse}", f"step:recompute.{on}"
        notes.append("save: recompute: nothing kept; the backward reruns the forward for o and its log-sum-exp")
    else:
        notes.append(f"the forward keeps its log-sum-exp ({lse}, f32 [B, Hq, Sq]): the backward recomputes P from "
                     f"it block by block")
    steps.append(Step("attention_bwd", {"name": suffixed(spec.name, "_bwd"), "op": bwd_op},
                      {qn: f"in:{qn}", kn: f"in:{kn}", vn: f"in:{vn}", o_in: o_ref, do_in: f"grad:{on}",
                       lse_in: lse_ref},
                      {grads[x]: (f"grad:{x}" if x in wrt else "value") for x in (qn, kn, vn)},
                      # what it computes, not how: the form is the step's plan's (pipeline.kind, written or picked
                      # by the attention_backward planner; explain shows it, AttentionBackwardPlan.forms)
                      why="dq, dk, dv from q, k, v, o, lse and the upstream do (the attention_backward kernel)"))
    if len(wrt) < 3:
        notes.append(f"one kernel pair computes dq, dk and dv together; only {', '.join(wrt)} "
                     f"{'is' if len(wrt) == 1 else 'are'} kept")
    graph = BackwardGraph(forward=fwd_data if (user_lse is None and keep) else None,
                          saved=(lse,) if keep else (), steps=tuple(steps), grads=wrt, notes=tuple(notes))
    return graph, problems
