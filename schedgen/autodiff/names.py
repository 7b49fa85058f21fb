"""The names a backward derives from the user's (`grad_x`, `g_out`, `d_h`, a step spec's `<name>_grad`): legal names
(1-63 characters, not reserved) that collide with nothing taken, found in a bounded number of tries.

A user's name may be 63 characters long, so a derived one cannot always be a prefix plus the whole name: a base too
long is cut. `fresh` tries `base`, then `stem2`, `stem3`, ... with one stem (the base cut to leave room for a numeric
suffix): its candidates are distinct, only finitely many names are taken or illegal, so it ends."""
from __future__ import annotations

import itertools
from typing import Callable

from ..frontend.expr import check_identifier

MAX_NAME = 63                    # the longest legal name (frontend.expr.IDENT_RE)
_SUFFIX = 8                      # the characters kept for a numeric suffix when a base is cut
_SPARE = 10_000                  # candidates tried beyond one per taken name (each illegal one costs one)


def fresh(base: str, taken: set[str], legal: Callable[[str], bool] | None = None, sep: str = "") -> str:
    """The first of `base`, `stem<sep>2`, `stem<sep>3`, ... that is a legal name, passes `legal` and is not in
    `taken` (which it joins). `stem` is `base`, cut to leave room for the suffix when it is longer. `base` must
    start with a letter (every base is a prefix of ours or a user's name)."""
    room = MAX_NAME - _SUFFIX - len(sep)
    stem = (base if len(base) <= room else base[:room]) + sep
    for name in itertools.chain((base,), (f"{stem}{k}" for k in range(2, len(taken) + _SPARE))):
        if name not in taken and check_identifier(name) is None and (legal is None or legal(name)):
            taken.add(name)
            return name
    raise ValueError(f"no free name derived from {base!r}")   # unreachable: more candidates than names refused


def suffixed(name: str, suffix: str) -> str:
    """`name` + `suffix` (a derived spec's name: `<spec>_grad`), `name` cut so that the whole fits in 63
    characters."""
    return name[:MAX_NAME - len(suffix)] + suffix
