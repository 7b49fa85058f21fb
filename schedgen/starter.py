"""`schedgen new KIND`: a family's commented starter spec, with the schema modeline editors read.

Each family keeps its starter next to its planner (`families/<kind>/starter.yaml`, the manifest's `starter`): a
spec with a name and an op and no schedule (the planner picks one), comments saying what each field means, and the
schedule the bundled specs use, commented out. The modeline points at the committed JSON Schema by a path relative
to the written file, as the bundled specs do.

Nothing from the command line goes into the text unchecked: `--name` must be a legal spec name (what the schema
takes, not reserved), and the file's path, written into comments, goes through `comment_text` (a newline in it
would end the comment and the rest would be read as YAML)."""
from __future__ import annotations

import os
import shlex
from pathlib import Path

from . import registry as families
from .comment import comment_text
from .frontend.expr import check_identifier
from .reserved import SPEC_NAME

SCHEMA_NAME = "schedgen.schema.json"


def schema_file() -> Path:
    """The JSON Schema: the checkout's schemas/ (next to the package), else the installed copy."""
    package = Path(__file__).resolve().parent
    for candidate in (package.parent / "schemas" / SCHEMA_NAME, package / "_data" / "schemas" / SCHEMA_NAME):
        if candidate.is_file():
            return candidate
    return package.parent / "schemas" / SCHEMA_NAME


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a spec's name (None when it can): the schema's rule and the reserved spec names."""
    why = check_identifier(name)
    if why is None and name in SPEC_NAME:
        why = f"{name!r} is reserved: it is {SPEC_NAME[name]}; choose another name"
    return why


def default_name(kind: str, dest: Path | None) -> str:
    """The spec's name: the file's stem when it is a legal name, else my_<kind>."""
    stem = dest.stem if dest is not None else ""
    return stem if stem and name_problem(stem) is None else f"my_{kind}"


def starter_text(kind: str, dest: Path | None = None, name: str | None = None) -> str:
    """The starter spec of a family as text, for a file written at `dest` (None: printed; paths from the current
    folder). ValueError naming the kinds when `kind` is not one."""
    if kind not in families.kinds():
        raise ValueError(f"no family {kind!r}; families: {', '.join(families.kinds())}")
    family = families.get(kind)
    if family.starter is None:
        raise ValueError(f"the {kind} family has no starter spec")
    if name is not None and (why := name_problem(name)) is not None:
        raise ValueError(f"--name: {why}")
    folder = (dest.parent if dest is not None else Path(".")).resolve()
    schema = comment_text(Path(os.path.relpath(schema_file(), folder)).as_posix())
    shown = comment_text(shlex.quote(dest.as_posix()) if dest is not None else f"{default_name(kind, None)}.yaml")
    return (family.starter.read_text().replace("__SCHEMA__", schema).replace("__FILE__", shown)
            .replace("__NAME__", name or default_name(kind, dest)))
