"""Prefect flows and tasks: orchestration only, no numerics (those live in dimred_dask)."""
