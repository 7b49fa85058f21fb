"""The kernel families: each one folder whose `__init__.py` registers its `Family` manifest.

The registry (`Family`, `get`, `of`, `all_families`, ...) is `schedgen/registry.py`, on the bottom floor: it
imports no family and finds a family's folder by its kind when first asked. Its public names are re-exported here
for code that says `families.get(kind)`.
"""
from __future__ import annotations

from ..registry import (BACKEND_TEMPLATES, COMMON_TEMPLATES, DrawHooks, Family, Hook, ReportHooks,  # noqa: F401
                        TuneSpace, all_families, get, kinds, of, register, template_folder, template_root)
