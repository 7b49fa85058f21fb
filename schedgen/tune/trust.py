"""A database row against the space that uses it. A row's `overrides` are applied over the spec file to rebuild what
was measured (`build --tuned`, `tune --export`, the bucketed build), and the file can be edited by anyone: so a row
may set only the fields its candidate sets (its knobs' fields, the planner's picks written in, the sizes and the
user's -D fields), and those must rebuild the very candidate the row was measured as (its config_key). A row that
sets `op.body` or an input's dtype would otherwise build, silently, a package that computes something else.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from ..errors import SpecErrors, format_path
from ..frontend.validate import apply_overrides, validate_data
from .db import TuneDB, TuneDBError
from .space import Space, config_key


def legal_keys(space: Space) -> list[str]:
    """The override keys a row of this space may hold: its knobs' fields, the picks, the sizes and the user's -D
    fields (what `expand` writes into a candidate's overrides)."""
    keys = [".".join(t.path) for k in space.knobs for t in k.targets]
    return list(dict.fromkeys([*keys, *space.picked, *space.sizes, *space.user_overrides]))


def check_row(space: Space, row: Mapping[str, Any], dbh: TuneDB, *, config: str | None = None,
              expected: Mapping[str, Any] | None = None) -> None:
    """Raise TuneDBError (the file, the row, the key) unless the row's overrides set only the fields of its
    candidate and rebuild it: the spec file with the user's overrides, then the row's, has the row's config_key
    (and `config`, the candidate's, when given). `expected`: the candidate's own overrides; a row holding exactly
    those is its candidate without rebuilding anything."""
    where = f"{dbh.row_name('results', row.get('rowid'), row.get('key'))}, column overrides"
    if config is not None and row["config_key"] != config:
        raise TuneDBError(f"{dbh.row_name('results', row.get('rowid'), row.get('key'))}, column config_key: not the "
                          f"key of the candidate the row is stored under; delete the row (tune measures it again)")
    overrides = row["overrides"]
    legal = legal_keys(space)
    for key in overrides:
        if key not in legal:
            raise TuneDBError(f"{where}: {key[:80]!r} is not a field this spec's tune space sets; a row may set only "
                              f"its candidate's fields ({_listed(legal)}); delete the row, or tune again")
    if expected is not None and _same(overrides, expected):
        return
    try:
        data, problems = apply_overrides(space.data, {**space.user_overrides, **overrides}, space.src)
        if problems:
            raise SpecErrors(problems, space.src)
        got = config_key(validate_data(data, space.src))
    except SpecErrors as exc:
        first = exc.problems[0]
        raise TuneDBError(f"{where}: {format_path(first.path)}: {first.message}; delete the row, or tune "
                          f"again") from None
    if got != row["config_key"]:
        raise TuneDBError(f"{where}: its values build another spec than the candidate the row was measured as (its "
                          f"config_key); delete the row, or tune again")


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    def text(v: Mapping[str, Any]) -> str:
        return json.dumps(v, sort_keys=True, default=str)
    return text(a) == text(b)


def _listed(keys: list[str], most: int = 8) -> str:
    return ", ".join(keys[:most]) + (f", ... ({len(keys)} in all)" if len(keys) > most else "")
