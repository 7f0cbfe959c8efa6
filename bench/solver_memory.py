"""``python -m bench solver-memory``: what each robust sparse eigensolver holds besides its
operator, as a multiple of the operator's CSR arrays (the ``SOLVER_COPIES`` of
``dimred_dask.linalg.worker_memory``, which leaves a fallback on one worker unstarted when it
would not fit there).

Data: a swiss roll of ``--rows`` points (default 100 000), its 10-NN graph; the operators are
the normalised graph Laplacian (Laplacian eigenmaps; 3 eigenpairs) and LLE's I - W (2
eigenpairs after the constant). Each solve runs in a process of its own, after the operator
is built: the memory it adds is the larger of tracemalloc's peak (NumPy's arrays) and the
growth of the process's peak resident size (what SuperLU's factorisation allocates in C, which
tracemalloc does not see). No peer: the figure is for the estimate, not a comparison.
"""

from __future__ import annotations

import json
import subprocess
import sys

# (operator, solver) pairs measured, as the fallbacks use them
CASES = (
    ("laplacian", "amg"),
    ("laplacian", "arpack"),
    ("lle", "factored"),
    ("lle", "arpack"),
)


def _one(operator: str, solver: str, n: int) -> dict:
    """Run in a fresh process: build the operator, then solve, and measure the solve."""
    import resource
    import time
    import tracemalloc

    import numpy as np
    import scipy.sparse as sp
    from sklearn.datasets import make_swiss_roll

    from dimred_dask.graphs import graph_csr, graph_weights, knn_graph, reconstruction_weights
    from dimred_dask.graphs.laplacian import laplacian
    from dimred_dask.linalg.sparse_eigen import bottom_eigsh
    from dimred_dask.methods.lle import _bottom, lle_operator

    X = make_swiss_roll(n, random_state=0)[0].astype(np.float32)
    g = knn_graph(X, 10, random_state=0, target_recall=None)
    if operator == "laplacian":
        A, _ = laplacian(graph_weights(graph_csr(g))[0], normed=True)
    else:
        A = lle_operator(reconstruction_weights(X, g, 1e-3), g.indices)
    A = sp.csr_matrix(A)
    size = A.data.nbytes + A.indices.nbytes + A.indptr.nbytes
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tracemalloc.start()
    start = time.perf_counter()
    if operator == "laplacian":
        rec = bottom_eigsh(A, 3, solver=solver, tol=1e-8, random_state=0).convergence
    else:
        rec = _bottom(A, 2, solver, 1e-8, None, 0)[5]
    seconds = time.perf_counter() - start
    traced = tracemalloc.get_traced_memory()[1]
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0
    held = max(traced, grown)
    return {
        "operator": operator,
        "solver": solver,
        "rows": n,
        "entries": int(A.nnz),
        "operator_mib": size / 2**20,
        "traced_mib": traced / 2**20,
        "rss_growth_mib": grown / 2**20,
        "times_operator": held / size,
        "seconds": seconds,
        "converged": bool(rec["converged"]),
    }


def main(args) -> int:
    n = args.rows or 100_000
    print(f"# bench solver-memory: swiss roll, n = {n}, 10-NN graph; one process per solve")
    rows = []
    for operator, solver in CASES:
        code = (
            "import json, sys; from bench.solver_memory import _one; "
            f"print(json.dumps(_one({operator!r}, {solver!r}, {n})))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(
            f"  {operator:9s} {solver:8s} operator {row['operator_mib']:.1f} MiB; traced "
            f"{row['traced_mib']:.1f} MiB, peak RSS +{row['rss_growth_mib']:.1f} MiB: "
            f"{row['times_operator']:.1f}x ({row['seconds']:.1f} s, converged "
            f"{row['converged']})"
        )
    print()
    head = ("operator", "solver", "entries", "operator (MiB)", "traced peak (MiB)")
    head += ("peak RSS growth (MiB)", "x the operator", "solve (s)")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print(
            f"| {r['operator']} | {r['solver']} | {r['entries']:,} | {r['operator_mib']:.1f} | "
            f"{r['traced_mib']:.1f} | {r['rss_growth_mib']:.1f} | {r['times_operator']:.1f} | "
            f"{r['seconds']:.1f} |"
        )
    print(json.dumps(rows))
    return 0
