"""The frontend: spec files read with positions, the shared schedule vocabulary, validation, expressions, the schema."""
