"""Using the results: the best known schedule per shape, the export as a plain spec, the final table."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from ..errors import SpecErrors, printable
from .. import registry as families
from ..comment import comment_text
from ..files import write_file
from ..frontend import expr as ex
from ..frontend.load import load_file
from ..frontend.validate import apply_overrides, validate_data
from .compile import toolchain_info
from .db import TuneDB
from .driver import TuneResult
from .progress import best_label
from .prune import _spec_of
from .space import _fmt_value, config_key, expand, load_space
from .trust import check_row


def current_gpu() -> str | None:
    """This machine's GPU name by nvidia-smi (no CUDA context is made), or None."""
    import subprocess
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=20)
        names = [line.strip() for line in q.stdout.splitlines() if line.strip()]
        return names[0] if q.returncode == 0 and names else None
    except (OSError, subprocess.SubprocessError):
        return None


def best_known(spec_path: str | Path, overrides: Mapping[str, Any] | None = None, *,
               db: TuneDB | str | Path | None = None, backend: str = "cuda", gpu: str | None = None,
               budget: int | None = None, seed: int = 0) -> dict | None:
    """The fastest verified result in the database among this spec's candidates at this shape (its tune section
    expanded and constrained; the plan stage is not needed for the lookup). Rows measured on `gpu` and with the
    current toolchain are preferred when there are any. `budget` and `seed` pick the same sample `tune` took. A row
    whose overrides would build anything but its candidate is a TuneDBError (trust.check_row)."""
    space = load_space(spec_path, overrides, budget=budget, seed=seed)
    keys = []
    for cand in expand(space):
        env = {**space.sizes, **cand.values}
        try:
            if not all(con.test(env) for con in space.constraints):
                continue
            keys.append(config_key(_spec_of(space, cand)))
        except (SpecErrors, ex.ExprError, KeyError, TypeError):
            continue
    _, tool_key = toolchain_info()
    dbh = db if isinstance(db, TuneDB) else TuneDB(db)
    try:
        row = dbh.best(keys, backend, gpu=gpu, toolchain_key=tool_key)
        if row is not None:
            check_row(space, row, dbh)      # its overrides set only its candidate's fields, and rebuild it
        return row
    finally:
        if not isinstance(db, TuneDB):
            dbh.close()


class _Dumper(yaml.SafeDumper):
    """YAML out: multi-line strings (bodies, epilogues) as | blocks."""


def _str_presenter(dumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_presenter)


def export_schedule(spec_path: str | Path, row: Mapping[str, Any], out_path: str | Path) -> Path:
    """Write a result back as a plain spec (YAML): the spec with the row's overrides applied and no tune
    section. The written file is loaded and planned again and must give the candidate's exact plan."""
    from .. import plan as planner
    from ..frontend.validate import load_spec
    out_path = Path(out_path)
    if out_path.suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"{out_path}: the export is written as YAML; name it .yaml")
    data, src = load_file(spec_path)
    data, problems = apply_overrides(data, row["overrides"], src)
    if problems:
        raise SpecErrors(problems, src)
    data.pop("tune", None)
    want = planner.to_json(planner.plan(validate_data(data, src), src))
    rate = f"{row['tflops']:.0f} TFLOP/s" if row.get("tflops") else (f"{row['gbps']:.0f} GB/s" if row.get("gbps")
                                                                      else "")
    knobs = " ".join(f"{k}={_fmt_value(v)}" for k, v in (row.get("knobs") or {}).items())
    check = (f"matched numpy (rel. error {row['rel_error']:.2e})" if row.get("verified") and
             row.get("rel_error") is not None else "matched numpy" if row.get("verified") else "NOT verified")
    # The whole of each comment line through comment_text: the path, the database's GPU and driver names and the
    # knob values come from outside, and a line break in any of them would end the comment and be read as YAML.
    header = "".join(f"# {comment_text(line)}\n" for line in (
        f"Tuned by `schedgen tune` from {spec_path}: {row['time_ms']:.4f} ms ({rate}) on {row.get('gpu')}, "
        f"driver {row.get('driver')}, {row.get('backend')} backend; {check}.", f"knobs: {knobs}"))
    write_file(out_path, header + yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=None,
                                           width=110, allow_unicode=True))
    spec, src2 = load_spec(str(out_path))
    got = planner.to_json(planner.plan(spec, src2))
    if got != want:
        raise RuntimeError(f"{out_path}: the written schedule plans differently from the tuned candidate")
    return out_path


# ============================================================================================== the final table


def summary(result: TuneResult, top: int = 10, show_pruning: bool = True):
    """A rich renderable: the best candidates, the failures, the pruning (unless the progress already showed it),
    the totals. Text from the spec is never read as rich markup."""
    from rich import box
    from rich.console import Group
    from rich.table import Table as _Table
    from rich.text import Text

    class Table(_Table):
        """Titles, headers and cells as Text: nothing from the spec or the database (knob values, details) is read
        as markup, and their control characters (ESC sequences, line breaks) are escaped."""

        def __init__(self, title: str = "", **kw):
            super().__init__(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                             title=Text(printable(title)), **kw)

        def add_column(self, header: str = "", **kw) -> None:
            super().add_column(Text(printable(header)), **kw)

        def add_row(self, *cells: str, **kw) -> None:
            super().add_row(*(Text(printable(c)) for c in cells), **kw)
    knob_names = [k.name for k in result.space.knobs]
    parts: list[Any] = []
    if result.dry_run:
        t = Table(title=f"{result.space.spec.name}: {result.compiled} of {len(result.pruning.kept)} candidates "
                        f"compiled (dry run: nothing measured)", title_justify="left")
        for h in ("#", *knob_names, "status", "compile s"):
            t.add_column(h, justify="right" if h in ("#", "compile s") else "left", no_wrap=True)
        for r in result.rows[:top]:
            secs = ("cached" if r.get("cache_hit") else f"{r['compile_s']:.1f}") if "compile_s" in r else "-"
            t.add_row(str(r["index"]), *[_fmt_value(r["knobs"].get(k, "")) for k in knob_names], r["status"], secs)
        parts.append(t)
    else:
        rate_col = "TFLOP/s" if families.of(result.space.spec).metric == "tflops" else "GB/s"
        title = (f"{result.space.spec.name} at {', '.join(f'{k}={v}' for k, v in result.space.sizes.items())}: "
                 f"best {min(top, len(result.rows))} of {len(result.rows)}")
        t = Table(title=title, title_justify="left")
        for h in ("rank", "time (ms)", rate_col, *knob_names, "verified", "status"):
            t.add_column(h, justify="right" if h in ("rank", "time (ms)", rate_col) else "left")
        ok = [r for r in result.rows if r["status"] == "ok"]
        for i, r in enumerate(ok[:top], 1):
            rate = r.get("tflops") if rate_col == "TFLOP/s" else r.get("gbps")
            ver = {True: f"yes {r['rel_error']:.1e}" if r.get("rel_error") is not None else "yes", False: "NO",
                   None: "-"}[r.get("verified")]
            style = "bold green" if result.best and r["key"] == result.best["key"] else None
            t.add_row(str(i), f"{r['time_ms']:.4f}", f"{rate:.0f}" if rate else "-",
                      *[_fmt_value(r["knobs"].get(k, "")) for k in knob_names], ver, r["status"], style=style)
        parts.append(t)
        bad = [r for r in result.rows if r["status"] != "ok"]
        if bad:
            tb = Table(title=f"{len(bad)} failed (recorded; not measured again)", title_justify="left")
            for h in ("status", *knob_names, "detail"):
                tb.add_column(h, overflow="fold")
            for r in bad[:top]:
                tb.add_row(r["status"], *[_fmt_value(r["knobs"].get(k, "")) for k in knob_names],
                           (r.get("detail") or "")[:200])
            parts.append(tb)
    if result.pruning.groups and show_pruning:
        parts.append(Text(f"pruned {result.pruning.pruned} of {result.pruning.total}:\n" +
                          "\n".join(f"  {g.line()}" for g in result.pruning.groups)))
    lines = [f"{result.pruning.total} candidates, {result.pruning.pruned} pruned, {result.compiled} compiled "
             f"({result.compile_s:.1f} s)"]
    if not result.dry_run:
        lines[0] += f", {result.measured} measured, {result.reused} found in the database; {result.wall_s:.1f} s in all"
        lines += result.notes       # the time budget ran out (how many left); GPUs of another model left out
        if result.best:
            lines.append(f"winner: {best_label(result.best)} (verified against numpy)")
        else:
            lines.append("no verified winner")
    else:
        lines[0] += f"; {result.wall_s:.1f} s"
    parts.append(Text("\n".join(printable(line) for line in lines)))
    return Group(*parts)
