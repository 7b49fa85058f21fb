"""Tuning: a spec's `tune` section -> candidates -> plan-stage pruning -> parallel compile -> timed runs
-> the tuning database (db.py) -> the best schedule per shape.

    space   = load_space(path, overrides)     # knobs (field paths or family aliases) and constraints, checked
    pruning = prune(space)                    # expand; drop what the constraints or the plan stage reject
    result  = tune(path, overrides, runner=...)

A knob is a field path (`schedule.pipeline.max_concurrent_steps`, `schedule.in_specs.b.block_shape[1]`) or an
alias the family defines for fields that must move together (`tile_n` sets the rhs BlockSpec's N and the output
BlockSpec's N). Constraints are comparisons over knob names and the op's sizes (`tile_m * tile_n <= 32768`). A spec
with no tune section is tuned around the planner's picks: its family's default space (`Family.tune_space`) over the
spec with the picks written in as fields (picked.py). docs/tuning.md has the whole story.

Candidates that pass the plan stage are compiled in a pool of processes (NVRTC, CPU only) while the runner
measures the ones already built, so compiling overlaps measuring. The runner is pluggable: the default one
(`WorkerRunner()`) times each kernel on the GPU in one long-lived worker process with a timeout per candidate;
a kernel that hangs or faults is recorded as such, the worker is replaced, and tuning goes on. Tests pass a
runner whose functions return synthetic times, raise, or sleep past the timeout.

One job per module: `space` (knobs, counting, lazy enumeration, sampling), `picked` (the default space of a spec
with no tune section: the planner's picks written in, the family's knobs around them), `aliases` (the families'
short knob names), `constraints`, `prune`, `compile` (the build pool), `measure` (runners), `pool` (every GPU of a
node: one measuring worker each), `cluster` (the Ray backend: trials as Ray tasks), `progress` (the rich
display), `driver` (the tune() loop), `results` (best known, export, the final table), `db` (the sqlite tuning
database), `rows` (the schema every row read back from it is checked against), `trust` (a row's overrides against
the space: only its candidate's fields, rebuilding its candidate), `buckets` (a dynamic-size spec's buckets: checked, tuned one bucket at a time, the winner of each).
"""
from __future__ import annotations

from .aliases import aliases_for
from .compile import compile_candidate, compile_pool, default_workers, result_key, toolchain_info
from .constraints import Constraint, parse_constraint
from .db import TuneDB, TuneDBError, default_path
from .driver import VERIFY_TOP, TuneResult, tune
from .knobs import Knob, Target
from .measure import (
                      DEFAULT_TIMEOUT,
                      START_TIMEOUT,
                      VERIFY_TIMEOUT,
                      Result,
                      Runner,
                      WorkerRunner,
                      gpu_environment,
                      gpu_measure,
                      gpu_setup,
                      gpu_verify,
)
from .pool import Gpu, PoolRunner, pick_gpus, visible_gpus
from .progress import Progress, RichProgress, best_label, space_text
from .prune import PruneGroup, Pruning, prune, summarise
from .results import best_known, current_gpu, export_schedule, summary
from .picked import NothingToTune, picked_overrides
from .space import (MAX_SPACE, Candidate, Space, config_key, expand, field_overrides, indices,
                    load_space, point, resolve_knobs)

__all__ = ["aliases_for", "compile_candidate", "compile_pool",
           "default_workers", "result_key", "toolchain_info", "Constraint", "parse_constraint", "TuneDB", "TuneDBError",
           "default_path", "VERIFY_TOP", "TuneResult", "tune", "Knob", "Target", "DEFAULT_TIMEOUT", "START_TIMEOUT",
           "VERIFY_TIMEOUT", "Result", "Runner", "WorkerRunner", "gpu_environment", "gpu_measure", "gpu_setup",
           "gpu_verify", "Progress", "RichProgress", "best_label", "space_text", "PruneGroup", "Pruning", "prune",
           "summarise", "best_known", "current_gpu", "export_schedule", "summary", "Candidate", "NothingToTune",
           "Space", "picked_overrides", "config_key", "expand", "field_overrides", "load_space", "resolve_knobs", "MAX_SPACE", "indices",
           "point", "Gpu", "PoolRunner", "pick_gpus", "visible_gpus"]
