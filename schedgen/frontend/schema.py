"""JSON Schema of specs, exported from the pydantic models (for editors: YAML LS, taplo)."""
from __future__ import annotations

import json

from .specfile import SpecFile

SCHEMA_ID = "https://schedgen.invalid/schedgen.schema.json"


def schema() -> dict:
    s = SpecFile.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": "schedgen spec", **s}


def schema_json() -> str:
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"
