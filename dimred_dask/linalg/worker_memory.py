"""What the worker-side LOBPCG's row blocks hold, against the workers' memory limits: said
before the solve when it looks tight, and in the error when a worker is lost; and what a
robust solver on the whole operator, assembled on one worker, would take there
(`one_worker_need`), so that a solve that cannot fit is not started."""

from __future__ import annotations

__all__ = ["memory_note", "one_worker_need", "BLOCK_ARRAYS", "MEMORY_SHARE", "ASSEMBLY_COPIES"]

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


# copies of the operator's CSR arrays one worker holds while it assembles the operator: the
# blocks it takes in, their stack, and the two copies of a permutation back to the original
# numbering (``WorkerRows.on_a_worker``)
ASSEMBLY_COPIES = 4
# what each robust solver holds besides the operator, as multiples of the operator's CSR
# arrays: `python -m bench solver-memory` (bench/RESULTS.md), one process per solve, the larger
# of tracemalloc's peak and the growth of the peak resident size, on a 100 000-point swiss
# roll's 10-NN graph: the normalised Laplacian (1.24 million entries, 14.5 MiB, 3 eigenpairs)
# with the multigrid LOBPCG 6.8x (7.8x for the generalised problem L y = lambda D y) and
# shift-invert ARPACK 16.4x (its sparse LU; 4.8 GB at 10^6 rows, 33x, beyond its size class);
# LLE's I - W (1.1 million entries, 13.0 MiB) with the factored solver 23.1x (the LU of
# I - W) and shift-invert ARPACK 46.9x (M = (I - W)^T (I - W) and its LU); rounded up
SOLVER_COPIES = {
    ("symmetric", "amg"): 8,
    ("symmetric", "arpack"): 18,
    ("gram", "factored"): 24,
    ("gram", "arpack"): 48,
}
VECTOR_ARRAYS = 12  # n x k float64 arrays a solver's iteration holds (LOBPCG: X, AX, R, P ...)


def one_worker_need(solver: str, kind: str, n: int, operator_bytes: int, k: int) -> int:
    """Bytes that ``solver`` on the whole n x n operator (``kind`` "symmetric" or "gram",
    ``operator_bytes`` of CSR arrays, ``k`` eigenpairs) takes on the one worker that
    assembles it: the assembly's copies (``ASSEMBLY_COPIES``), the solver's own memory (its
    factorisation or multigrid hierarchy, ``SOLVER_COPIES`` times the operator, as measured;
    the dense solver's n x n matrices) and its n x k iteration arrays. An estimate, to leave
    unstarted what cannot fit, not a bound: a factorisation's fill-in depends on the graph."""
    if solver == "dense":
        own = 3 * 8 * n * n  # the dense matrix, its eigendecomposition's copy and workspace
    else:
        own = SOLVER_COPIES.get((kind, solver), max(SOLVER_COPIES.values())) * operator_bytes
    return int(ASSEMBLY_COPIES * operator_bytes + own + VECTOR_ARRAYS * 8 * n * max(k, 1))
