"""What the worker-side LOBPCG's row blocks hold, against the workers' memory limits: said
before the solve when it looks tight, and in the error when a worker is lost."""

from __future__ import annotations

__all__ = ["memory_note", "BLOCK_ARRAYS", "MEMORY_SHARE"]

# n_i x p float64 arrays a block holds at its busiest: S and M S (3p columns each), the
# contiguous copy of the slot a sparse product reads and, in a product, its rows cut for the
# other blocks (one copy when they read it whole) and the rows it takes in from them (at most
# its own rows' worth a task); a Gram operator's block also holds Y (A W0 on its way to A^T).
# The small products go a run of rows at a time.
BLOCK_ARRAYS = 9
MEMORY_SHARE = 0.5  # a block's arrays above this share of its worker's memory limit: warn


def memory_note(bounds, p: int, limit: int | None, gram: bool = False) -> tuple[str, bool]:
    """What the largest block's iteration arrays take (``BLOCK_ARRAYS`` x rows x p float64,
    one more for a Gram operator) against the smallest worker memory ``limit`` (bytes; None:
    none), and whether that is over ``MEMORY_SHARE`` of it (the operator's rows and the
    process come on top)."""
    rows = max(b - a for a, b in bounds)
    arrays = BLOCK_ARRAYS + int(gram)
    need = 8 * arrays * rows * p
    text = (
        f"a row block (one a worker) holds about {need / 2**30:.2f} GiB of LOBPCG's arrays "
        f"({rows} rows x {p} columns, {arrays} float64 arrays)"
    )
    if limit:
        text += f", its memory limit is {limit / 2**30:.2f} GiB"
    return text, bool(limit) and need > MEMORY_SHARE * limit
