"""Backward passes derived from specs (issue 19): `graph` (the BackwardGraph every family's `backward` hook
returns), `derive` (symbolic derivatives of validated expression trees)."""
