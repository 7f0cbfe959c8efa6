"""Row blocks of in-memory arrays processed on the machine's cores.

NumPy's ufuncs and BLAS release the GIL, so a pool of threads, each running one BLAS thread
on its own block of rows, keeps every core busy through work that a single call runs on one
core (elementwise kernels such as ``exp``) or runs badly threaded (products with a few
columns). A block small enough to stay in cache also lets several steps use it before it is
evicted: the Nyström pass computes a block of k(X, L) and multiplies with it while it is hot
(measured on 20 000 x 2000 float32, 2 cores: 0.15-0.18 s for k(X, L), its column sums and
both products of a subspace pass, against 0.40 s as whole-array NumPy calls).

Results come back in block order and are combined by the caller in that order, so they do not
depend on how the threads were scheduled.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

from .moments import row_blocks

__all__ = ["RowBlockPool", "one_blas_thread", "core_count", "BLOCK_ROWS"]

# 512 rows of a 2000-column float32 block are 4 MB: small enough that a thread's block and
# its product stay in cache, large enough for BLAS to run at full rate (the fastest of the
# sizes tried on the Nyström pass)
BLOCK_ROWS = 512


def core_count() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@functools.cache
def _blas_controller():
    """threadpoolctl's view of the BLAS libraries loaded now (NumPy's and SciPy's: this package
    imports both first). Made once: making one scans the process's libraries (1.4 ms, against
    0.02 ms to set and restore a limit with it, measured)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def one_blas_thread():
    """A context in which NumPy's and SciPy's BLAS run on one thread each.

    For a computation that runs its parallel parts on a `RowBlockPool` and has BLAS-heavy
    serial steps between them. NumPy and SciPy each bring their own OpenBLAS, and after a
    multithreaded call one library's idle workers keep spinning on the cores for ~0.1-0.2 s:
    the other library's products run at half speed meanwhile (measured, 2 cores: 4 NumPy
    products of 2000 x 2000 by 2000 x 22 took 44-54 ms right after SciPy's 2-thread Cholesky,
    20-23 ms after a pause of 0.2 s). On one thread there are no such workers; the serial
    steps lose their own threading instead (a 2000 x 2000 Cholesky: 112 ms against 73 ms)."""
    return _blas_controller().limit(limits=1, user_api="blas")


class RowBlockPool:
    """``with RowBlockPool(threads) as pool: pool.map(fn, n)`` runs ``fn(lo, hi)`` for the
    row blocks of ``n`` rows on ``threads`` threads (default: the cores) with one BLAS thread
    each, and returns the results in block order. One thread: a plain loop, BLAS untouched.
    BLAS stays at one thread in the whole ``with`` block (the process's setting is global)."""

    def __init__(self, threads: int | None = None, block_rows: int | None = None):
        self.threads = max(1, int(threads) if threads else core_count())
        self.block_rows = int(block_rows or BLOCK_ROWS)
        self._pool = self._limits = None

    def __enter__(self) -> "RowBlockPool":
        if self.threads > 1:
            self._limits = _blas_controller().limit(limits=1, user_api="blas")
            self._pool = ThreadPoolExecutor(self.threads)
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._limits.restore_original_limits()
            self._pool = self._limits = None

    def map(self, fn, n: int) -> list:
        blocks = row_blocks(n, self.block_rows)
        if self._pool is None or len(blocks) == 1:
            return [fn(a, b) for a, b in blocks]
        return list(self._pool.map(lambda ab: fn(*ab), blocks))
