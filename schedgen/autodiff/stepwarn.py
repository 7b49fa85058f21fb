"""Where a derived backward step's compiler warning points (build.Built.warnings): the step is no file, so its
warning names the step and says what the compiler said, located at a field of the user's file that reaches the step
(a value the step copied from it: the forward's schedule a recomputing step reuses, a dynamic size), with the step's
own advice; or, when the planner picked what the advice would change, at the user's `backward` field, saying that no
field of the file sets it and that the warning costs speed only."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import Problem, SourceMap
from .spec import value_at

# where a copied value may stand: the step's schedule, or a size of the op (the same name at the same path)
_COPYABLE = (("schedule",), ("op", "sizes"))


@dataclass(frozen=True)
class DerivedStep:
    """One backward step of a user's spec, as its build's warnings need it."""
    name: str                      # the step's name (backward/<name>/)
    why: str                       # what it computes, one line (autodiff.graph.Step.why)
    step: Mapping[str, Any]        # the step's spec as plain data (what the family wrote)
    user: Mapping[str, Any]        # the user's spec as written (autodiff.spec.written)
    user_src: SourceMap            # the user's file

    def warning(self, verdict: str, field: tuple, advice: str) -> str:
        """The compiler's `verdict` on this step's kernel; `field` and `advice` are what the step's plan would say
        to a user who wrote the step (the forward's spill advice)."""
        head = f"warning: backward step {self.name}" + (f" [{self.why}]" if self.why else "") + f": {verdict}"
        if self.reaches(field):
            return self.user_src.format(Problem(field, f"{head}{advice} (the step copies this field from this "
                                                       f"file)"))
        return self.user_src.format(Problem(("backward",), f"{head}; the planner picks this step's schedule (no "
                                                           f"field of this file sets it): a performance warning "
                                                           f"only, no action needed"))

    def reaches(self, field: tuple) -> bool:
        """Whether the user's file sets `field` of the step: the deepest part of its path the user wrote (a size,
        a schedule section) holds the same value in the step (copied, so writing `field` there reaches it)."""
        field = tuple(field)
        if not any(field[:len(p)] == p and len(field) > len(p) for p in _COPYABLE):
            return False
        for n in range(len(field), 1, -1):
            found_user, user_value = value_at(self.user, field[:n])
            if found_user:
                found, value = value_at(self.step, field[:n])
                return found and value == user_value
        return False
