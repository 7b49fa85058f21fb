"""What the tuner tells as it goes: the silent default and the rich progress display (stderr).

Text from the spec (paths, knob values, constraints, failure details) never goes through rich markup: it is printed
as Text objects or escaped, so `[/bold]` prints as itself and `[link=...]` makes no hyperlink.
"""
from __future__ import annotations

from rich.markup import escape

from ..errors import printable
from .prune import Pruning
from .picked import section_text
from .space import Candidate, Space, _fmt_value


class Progress:
    """What the tuner tells as it goes (the default says nothing). `compiled` may come from a pool thread."""

    def space(self, space: Space, pruning: Pruning) -> None: ...
    def start(self, to_compile: int, to_measure: int, reused: int, best: dict | None) -> None: ...
    def compiled(self, cand: Candidate, ok: bool) -> None: ...
    def measured(self, cand: Candidate, row: dict, best: dict | None) -> None: ...
    def verifying(self, row: dict) -> None: ...
    def finished(self, best: dict | None) -> None: ...
    def stop(self) -> None: ...


def best_label(row: dict | None) -> str:
    if not row:
        return "best: -"
    rate = f"{row['tflops']:.0f} TFLOP/s" if row.get("tflops") else (f"{row['gbps']:.0f} GB/s" if row.get("gbps")
                                                                      else "")
    knobs = " ".join(f"{k}={_fmt_value(v)}" for k, v in (row.get("knobs") or {}).items())
    return printable(f"best {row['time_ms']:.4f} ms {rate}  {knobs}")     # knob values come from the database


class RichProgress(Progress):
    """Two bars (compile, measure) on stderr, the current best beside the measure bar."""

    def __init__(self, console=None):
        from rich.console import Console
        self.console = console or Console(stderr=True)
        self.bar = None

    def space(self, space: Space, pruning: Pruning) -> None:
        from rich.text import Text
        self.console.print(Text(space_text(space, pruning)))

    def start(self, to_compile: int, to_measure: int, reused: int, best: dict | None) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar
        self.bar = Bar(TextColumn("{task.description:8}"), BarColumn(bar_width=30), MofNCompleteColumn(),
                       TimeElapsedColumn(), TextColumn("[cyan]{task.fields[best]}"), console=self.console,
                       transient=False)
        if reused:
            self.console.print(f"{reused} candidate{'s' if reused != 1 else ''} already in the tuning database "
                               f"(not measured again)", markup=False)
        self.bar.start()
        self.t_compile = self.bar.add_task("compile", total=to_compile, best="")
        self.t_measure = self.bar.add_task("measure", total=to_measure, best=escape(best_label(best)),
                                           visible=to_measure > 0 or best is not None)

    def compiled(self, cand: Candidate, ok: bool) -> None:
        if self.bar is not None:
            self.bar.advance(self.t_compile)

    def measured(self, cand: Candidate, row: dict, best: dict | None) -> None:
        if self.bar is not None:
            self.bar.update(self.t_measure, advance=1, best=escape(best_label(best)))
            if row["status"] != "ok":
                self.console.print(f"  #{cand.index} {escape(printable(cand.label))}: [red]{escape(row['status'])}"
                                   f"[/red] {escape(printable(row['detail'][:160]))}")

    def verifying(self, row: dict) -> None:
        if self.bar is not None:
            self.bar.update(self.t_measure, best="verifying " + escape(best_label(row)))

    def finished(self, best: dict | None) -> None:
        if self.bar is not None:
            self.bar.update(self.t_measure, best=escape(best_label(best)) + (" (verified)" if best else ""))

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def space_text(space: Space, pruning: Pruning) -> str:
    knobs = ", ".join(f"{k.name} {list(k.values)}" for k in space.knobs)
    count = (f"a random sample of {pruning.total} of {space.size} points (--budget {space.budget}, seed {space.seed})"
             if space.sampled else f"{pruning.total} candidates")
    where = printable(str(space.path))
    lines = [f"{where}: {count} ({knobs}) at "
             f"{', '.join(f'{k}={v}' for k, v in space.sizes.items())}"]
    if space.default is not None:
        lines[:0] = [f"{where}: no tune section: the {space.spec.op.kind} family's default space around the "
                     f"planner's picks (schedgen explain lists them): {space.default.why}; as a tune section:",
                     f"  {section_text(space.default)}"]
    if pruning.groups:
        lines.append(f"pruned {pruning.pruned}:")
        lines += [f"  {g.line()}" for g in pruning.groups]
    lines.append(f"{len(pruning.kept)} to build and run")
    return "\n".join(lines)
