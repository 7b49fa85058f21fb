"""Command line: argument parsing and printing only. Every stage lives in its own module."""
from __future__ import annotations

import argparse
import errno
import os
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from . import registry as families
from .errors import (MAX_MESSAGE, Problem, SpecErrors, ToolchainError, clip, printable, quoted,
                     stop_quietly_on_broken_pipe)
from .files import NotARegularFile, UnreadableFile, existing_mode, read_bytes, write_file
from .supervise import MAX_TIMEOUT, OK, Outcome, call_with_timeout, timeout_problem

EXIT_OK, EXIT_FAIL, EXIT_SPEC, EXIT_TOOLCHAIN, EXIT_NOTHING_VERIFIED = 0, 1, 2, 3, 4
# (and errors.EXIT_BROKEN_PIPE, 141: stdout's reader went away, as if killed by SIGPIPE)


SHOWN_ARG = 80           # a command-line value echoed in a message: whole up to this many characters, else cut
MAX_WHOLE_DIGITS = 19    # every count, bound, size or seed a command takes fits in 63 bits


def _cut(message: str) -> str:
    """A message cut to MAX_MESSAGE characters (what each check echoes is clipped first: this is the backstop)."""
    return message if len(message) <= MAX_MESSAGE else f"{message[:MAX_MESSAGE]}…({len(message)} characters)"


def _usage(message: str) -> SystemExit:
    """A usage error: printed as one line (control characters of paths and values in it escaped), exit status 2
    (like argparse's own)."""
    print(f"schedgen: {_cut(printable(message))}", file=sys.stderr)
    return SystemExit(EXIT_SPEC)


def _shown(text) -> str:
    """A path, a name or a value from outside (the command line, a file, the environment, a database) as one line
    of printable text: control characters (a newline that would forge a line, ESC sequences) escaped."""
    return printable(os.fsdecode(text) if isinstance(text, (bytes, os.PathLike)) else str(text))


def _write(option: str, path, data, what: str) -> None:
    """A file the user named, written by schedgen.files.write_file (never through a symbolic link, never into a
    FIFO or device); what the OS refuses is a one-line usage error."""
    try:
        write_file(path, data)
    except OSError as exc:
        raise _os_usage(option, path, exc, what) from None


def shown_arg(text: str) -> str:
    """A command-line value as a message quotes it: cut when long (`'99999…'…(5000 characters)`)."""
    return quoted(text, SHOWN_ARG)


def whole_number(text: str) -> int | None:
    """`text` as a whole number >= 0 (ASCII digits, at most MAX_WHOLE_DIGITS significant ones), or None: a
    5000-digit number is refused here, before int() (which refuses more than 4300 digits with a ValueError)."""
    t = text.strip()
    if not (t.isascii() and t.isdigit()) or len(t.lstrip("0")) > MAX_WHOLE_DIGITS:
        return None
    return int(t)


class _Parser(argparse.ArgumentParser):
    """argparse whose own error messages ('invalid choice: ...', 'unrecognized arguments: ...') quote a huge
    argument cut, with its length, not whole."""

    def error(self, message: str):
        # a word longer than any value the checks above already cut (quoted, plus its length) is argparse's echo
        words = re.sub(r"\S{%d,}" % (2 * SHOWN_ARG + 40), lambda m: clip(m.group(0), SHOWN_ARG), message)
        super().error(_cut(words))


_OS_REASONS = {
    errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted", errno.EEXIST: "a file (not a folder) is in the way",
    errno.ENOTDIR: "a file (not a folder) is in the way", errno.EISDIR: "it is a folder",
    errno.ELOOP: "a loop of symbolic links", errno.ENAMETOOLONG: "the name is too long",
}


def _os_usage(option: str, path, exc: OSError, what: str) -> SystemExit:
    """An output the OS refused (a file where a folder must go, read-only, full, a bad symlink): one line, exit 2."""
    why = exc.strerror if isinstance(exc, NotARegularFile) else \
        _OS_REASONS.get(exc.errno, (exc.strerror or type(exc).__name__).lower())
    at = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
    for link in dict.fromkeys(str(x) for x in (path, exc.filename) if x):
        if os.path.islink(link):
            at += f"; {link} is a symbolic link to {os.readlink(link)}{'' if os.path.exists(link) else ' (missing)'}"
    return _usage(f"{option} {path}: cannot write {what}: {why}{at}")


def _seconds(*, zero: str = ""):
    """An argparse type: a finite number of seconds, 0 < t <= supervise.MAX_TIMEOUT (and 0 itself when `zero` says
    what it means). NaN, inf, 1e300 and negative numbers are usage errors, not tracebacks, hangs or a silently
    disabled watchdog."""
    legal = f"seconds above 0 and at most {MAX_TIMEOUT:g}" + (f", or 0 ({zero})" if zero else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{shown_arg(text)} is not a number: give {legal}") from None
        if zero and value == 0:
            return 0.0
        if timeout_problem(value):
            raise argparse.ArgumentTypeError(f"{shown_arg(text)}: give {legal}")
        return value
    return parse


def _count(least: int, most: int = 2 ** 63 - 1):
    """An argparse type: a whole number, least <= n <= most (workers, iterations, rows, a seed)."""
    legal = f"give a whole number >= {least}" + (f" and <= {most}" if most < 2 ** 63 - 1 else "")

    def parse(text: str) -> int:
        value = whole_number(text)
        t = text.strip()
        if value is None and not t.startswith("-"):
            why = "is too large" if t.isascii() and t.lstrip("+").isdigit() else "is not a whole number"
            raise argparse.ArgumentTypeError(f"{shown_arg(text)} {why}: {legal}") from None
        if value is None or not least <= value <= most:
            raise argparse.ArgumentTypeError(f"{shown_arg(text)}: {legal}")
        return value
    return parse


def _writable_file(option: str, path, what: str) -> None:
    """An output file checked before a long run: a symbolic link, FIFO, device or folder at `path` fails now (it
    is never written through: schedgen.files), not after the run."""
    try:
        existing_mode(Path(path))
    except OSError as exc:
        raise _os_usage(option, path, exc, what) from None


def _writable_folder(option: str, folder, what: str, given=None) -> None:
    """Make `folder` (for an output written after a long run) now, so a bad path fails before the run, not after;
    `given` is the path as the option named it (default: the folder)."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _os_usage(option, folder if given is None else given, exc, what) from None


def _overrides(args) -> dict:
    from .frontend.validate import parse_overrides
    try:
        return parse_overrides(args.define or [])
    except ValueError as exc:
        raise _usage(str(exc)) from None


def _size_set(text: str) -> dict[str, int]:
    """`B=4,S=4096` as {"B": 4, "S": 4096} (argparse's type for bench --at)."""
    out = {}
    for part in text.split(","):
        name, eq, value = part.partition("=")
        name = name.strip()
        number = whole_number(value)
        if not eq or not name.isidentifier() or number is None:
            raise argparse.ArgumentTypeError(f"{shown_arg(part)}: expected NAME=VALUE with a positive integer value "
                                             f"of at most {MAX_WHOLE_DIGITS} digits, e.g. --at B=4,S=4096")
        out[name] = number
    return out


def _add_define(p: argparse.ArgumentParser) -> None:
    p.add_argument("-D", dest="define", action="append", metavar="NAME=VALUE",
                   help="override a size (-D M=8192) or any field (-D schedule.pipeline.max_concurrent_steps=3)")


def _add_buckets(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--buckets", action="append", metavar="SIZE=B1,B2,...", help=what)


def _add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="the tuning database (default: $SCHEDGEN_TUNE_DB, else tune.sqlite in the cache)")


def _add_tuned(p: argparse.ArgumentParser, what: str) -> None:
    """--tuned, --db and --buckets of verify / explain / bench: the variants of the bucketed build."""
    p.add_argument("--tuned", action="store_true", help=what)
    _add_db(p)
    _add_buckets(p, "with --tuned: these buckets instead of the spec's tune.buckets")


def cmd_validate(args) -> int:
    """Each file through every stage that can run: the schema (a file that fails it cannot be planned), then the
    plan and the tune section (checked as `schedgen tune` checks it) together, all their problems in one report;
    a planned spec's backward section as `build` checks it (its derived kernels planned too)."""
    from .bucketed import derived_table
    from .plan import plan
    from .frontend.validate import load_spec
    status = EXIT_OK
    for path in args.files:
        try:
            spec, src = load_spec(path, _overrides(args))
        except SpecErrors as exc:
            # the tune constraints still parse on the raw file: report them with the schema's problems
            from .frontend.load import load_file
            from .tune.space import raw_constraint_problems
            try:
                more = raw_constraint_problems(load_file(path)[0])
            except Exception:                   # a file that does not load: the schema's report says why
                more = []
            print(SpecErrors(exc.problems + more, exc.source).render(), file=sys.stderr)
            status = EXIT_SPEC
            continue
        problems = []
        try:
            plan(spec, src)
            if spec.backward is not None:
                from .build import check_backward   # (the build stack: only for a spec with a backward section)
                check_backward(spec, src)
        except SpecErrors as exc:
            problems += exc.problems
        problems += _bucket_problems(spec, _overrides(args))
        try:                        # schedule.dispatch: auto, checked as `build` derives its table
            derived_table(spec, src, _overrides(args))
        except SpecErrors as exc:
            problems += exc.problems
        if spec.tune is not None and spec.tune.params:
            from .tune.space import load_space     # as `schedgen tune` reads it (the picks written in)
            try:
                load_space(path, _overrides(args))
            except SpecErrors as exc:
                problems += exc.problems
        if problems:
            print(SpecErrors(problems, src).render(), file=sys.stderr)
            status = EXIT_SPEC
        else:
            print(f"{_shown(path)}: ok ({spec.op.kind} '{spec.name}')")
    return status


def _bucket_problems(spec, overrides: dict) -> list:
    """tune.buckets checked against the sizes (a bucketed size that -D fixes is one shape: not checked)."""
    given = {k: v for k, v in (spec.tune.buckets if spec.tune is not None else {}).items() if k not in overrides}
    if not given:
        return []
    from .tune.buckets import problems_of      # (the tune package: only for a spec with buckets)
    return [Problem(("tune", "buckets", *p), m) for p, m in problems_of(spec, given)]


def _buckets(path: str, overrides: dict, args):
    """The spec's buckets (or --buckets), checked; None without any (or when -D fixes a bucketed size: said)."""
    from .tune.buckets import BucketsError, load, parse_cli
    try:
        cli = parse_cli(args.buckets) if args.buckets else None
        buckets, note = load(path, overrides, cli)
    except BucketsError as exc:
        raise _usage(str(exc)) from None
    if note:
        print(f"{_shown(path)}: {note}", file=sys.stderr)
    return buckets


SCHEMA_OUT, REFERENCE_OUT = "schemas/schedgen.schema.json", "docs/spec-reference.md"


def cmd_schema(args) -> int:
    if args.markdown:
        from .frontend.schemadoc import reference_markdown
        text = reference_markdown()
    else:
        from .frontend.schema import schema_json
        text = schema_json()
    if args.print:
        if args.check or args.output:
            raise _usage("--print writes to stdout: it takes neither -o nor --check")
        sys.stdout.write(text)
        return EXIT_OK
    args.output = args.output or (REFERENCE_OUT if args.markdown else SCHEMA_OUT)
    if args.check:
        if _current(args.output, len(text.encode())) != text.encode():
            again = "schedgen schema" + (" --markdown" if args.markdown else "")
            print(f"{_shown(args.output)} is out of date; run: {again}", file=sys.stderr)
            return EXIT_FAIL
        print(f"{_shown(args.output)}: up to date")
        return EXIT_OK
    _write("-o", args.output, text, "the schema")
    print(f"wrote {_shown(args.output)}")
    return EXIT_OK


def _current(path, limit: int) -> bytes | None:
    """schema --check: the bytes of the file to compare (b"" when there is none; None when it is larger than
    `limit`, so not the same), read by schedgen.files (a FIFO or a device is a usage error, not a hang)."""
    if not os.path.lexists(path):
        return b""
    try:
        return read_bytes(path, limit)
    except UnreadableFile as exc:
        if exc.too_large:
            return None
        raise _usage(f"-o {exc.located(path)}") from None


def cmd_new(args) -> int:
    from .starter import starter_text
    dest = Path(args.output) if args.output else None
    try:
        text = starter_text(args.kind, dest, args.name)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    if dest is None:
        print(text, end="")
        return EXIT_OK
    if os.path.lexists(dest) and not args.force:
        link = " (a symbolic link)" if dest.is_symlink() else ""
        raise _usage(f"-o {dest}: the file exists{link}; give another name or --force to overwrite it")
    _write("-o", dest, text, "the starter spec")
    print(f"wrote {_shown(dest)} ({args.kind} family; next: schedgen explain {_shown(dest)})")
    return EXIT_OK


def cmd_build(args) -> int:
    from .build import build_spec, package
    if args.buckets and not args.tuned:
        raise _usage("--buckets goes with --tuned (it packages the tuning database's winner of each bucket)")
    status = EXIT_OK
    for path in args.files:
        overrides, note = _overrides(args), ""
        try:
            buckets = _buckets(path, overrides, args) if args.tuned else None
            if buckets is not None:
                _build_buckets(path, overrides, buckets, args)
                continue
            if args.tuned:
                overrides, note = _tuned(path, overrides, args)
            elif _build_derived(path, overrides, args):
                continue
            built = build_spec(path, overrides)
        except SpecErrors as exc:
            print(exc.render(), file=sys.stderr)
            status = EXIT_SPEC
            continue
        try:
            dest = package(built, args.output)
        except OSError as exc:          # -o is a file, read-only, full, a symlink to one of those: the same for all
            raise _os_usage("-o", args.output, exc, "the package") from None
        print(f"{_shown(path)}: built {built.plan.launch.kernel_name} -> {_shown(dest)}{' (cached)' if built.cache_hit else ''}{note}")
        bw = built.backward
        if bw is not None:
            print(f"  backward: gradients of {', '.join(bw.graph.grads) or '(none)'}; "
                  f"{len(bw.steps)} kernel{'s' if len(bw.steps) != 1 else ''} in {dest / 'backward'}: "
                  + ", ".join(f"{n}{' (cached)' if b.cache_hit else ''}" for n, b in bw.steps.items())
                  + _passed_through(bw.graph))
        for w in (*built.warnings, *(w for b in (bw.steps.values() if bw else ()) for w in b.warnings)):
            print(w, file=sys.stderr)
    return status


def _build_buckets(path: str, overrides: dict, buckets, args) -> None:
    """build --tuned of a bucketed spec: each bucket's best schedule a variant of one package (bucketed.py)."""
    from .bucketed import describe, package_bucketed
    bb = _bucketed(path, overrides, buckets, args)
    try:
        dest = package_bucketed(bb, args.output)
    except OSError as exc:
        raise _os_usage("-o", args.output, exc, "the package") from None
    print(f"{_shown(path)}: built {bb.name} (bucketed) -> {_shown(dest)}{' (cached)' if bb.cache_hit else ''}\n{describe(bb)}")
    steps = tuple(bb.backward.steps.values()) if bb.backward is not None else ()
    for w in dict.fromkeys(w for b in (*bb.variants, *steps) for w in b.warnings):
        print(w, file=sys.stderr)


def _build_derived(path: str, overrides: dict, args) -> bool:
    """build of a spec with schedule.dispatch: auto: the derived buckets' schedules as the variants of one package
    (bucketed.build_derived); False (build as usual) when the spec does not ask for it."""
    from .bucketed import build_derived, describe, package_bucketed
    bb = build_derived(path, overrides)
    if bb is None:
        return False
    try:
        dest = package_bucketed(bb, args.output)
    except OSError as exc:
        raise _os_usage("-o", args.output, exc, "the package") from None
    print(f"{_shown(path)}: built {bb.name} (dispatch: auto, derived buckets) -> {_shown(dest)}"
          f"{' (cached)' if bb.cache_hit else ''}\n{describe(bb)}")
    steps = tuple(bb.backward.steps.values()) if bb.backward is not None else ()
    for w in dict.fromkeys(w for b in (*bb.variants, *steps) for w in b.warnings):
        print(w, file=sys.stderr)
    return True


def _bucketed(path: str, overrides: dict, buckets, args, *, extra=None, require_result: bool = False):
    """The bucketed build of `path` (tune/buckets.build_tuned): what build --tuned packages and verify / explain /
    bench --tuned look at; an unusable --db (or, with require_result, one without any bucket's result) is one
    line."""
    from .tune import TuneDBError
    from .tune.buckets import build_tuned
    try:
        return build_tuned(path, overrides, buckets, db=args.db, extra=extra, require_result=require_result)
    except TuneDBError as exc:
        raise _usage(str(exc)) from None


def _tuned_buckets(path: str, overrides: dict, args, *, extra=None, build: bool = True):
    """verify / explain / bench --tuned: the spec's bucketed build. A spec without buckets, a -D that fixes a
    bucketed size, or a database without any bucket's result is a one-line usage error. `build=False`: the checks
    that need no build only, True when --tuned is given (verify builds under its watchdog)."""
    if not args.tuned:
        if args.buckets or args.db:
            raise _usage(f"{'--buckets' if args.buckets else '--db'} goes with --tuned (the variants of a bucketed "
                         f"build)")
        return None
    buckets = _buckets(path, overrides, args)
    if buckets is None:
        raise _usage(f"{path}: --tuned looks at the variants of a bucketed build, and there are no buckets here "
                     f"(no tune.buckets in the spec and no --buckets SIZE=B1,B2,..., or a -D fixes the bucketed size)")
    return _bucketed(path, overrides, buckets, args, extra=extra, require_result=True) if build else True


def _tuned(path: str, overrides: dict, args) -> tuple[dict, str]:
    """build --tuned: the best verified schedule the tuning database knows for this spec at this shape."""
    from .tune import NothingToTune, TuneDBError, best_known, best_label, current_gpu
    try:
        row = best_known(path, overrides, db=args.db, backend="cuda", gpu=current_gpu())
    except TuneDBError as exc:
        raise _usage(str(exc)) from None
    except NothingToTune:
        print(f"{_shown(path)}: no tune section; building the file's own schedule", file=sys.stderr)
        return overrides, ""
    if row is None:
        print(f"{_shown(path)}: the tuning database has no verified result for this spec at "
              f"{', '.join(f'{k}={v}' for k, v in _sizes(path, overrides).items())}; building the file's own "
              f"schedule (run: schedgen tune {_shown(path)})", file=sys.stderr)
        return overrides, ""
    return {**overrides, **row["overrides"]}, f"\n  tuned: {best_label(row)} on {_shown(row['gpu'])}"


def _sizes(path: str, overrides: dict) -> dict:
    from .frontend.validate import load_spec
    return dict(load_spec(path, overrides)[0].op.sizes)


def cmd_explain(args) -> int:
    from .explain import check_at, explain, plan_at
    from .plan import plan_with_picks, to_json
    from .frontend.validate import load_spec
    if args.variant is not None and not args.tuned:
        raise _usage("--variant goes with --tuned (a variant of the bucketed build)")
    if args.at and args.tuned:
        raise _usage("--at explains the spec's own package at one call's sizes; drop --tuned (--tuned explains each "
                     "bucket's variant)")
    bb = _tuned_buckets(args.file, _overrides(args), args)
    if bb is not None:
        return _explain_buckets(args, bb)
    spec, src = load_spec(args.file, _overrides(args))
    if not args.json and not args.at and not args.draw and _explain_derived(args, spec, src):
        return EXIT_OK
    p, picks = plan_with_picks(spec, src)
    at = _explain_at(args, p, src, check_at)
    if at is None and args.at:
        return EXIT_SPEC
    if args.json:
        print(to_json(plan_at(p, at)))
    else:
        print(explain(p, picks, at=at))
    if not args.json and getattr(spec, "backward", None) is not None:
        from .explain import explain_backward
        print(explain_backward(spec, src, at=at), end="")
    if args.draw:
        from .draw import draw
        try:
            print(f"wrote {_shown(draw(plan_at(p, at), args.draw))}", file=sys.stderr if args.json else sys.stdout)
        except ValueError as exc:
            raise _usage(str(exc)) from None
    return EXIT_OK


def _explain_derived(args, spec, src) -> bool:
    """explain of a spec with a derived dispatch table (schedule.dispatch: auto, and no -D fixing a size): the table
    (range, schedule, why), then each bucket's explain; False when there is none."""
    from .bucketed import derived_table
    from .explain import explain, explain_backward
    from .frontend.validate import load_spec
    from .plan import plan_with_picks
    overrides = _overrides(args)
    table = derived_table(spec, src, overrides)
    if table is None:
        return False
    print(f"{_shown(args.file)}: {spec.name}\n{table.text()}")
    for b in table.buckets:
        vspec, vsrc = load_spec(args.file, {**overrides, **b.overrides})
        p, picks = plan_with_picks(vspec, vsrc)
        print(f"\n=== {table.size} {b.lo}..{b.hi}: {b.schedule} ===\n{explain(p, picks).rstrip()}")
    if getattr(spec, "backward", None) is not None:
        print(explain_backward(spec, src), end="")
    return True


def _explain_at(args, plan, src, explain_check_at) -> dict[str, int] | None:
    """explain --at NAME=VALUE[,NAME=VALUE...] checked against the plan's dynamic sizes: the sizes (None without
    --at, or, after printing each problem located at the spec's size with what is legal, when one is wrong)."""
    if not args.at:
        return None
    raw, problems = {}, []
    for arg in args.at:
        for part in arg.split(","):
            name, eq, value = part.partition("=")
            if not eq or not name.strip():
                problems.append(Problem(("op", "sizes"), f"--at {part}: expected NAME=VALUE (a dynamic size and an "
                                                         f"integer), e.g. --at S=4096"))
                continue
            raw[name.strip()] = value.strip()
    sizes, more = explain_check_at(plan, raw)
    problems += more
    if problems:
        print(SpecErrors(problems, src).render(), file=sys.stderr)
        return None
    return sizes


def _explain_buckets(args, bb) -> int:
    """explain --tuned: the bucket table, then each variant's explain (or --variant N's alone); --json: the dispatch
    record and the variants' plans; --draw: the schedule of --variant N."""
    import json

    from .bucketed import describe, served_by
    from .explain import explain, explain_backward
    from .plan import plan_with_picks, to_json
    n = len(bb.variants)
    if args.variant is not None and not 0 <= args.variant < n:
        raise _usage(f"--variant {args.variant}: {bb.name} has {n} variant{'s' if n != 1 else ''} (0..{n - 1})")
    if args.draw and args.variant is None:
        raise _usage("--draw draws one schedule: with --tuned, name the variant (--variant N)")
    shown = [args.variant] if args.variant is not None else list(range(n))
    if args.json:
        print(json.dumps({"dispatch": bb.record.to_dict(),
                          "variants": {bb.record.variants[i]: json.loads(to_json(bb.variants[i].plan))
                                       for i in shown}}, indent=1, sort_keys=True))
    else:
        print(f"{_shown(args.file)}: {bb.name} (bucketed)\n{describe(bb)}")
        for i in shown:
            built = bb.variants[i]
            _, picks = plan_with_picks(built.spec, built.source)
            print(f"\n=== {bb.record.variants[i]} (serves {served_by(bb.record, i)}) ===\n{explain(built.plan, picks).rstrip()}")
        if bb.backward is not None:          # the package's one backward, whichever variant ran the forward
            print(explain_backward(bb.backward.written, bb.variants[0].source), end="")
    if args.draw:
        from .draw import draw
        try:
            print(f"wrote {_shown(draw(bb.variants[args.variant].plan, args.draw))}",
                  file=sys.stderr if args.json else sys.stdout)
        except ValueError as exc:
            raise _usage(str(exc)) from None
    return EXIT_OK


def _verify_fn(path: str, spec, args):
    """verify of a bucketed build: --tuned's (verify_tuned_file), or the derived table's of a spec with
    schedule.dispatch: auto (verify_derived_file), as (function, its keywords); None: the spec's own kernel."""
    from .bucketed import asks_derived
    from .tune.buckets import parse_cli
    from .verify_buckets import verify_derived_file, verify_tuned_file
    if _tuned_buckets(path, _overrides(args), args, build=False):
        return verify_tuned_file, {"buckets_cli": parse_cli(args.buckets) if args.buckets else None,
                                   "db": args.db, "sizes": args.sizes}
    if not args.tuned and asks_derived(spec, _overrides(args)):
        return verify_derived_file, {"sizes": args.sizes}
    return None


def _backends(arg: str) -> list[str]:
    return ["cuda", "pallas"] if arg == "all" else [arg]


def cmd_verify(args) -> int:
    import math

    from .frontend.validate import load_spec
    from .verify import Check, verify_file
    backends = _backends(args.backend)
    if args.sanitize:
        if args.tuned:
            raise _usage("--sanitize runs the spec's own schedule; drop --tuned (or build --tuned and run a "
                         "variant's package under compute-sanitizer)")
        return _cmd_sanitize(args, ["cuda"] if args.backend == "all" else backends)
    if args.interpret and "cuda" in backends:
        if args.backend == "all":
            backends = ["pallas"]
        else:
            raise _usage("--interpret runs the Pallas backend on the CPU; use --backend pallas")
    status, rows = EXIT_OK, []
    for path in args.files:
        small = args.small or (args.interpret and not args.full_size)
        try:
            # what needs no planning is checked here (the schema, --tuned's buckets); building the spec (planning,
            # deriving its backward, compiling) runs under the watchdog with the rest
            spec = load_spec(path, _overrides(args))[0]
            name = spec.name
            fn, kw = _verify_fn(path, spec, args) or (verify_file, {"sizes": args.sizes, "edges": args.edges,
                                                                    "magnitude": args.magnitude})
        except SpecErrors as exc:
            print(exc.render(), file=sys.stderr)
            status = EXIT_SPEC
            continue
        call = (fn, path, backends, _overrides(args))
        kw |= {"interpret": args.interpret, "small": small, "seed": args.seed}
        if args.timeout <= 0:
            run = Outcome(OK, checked(*call, **kw))
        else:
            run = call_with_timeout(checked, *call, timeout=args.timeout, **kw)
        if not run.ok:
            rows.append(Check(name, "/".join(backends), "-", {}, "-", math.inf, 0.0, False,
                              f"{run.status}: {run.detail}"))
            continue
        kind, value = run.value
        if kind == "usage":
            raise _usage(value)
        if kind == "toolchain":
            raise ToolchainError(value)
        if kind == "spec":
            print(value, file=sys.stderr)
            status = EXIT_SPEC
            continue
        rows += value
    wide = max([8, *(len(c.output) for c in rows)])      # a backward's gradient rows: grad:<input>
    print(f"{'spec':24} {'backend':7} {'output':{wide}} {'dtype':6} {'shape':28} {'rel.error':>10} {'tol':>8}  result")
    for c in rows:
        shape = ",".join(f"{k}={v}" for k, v in c.shape.items()) + (f" |x|~{c.magnitude:g}" if c.magnitude != 1 else "")
        print(f"{c.spec:24} {c.backend:7} {c.output:{wide}} {c.dtype:6} {shape:28} {c.rel_error:10.2e} {c.tolerance:8.0e}  "
              f"{c.result}{'  ' + printable(c.note) if c.note else ''}")
    if args.json:
        import json
        write_file(args.json, json.dumps([c.row() | {"result": c.result} for c in rows], indent=1, default=str) + "\n")
    return status if status != EXIT_OK else _verify_status(rows)


def checked(fn, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """`fn(*args, **kwargs)` (verify_file, verify_tuned_file) as `schedgen verify` runs it under its watchdog, with
    the spec's problems as values: building a spec plans it and derives its backward, which is work the time limit
    covers too. ("checks", the checks), ("spec", the rendered SpecErrors), ("usage", a one-line usage error: a
    tuning database without a result) or ("toolchain", a ToolchainError's message)."""
    from .tune.db import TuneDBError
    try:
        return "checks", fn(*args, **kwargs)
    except SpecErrors as exc:
        return "spec", exc.render()
    except TuneDBError as exc:
        return "usage", str(exc)
    except ToolchainError as exc:
        return "toolchain", str(exc)


def _verify_status(rows) -> int:
    """0: nothing FAILed and at least one check passed; 1: a check FAILed; 4: every check was SKIPped (nothing was
    verified: a CPU-only machine without --interpret, say). A spec error (2) is decided before."""
    if any(c.result == "FAIL" for c in rows):
        return EXIT_FAIL
    if rows and not any(c.ok for c in rows):
        print(f"schedgen: nothing was verified: {len(rows)} of {len(rows)} checks skipped (the SKIP rows say why); "
              f"exit status {EXIT_NOTHING_VERIFIED}", file=sys.stderr)
        return EXIT_NOTHING_VERIFIED
    return EXIT_OK


def _cmd_sanitize(args, backends: list[str]) -> int:
    from .build import build_spec
    from .sanitize import TOOLS, sanitize
    tools = [t.strip() for t in args.sanitize.split(",") if t.strip()]
    bad = [t for t in tools if t not in TOOLS]
    if bad:
        raise _usage(f"--sanitize: unknown tool '{bad[0]}'; tools: {', '.join(TOOLS)}")
    if args.sanitize_logs:
        _writable_folder("--sanitize-logs", args.sanitize_logs, "the sanitizer logs")
    status, runs = EXIT_OK, []
    for path in args.files:
        try:
            name = build_spec(path, _overrides(args)).name
        except SpecErrors as exc:
            print(exc.render(), file=sys.stderr)
            status = EXIT_SPEC
            continue
        for backend in backends:
            try:
                runs += sanitize(path, name, tools, backend, args.define or [], small=not args.full_size,
                                 log_dir=args.sanitize_logs or None)
            except FileNotFoundError as exc:
                raise _usage(str(exc)) from None
            except OSError as exc:
                raise _os_usage("--sanitize-logs", args.sanitize_logs, exc, "the sanitizer logs") from None
    print(f"{'spec':24} {'backend':7} {'tool':10} {'errors':>6}  result")
    for r in runs:
        errors = "-" if r.errors is None else str(r.errors)
        print(f"{r.spec:24} {r.backend:7} {r.tool:10} {errors:>6}  {'ok' if r.ok else 'FAIL'}"
              f"{'  ' + printable(r.detail) if r.detail else ''}")
        if not r.ok and status == EXIT_OK:
            status = EXIT_FAIL
    return status


def cmd_bench(args) -> int:
    from .bench import RecordError, bench_built, check_at, environment, print_skips, read_record
    from .build import build_spec
    try:
        old = read_record(args.json) if args.json else []     # a --json that is not a record: before any timing
    except RecordError as exc:
        raise _usage(str(exc)) from None
    if args.markdown:
        _writable_file("--markdown", args.markdown, "the table")
    env = environment()
    rows = []
    for path in args.files:
        try:
            bb = _tuned_buckets(path, _overrides(args), args)
            built = bb.variants[0] if bb is not None else build_spec(path, _overrides(args))
        except SpecErrors as exc:
            print(exc.render(), file=sys.stderr)
            return EXIT_SPEC
        if families.of(built.plan).multi_device:
            raise _usage(f"{path}: schedgen bench times one GPU; the {built.plan.launch.family} family runs on "
                         f"{built.plan.num_devices} GPUs and is timed by bench/multi_gpu.py")
        ats = args.at or [{}]
        problems = [p for at in ats for p in check_at(built.plan, at)] if args.at else []
        if problems:
            raise _usage(f"{path}: --at: " + "; ".join(problems))
        for at in ats:
            if bb is None:
                rows += bench_built(built, _backends(args.backend), iters=args.iters, env=env, at=at)
                continue
            vid, variant = _bench_variant(path, bb, at)
            rows += [dict(r, spec=f"{r['spec']}/{vid}") for r in
                     bench_built(variant, _backends(args.backend), iters=args.iters, env=env, at=at)]
    skipped = [r for r in rows if r.get("skipped")]
    rows = print_skips(rows)                                   # not run here (no GPU): SKIP and the reason
    if skipped and not rows:
        return _nothing_timed(skipped, args.allow_skip)
    _bench_outputs(args, rows, old)
    return EXIT_OK if all(r["verified"] for r in rows) else EXIT_FAIL


def _bench_outputs(args, rows: list[dict], old: list[dict]) -> None:
    """bench's files (--json merged into, --markdown of the whole record, --report) and the table of `rows`."""
    from .bench import markdown, merge_rows, write_record
    merged = rows
    if args.json and rows:
        merged = merge_rows(args.json, rows, old)
        try:
            write_record(args.json, merged)
        except OSError as exc:
            raise _os_usage("--json", args.json, exc, "the record") from None
        if args.markdown:
            _write("--markdown", args.markdown, markdown(merged), "the table")
    print(markdown(rows), end="")
    if args.report:
        from .report import write_report
        try:
            files = write_report(merged, args.report)
        except OSError as exc:
            raise _os_usage("--report", args.report, exc, "the report") from None
        for f in files.values():
            print(f"wrote {_shown(f)}")


def _nothing_timed(skipped: list[dict], allow: bool) -> int:
    """bench where every row was skipped: exit 4 (nothing timed) with each reason and the rows it skipped, or 0
    with --allow-skip (a CPU-only machine, CI)."""
    why: dict[str, list[str]] = {}
    for r in skipped:
        why.setdefault(str(r["skipped"]), []).append(f"{r['spec']} {r['backend']}")
    said = "; ".join(f"{', '.join(rows)}: {reason}" for reason, rows in why.items())
    if allow:
        print(f"schedgen: nothing was timed ({len(skipped)} rows skipped; --allow-skip)", file=sys.stderr)
        return EXIT_OK
    print(f"schedgen: nothing was timed: {len(skipped)} of {len(skipped)} rows skipped ({said}); exit status "
          f"{EXIT_NOTHING_VERIFIED} (--allow-skip exits 0 when every row is skipped)", file=sys.stderr)
    return EXIT_NOTHING_VERIFIED


def _bench_variant(path: str, bb, at: dict):
    """bench --tuned --at: (its id, its build) of the variant the package's dispatch picks at `at` (sizes not named: their max, as bench
    times them), said on stdout."""
    from .bucketed import bucket_label
    ranges = {r.name: r for r in bb.variants[0].plan.launch.dynamic_sizes}
    values = [at.get(s, ranges[s].max) for s in bb.record.sizes]
    cell = bb.record.cell(values)
    i = bb.record.table[cell]
    shown = ", ".join(f"{s}={v}" for s, v in zip(bb.record.sizes, values))
    print(f"{_shown(path)}: at {shown} the dispatch picks {bb.record.variants[i]} (bucket {bucket_label(bb.record, cell)})")
    return bb.record.variants[i], bb.variants[i]


def cmd_tune(args) -> int:
    from rich.console import Console

    from .tune import (MAX_SPACE, RichProgress, TuneDBError, best_known, best_label, export_schedule,
                       summary, tune)
    overrides = _overrides(args)
    _check_tune_args(args, MAX_SPACE)
    buckets = _buckets(args.file, overrides, args)
    if buckets is not None:
        if args.export:
            raise _usage("--export writes one schedule; a bucketed spec's winners go into one package: schedgen "
                         f"build {args.file} --tuned (or -D SIZE=BOUND to tune and export one bucket)")
        return _tune_buckets(args, overrides, buckets)
    if args.db_only:
        try:
            row = best_known(args.file, overrides, db=args.db, backend=args.backend, budget=args.budget,
                             seed=args.seed)
        except TuneDBError as exc:
            raise _usage(str(exc)) from None
        if row is None:
            print(f"{_shown(args.file)}: the tuning database has no verified result for this spec at this shape; run "
                  f"schedgen tune {_shown(args.file)} on the GPU first", file=sys.stderr)
            return EXIT_FAIL
        print(f"best known: {best_label(row)} on {_shown(row['gpu'])}")
    else:
        result = _measured(args, lambda runner: tune(
            args.file, overrides, runner=runner, db=args.db, backend=args.backend, workers=args.workers,
            retry_failed=args.retry_failed, dry_run=args.dry_run, progress=RichProgress(), budget=args.budget,
            seed=args.seed, time_budget=args.time))
        if isinstance(result, int):
            return result
        console = Console()
        if not console.is_terminal:
            console = Console(width=120)         # a file or pipe: wide enough for the table's knob columns
        console.print(summary(result, top=args.top, show_pruning=False))   # the progress showed the pruning
        if args.dry_run:
            return EXIT_OK if result.compiled == len(result.pruning.kept) else EXIT_FAIL
        row = result.best
        if row is None:
            return EXIT_FAIL
    if args.export:
        try:
            out = export_schedule(args.file, row, args.export)
        except OSError as exc:
            raise _os_usage("--export", args.export, exc, "the schedule") from None
        except ValueError as exc:       # not named .yaml
            raise _usage(f"--export {exc}") from None
        print(f"wrote {out}")
    return EXIT_OK


def _measured(args, run):
    """`run(runner)` with the measuring side of `schedgen tune` (none with --dry-run), closed after: its result, or
    an exit status (int) for a run that could not start (no GPU, a backend the spec lacks: one line); an unusable
    --db is a usage error."""
    from .tune import TuneDBError, WorkerRunner
    runner = None
    try:
        runner = None if args.dry_run else _tune_runner(args, WorkerRunner)
        return run(runner)
    except TuneDBError as exc:
        raise _usage(str(exc)) from None
    except (RuntimeError, ValueError) as exc:
        print(f"schedgen: {printable(str(exc))}", file=sys.stderr)
        return EXIT_FAIL
    finally:
        if runner is not None:
            runner.close()


def _tune_runner(args, worker_runner):
    """The measuring side of `schedgen tune`: the Ray backend (--ray), else one worker per chosen GPU of this node
    (--gpus, default all visible), else (no GPU seen) the one-worker runner, which says there is no GPU."""
    from .tune.pool import PoolRunner, pick_gpus, visible_gpus
    options = {"iters": args.iters, "warmup": args.warmup}
    if args.ray:
        from .tune.cluster import RayRunner
        return RayRunner(args.ray, timeout=args.timeout, options=options)
    visible = visible_gpus()
    if not visible and args.gpus == "all":
        return worker_runner(timeout=args.timeout, options=options)
    try:
        gpus = pick_gpus(args.gpus, visible)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    return PoolRunner(gpus, timeout=args.timeout, options=options)


def _tune_buckets(args, overrides: dict, buckets) -> int:
    """tune over buckets: one tuning run per bucket at its bound, its summary, then the table of the winners."""
    from rich.console import Console
    from rich.text import Text

    from .tune import RichProgress, summary
    from .tune.buckets import summary as buckets_summary
    from .tune.buckets import tune_buckets
    console = Console() if Console().is_terminal else Console(width=120)

    def before(i: int, n: int, run) -> None:
        at = ", ".join(f"{k}={v}" for k, v in run.cell.items())
        console.print(Text(f"bucket {i + 1} of {n}: {run.label}, tuned at {at}", style="bold"))
    result = _measured(args, lambda runner: tune_buckets(
        args.file, overrides, buckets, before=before,
        after=lambda run: console.print(summary(run.result, top=args.top, show_pruning=False)), runner=runner,
        db=args.db, backend=args.backend, workers=args.workers, retry_failed=args.retry_failed, dry_run=args.dry_run,
        progress=RichProgress(), budget=args.budget, seed=args.seed, time_budget=args.time))
    if isinstance(result, int):
        return result
    console.print(buckets_summary(result))
    if args.dry_run:
        return EXIT_OK if all(r.result.compiled == len(r.result.pruning.kept) for r in result.runs) else EXIT_FAIL
    console.print(Text(f"next: schedgen build {_shown(args.file)} --tuned (one package, a variant per distinct winner)"))
    return EXIT_OK if all(r.result.best is not None for r in result.runs) else EXIT_FAIL


def _check_tune_args(args, max_space: int) -> None:
    if args.db_only and not args.export:
        raise _usage("--db-only goes with --export (it measures nothing)")
    if args.ray and args.gpus != "all":
        raise _usage("--ray and --gpus: on a Ray cluster each trial gets its GPU from Ray (drop --gpus)")
    if args.budget is not None and not 1 <= args.budget <= max_space:
        raise _usage(f"--budget: at most {max_space} points (and at least 1)")
    if args.workers is not None:
        from .tune.compile import workers_problem
        why = workers_problem(args.workers)
        if why:
            raise _usage(f"--workers {args.workers}: {why}")
    if args.export:                     # a bad export path fails now, not after the whole search
        if Path(args.export).suffix.lower() not in (".yaml", ".yml"):
            raise _usage(f"--export {args.export}: the export is written as YAML; name it .yaml")
        _writable_folder("--export", Path(args.export).parent, "the schedule", args.export)
        _writable_file("--export", args.export, "the schedule")


class _Version(argparse.Action):
    """--version: the installed version, read only when asked (schedgen.__version__ reads the package metadata)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from . import __version__
        print(f"schedgen {__version__}")
        parser.exit()


def parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="schedgen", description="Specs -> Hopper GPU kernels (Pallas and CUDA).")
    ap.add_argument("--version", action=_Version, help="show program's version number and exit")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("validate", help="check specs (schema and hardware legality)")
    p.add_argument("files", nargs="+")
    _add_define(p)
    p.set_defaults(fn=cmd_validate)
    p = sub.add_parser("schema", help="write the JSON Schema of specs (draft-07: YAML language server, taplo) or "
                                      "the field reference page")
    p.add_argument("-o", "--output", default=None,
                   help=f"where to write it (default {SCHEMA_OUT}; with --markdown {REFERENCE_OUT})")
    p.add_argument("--check", action="store_true", help="fail if the file differs from the models")
    p.add_argument("--print", action="store_true", help="write it to stdout instead of a file (e.g. for an "
                                                        "installed package: schedgen schema --print > schema.json)")
    p.add_argument("--markdown", action="store_true", help="the field reference (docs/spec-reference.md) instead "
                                                           "of the JSON Schema")
    p.set_defaults(fn=cmd_schema)
    p = sub.add_parser("new", help="write a commented starter spec of a family (KIND: its op.kind)",
                       description="Write a starter spec: name and op, commented, with no schedule (the planner "
                                   "picks one; schedgen explain shows what it picked). KIND is a family's op.kind; "
                                   "an unknown one lists them.")
    p.add_argument("kind", metavar="KIND")
    p.add_argument("-o", "--output", help="the file to write (default: print it)")
    p.add_argument("--name", help="the spec's name (default: the file's stem, else my_<kind>)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(fn=cmd_new)
    p = sub.add_parser("build", help="render, compile and package kernels")
    p.add_argument("files", nargs="+")
    p.add_argument("-o", "--output", default="build")
    p.add_argument("--tuned", action="store_true", help="build the best schedule the tuning database knows for "
                                                        "each spec at its shape (see schedgen tune)")
    _add_db(p)
    _add_buckets(p, "with --tuned: one package holding each bucket's best schedule as a variant, dispatched by the "
                    "call's sizes (instead of the spec's tune.buckets)")
    _add_define(p)
    p.set_defaults(fn=cmd_build)
    p = sub.add_parser("explain", help="print the plan of a spec")
    p.add_argument("file")
    p.add_argument("--json", action="store_true")
    p.add_argument("--draw", metavar="FILE.png", help="also draw the schedule: tile traversal, SMEM map, pipeline")
    _add_tuned(p, "explain the bucketed build (build --tuned): the bucket table and each variant's plan")
    p.add_argument("--variant", type=_count(0), metavar="N", help="with --tuned: only variant N (vN)")
    p.add_argument("--at", action="append", metavar="NAME=VALUE[,NAME=VALUE...]",
                   help="explain a dynamic-size spec's plan (and each backward step's) at these sizes, the others at "
                        "their max (the default for all): the package as built, its counts at one call")
    _add_define(p)
    p.set_defaults(fn=cmd_explain)
    p = sub.add_parser("verify", help="run kernels against the numpy reference",
                       description="Run kernels against the float64 numpy reference. A backend that cannot run "
                                   "here (no GPU; a backend the spec lacks) is a SKIP row saying why. Exit status: "
                                   "0 nothing failed and at least one check passed; 1 a check failed; 2 a bad spec "
                                   "or usage; 4 every check was skipped (nothing verified).")
    p.add_argument("files", nargs="+")
    p.add_argument("--backend", choices=["cuda", "pallas", "all"], default="all")
    p.add_argument("--interpret", action="store_true", help="run the Pallas kernel in Mosaic GPU interpret mode (CPU)")
    p.add_argument("--small", action="store_true", help="shrink sizes to a few tiles per dimension "
                                                       "(the default with --interpret)")
    p.add_argument("--full-size", action="store_true", help="with --interpret or --sanitize: keep the spec's sizes "
                                                           "(slow)")
    p.add_argument("--sanitize-logs", metavar="DIR", default="",
                   help="with --sanitize: write each tool's whole output to DIR/<spec>.<backend>.<tool>.log")
    p.add_argument("--sanitize", metavar="TOOLS", default="",
                   help="run under compute-sanitizer, e.g. memcheck,racecheck,synccheck (GPU; small sizes unless "
                        "--full-size; the CUDA backend unless --backend pallas)")
    p.add_argument("--seed", type=_count(0), default=None)
    p.add_argument("--sizes", type=int, default=1, choices=range(1, 6), metavar="N",
                   help="check each spec at N sizes: a dynamic-size spec calls its one package at max(N, 3) sizes "
                        "(always); a fixed-size spec is rebuilt at N - 1 more (default 1); with --tuned, each "
                        "bucket at its two edges and N - 1 sizes between them, each through the package's dispatch")
    p.add_argument("--edges", action="store_true",
                   help="a dynamic-size spec at the smallest legal sizes, a ragged assignment and the largest whose "
                        "operands fit in 4 GiB (instead of --sizes' picks)")
    p.add_argument("--magnitude", type=float, default=None, metavar="X",
                   help="also check one size on inputs scaled to |x| ~ X (e.g. 1e3; capped per dtype: fp8 e4m3 at "
                        "448/64)")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the rows as JSON to FILE")
    _add_tuned(p, "verify every variant of the bucketed build (build --tuned) at both edges of each bucket it "
                  "serves")
    p.add_argument("--timeout", type=_seconds(zero="no watchdog: run in this process"), default=600.0,
                   help="seconds per spec before its run is stopped as hung (default 600; at most 86400); 0: no "
                        "watchdog, run in this process")
    _add_define(p)
    p.set_defaults(fn=cmd_verify)
    p = sub.add_parser("bench", help="time kernels against their peers (GPU)",
                       description="Verify each kernel against float64, then time it against its peers on this "
                                   "machine's GPU; a spec/backend not run here prints a SKIP line saying why. Exit "
                                   "status: 0 every row that ran verified; 1 a row did not verify; 2 a bad spec or "
                                   "usage; 4 every row was skipped (nothing timed; --allow-skip makes that 0).")
    p.add_argument("files", nargs="+")
    p.add_argument("--backend", choices=["cuda", "pallas", "all"], default="all")
    p.add_argument("--json", help="merge the rows into this benchmark record")
    p.add_argument("--markdown", help="write the whole record as a Markdown table here")
    p.add_argument("--iters", type=_count(1), default=50)
    p.add_argument("--at", type=_size_set, action="append", metavar="NAME=VALUE[,NAME=VALUE...]",
                   help="time a dynamic-size package at these sizes (repeat for more shapes; sizes not named: their "
                        "max, the default for all of them); one package, no rebuild")
    _add_tuned(p, "time the variant of the bucketed build (build --tuned) that the dispatch picks at each --at")
    p.add_argument("--allow-skip", action="store_true", help="exit 0 when every row is skipped (no GPU here, a "
                                                             "backend the spec lacks); without it that is exit 4, "
                                                             "nothing timed")
    p.add_argument("--report", metavar="DIR", help="write report.json, report.md and PNG plots (throughput per "
                                                   "shape against the peers, roofline) here")
    _add_define(p)
    p.set_defaults(fn=cmd_bench)
    p = sub.add_parser("tune", help="search a spec's tune space: prune, compile, time on the GPU, keep the best")
    p.add_argument("file")
    _add_define(p)
    _add_db(p)
    p.add_argument("--backend", choices=["cuda", "pallas"], default="cuda")
    p.add_argument("--workers", type=_count(1), help="compile processes (default: CPUs - 1; every CPU with "
                                                        "--dry-run; at most twice the CPUs this process may use)")
    p.add_argument("--timeout", type=_seconds(), default=30.0,
                   help="seconds per candidate run before it is recorded as a hang and its worker replaced (default "
                        "30; above 0, at most 86400)")
    p.add_argument("--iters", type=_count(1), default=30)
    p.add_argument("--warmup", type=_count(0), default=5)
    p.add_argument("--top", type=_count(1), default=10, help="rows of the final table")
    p.add_argument("--retry-failed", action="store_true", help="measure again what hung, faulted or failed")
    p.add_argument("--dry-run", action="store_true", help="expand, prune and compile on the CPU; measure nothing")
    p.add_argument("--budget", type=_count(1), metavar="N", help="take a seeded random sample of N points of a larger "
                                                          "space (needed past 20000 points; N <= 20000)")
    p.add_argument("--seed", type=_count(0), default=0, help="the seed of the --budget sample and of the random order "
                                                       "of a run with --budget or --time (default 0)")
    p.add_argument("--time", type=_seconds(), metavar="S", help="stop measuring new candidates S seconds after the "
                   "start (with buckets: of each bucket's run); keep what was measured, verify the winner (candidates are "
                   "taken in a seeded random order)")
    p.add_argument("--gpus", default="all", metavar="all|N|0,2,5", help="this node's GPUs to measure on, one "
                   "worker each: all visible (default), the first N, or these device numbers ('3,' for one)")
    p.add_argument("--ray", metavar="ADDRESS", help="run each trial (compile, then measure on one GPU) as a Ray "
                   "task on this cluster: auto, local, or host:port (the tune-cluster extra)")
    _add_buckets(p, "tune each bucket of a dynamic size at its upper bound, e.g. M=64,256,1024,4096 (instead of "
                    "the spec's tune.buckets; the last bound is the size's max); repeat for more sizes")
    p.add_argument("--export", metavar="FILE.yaml", help="write the best schedule as a plain spec")
    p.add_argument("--db-only", action="store_true", help="with --export: measure nothing, export the best the "
                                                          "database knows")
    p.set_defaults(fn=cmd_tune)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        status = args.fn(args)
        sys.stdout.flush()              # a pipe closed early fails here, not in the interpreter's exit
        return status
    except BrokenPipeError:
        return stop_quietly_on_broken_pipe()
    except SpecErrors as exc:
        print(exc.render(), file=sys.stderr)
        return EXIT_SPEC
    except ToolchainError as exc:
        print(f"schedgen: toolchain error (please report: a validated spec should compile): {exc}", file=sys.stderr)
        return EXIT_TOOLCHAIN
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())


def _passed_through(graph) -> str:
    """The gradients a backward passes through (issue 43), for the build's line: '' when none."""
    passed = [f"d{i} = d{ref[5:]}" for i, ref in graph.passthrough.items()]
    return f"; passed through, no kernel: {', '.join(passed)}" if passed else ""
