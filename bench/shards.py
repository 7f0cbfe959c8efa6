"""Parquet shards: the read stage of a run against pyarrow's own reader on the same files.

Data: ``--rows`` (default 2 000 000) x 768 float32 rows of
``dimred_dask.datasets.low_rank_plus_noise`` (rank 16 plus noise), written file by file as 20
Parquet files ``part-00.parquet`` ... ``part-19.parquet`` (default folder
``bench/_data/shards-<rows>x768``, or ``--dir``) with an int64 column ``id`` and a
fixed-size-list column ``embedding`` (``pa.FixedSizeListArray`` of float32, 768), by
``pyarrow.parquet.write_table`` with its defaults: snappy compression and row groups of at most
1 Mi rows, so at the default size each file of 100 000 rows is one row group of about 293 MiB.

- ours: the read stage as a run does it, ``open_input(folder, columns=["embedding"])`` (the
  opening reads the 20 files' metadata) and every chunk read on a LocalCluster of 2 worker
  processes of 1 thread each (``--workers`` to change; chunks are whole row groups, one per
  chunk at the default size); each chunk gives back its row count and its first value, so
  the chunks are read in full and no data travels to this process;
- pyarrow ``pq.read_table(files, columns=["embedding"])`` of the 20 files in this process
  (Arrow's thread pool, one thread per core), and the same plus the conversion to one 2-D
  NumPy array (``.column(0).combine_chunks().flatten().to_numpy().reshape(-1, 768)``: one
  copy, the flattening and the reshape are views; the table and the array are held at once,
  twice the data, about 11.5 GiB at the default size).

The files fit in the page cache of a machine with more free memory than their size, so after
one untimed warm-up read of each implementation all of them read from memory, not disk: this
measures decoding and moving the data, not the disk. The implementations run in turns; the
ratio ours / read_table is printed per round, and its median is the figure to hold to 1.5.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

from ._measure import PeakRSS, machine, timed_in_turns

D = 768
FILES = 20
TARGET_RATIO = 1.5


def _file_name(i: int) -> str:
    return f"part-{i:02d}.parquet"


def _expected_rows(n: int) -> list[int]:
    per = -(-n // FILES)
    return [min(per, n - i * per) for i in range(FILES)]


def _made_dirs(folder: str) -> list[str]:
    """Create ``folder`` and its missing parents; return those created, deepest first."""
    missing, path = [], os.path.abspath(folder)
    while not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    return missing


def _matches(path: str, rows: int) -> bool:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
    except Exception:  # noqa: BLE001 - any unreadable file is "not ours"
        return False
    schema = meta.schema.to_arrow_schema()
    return (
        meta.num_rows == rows
        and "embedding" in schema.names
        and schema.field("embedding").type == pa.list_(pa.float32(), D)
    )


def write_shards(folder: str, n: int) -> tuple[list[str], list[str]]:
    """(the 20 paths, those this call wrote). A file already there with the right rows and
    schema is reused; one that differs is refused, never overwritten."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dimred_dask.datasets import low_rank_plus_noise

    counts = _expected_rows(n)
    data = low_rank_plus_noise(n, D, chunk_rows=counts[0], seed=0)
    assert data.numblocks[0] == FILES, data.chunks
    paths, wrote, start = [], [], 0
    for i, rows in enumerate(counts):
        path = os.path.join(folder, _file_name(i))
        paths.append(path)
        if os.path.exists(path):
            if not _matches(path, rows):
                raise SystemExit(
                    f"{path} exists and is not a {rows} x {D} shard of this "
                    "benchmark; pass another --dir (an empty or new folder)."
                )
            start += rows
            continue
        X = data.blocks[i].compute(scheduler="sync")
        embedding = pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), D)
        ids = pa.array(np.arange(start, start + rows, dtype=np.int64))
        tmp = os.path.join(folder, f".{_file_name(i)}.tmp")  # hidden: no reader lists it
        pq.write_table(pa.table({"id": ids, "embedding": embedding}), tmp)
        os.replace(tmp, path)
        wrote.append(path)
        start += rows
        del X, embedding, ids
    return paths, wrote


def main(args) -> int:
    import psutil
    import pyarrow.parquet as pq

    n = args.rows or 2_000_000
    if n < FILES:
        raise SystemExit(f"--rows must be at least {FILES}")
    workers = args.workers or 2
    folder = os.path.abspath(
        args.dir or os.path.join(os.path.dirname(__file__), "_data", f"shards-{n}x{D}")
    )
    print(
        f"# bench shards: {n:,} x {D} float32 as {FILES} Parquet files (fixed-size-list "
        f"column 'embedding'); {machine()}; load average at start {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    created = _made_dirs(folder)
    wrote: list[str] = []
    try:
        t0 = time.perf_counter()
        paths, wrote = write_shards(folder, n)
        if wrote:
            print(
                f"  wrote {len(wrote)} files to {folder} in {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
        size = sum(os.path.getsize(p) for p in paths)
        meta = pq.ParquetFile(paths[0]).metadata
        group_rows = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        column = meta.row_group(0).column(meta.num_columns - 1)
        print(
            f"  files: {folder}/part-00 ... part-{FILES - 1:02d}.parquet, "
            f"{size / 2**30:.2f} GiB on disk; pyarrow's default row groups (at most 1 Mi "
            f"rows): {meta.num_row_groups} per file of {group_rows[0]:,} rows "
            f"({group_rows[0] * D * 4 / 2**20:.0f} MiB as float32), {column.compression}",
            flush=True,
        )
        vm = psutil.virtual_memory()
        if 3 * size < vm.available:  # the files, and the NumPy peer's table and array
            print(
                f"  page cache: the files ({size / 2**30:.2f} GiB) fit in this machine's "
                f"memory ({vm.total / 2**30:.1f} GiB, {vm.available / 2**30:.1f} GiB "
                "available), so after one untimed warm-up read of each implementation every "
                "timed read comes from the page cache, not the disk",
                flush=True,
            )
        else:
            print(
                f"  page cache: the files ({size / 2**30:.2f} GiB) and the NumPy peer's two "
                f"copies may not fit in the {vm.available / 2**30:.1f} GiB available: some "
                "timed reads may come from the disk",
                flush=True,
            )
        return _measure(args, n, folder, paths, workers)
    finally:
        if not args.keep:
            for path in wrote:  # only the files this run wrote
                os.remove(path)
            for path in created:  # only the folders this run created, if now empty
                try:
                    os.rmdir(path)
                except OSError:
                    break
        elif wrote:
            print(f"  kept {len(wrote)} files in {folder} (--keep)")


def _measure(args, n: int, folder: str, paths: list[str], workers: int) -> int:
    import psutil
    import pyarrow.parquet as pq
    from dask import compute, delayed
    from distributed import Client, LocalCluster

    from dimred_dask.io import open_input

    def peer_table():
        table = pq.read_table(paths, columns=["embedding"])
        return (table.num_rows, D)

    def peer_numpy():
        table = pq.read_table(paths, columns=["embedding"])
        X = table.column(0).combine_chunks().flatten().to_numpy().reshape(-1, D)
        return X.shape

    def first_value(block):
        return block.shape[0], float(block[0, 0])

    def ours():
        inp = open_input(folder, columns=["embedding"])
        parts = compute(*[delayed(first_value)(b) for b in inp.array.to_delayed().ravel()])
        return (sum(rows for rows, _ in parts), inp.array.shape[1])

    with (
        LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            memory_limit="6GiB",
        ) as cluster,
        Client(cluster) as client,
    ):
        pids = list(client.run(os.getpid).values())
        inp = open_input(folder, columns=["embedding"])
        if inp.shape != (n, D) or inp.meta.get("files") != FILES:
            raise SystemExit(
                f"{folder} holds other files besides the {FILES} shards "
                f"({inp.meta.get('files')} Parquet files, shape {inp.shape}); "
                "pass an empty or new --dir."
            )
        chunks = inp.array.chunks[0]
        print(
            f"  ours: open_input gives {len(chunks)} row chunks of {chunks[0]:,} rows "
            f"({chunks[0] * D * 4 / 2**20:.0f} MiB); {workers} worker processes x 1 thread; "
            f"pyarrow in this process with its own threads ({os.cpu_count()} cores)",
            flush=True,
        )
        names = {
            "table": "pyarrow pq.read_table (in process)",
            "numpy": "pyarrow pq.read_table + 2-D NumPy array (in process)",
            "ours": f"dimred-dask open_input, every chunk read ({workers} workers x 1 thread)",
        }
        entries = [
            (names["table"], peer_table, args.repeat),
            (names["numpy"], peer_numpy, args.repeat),
            (names["ours"], ours, args.repeat),
        ]
        t0 = time.perf_counter()
        for name, fn, _ in entries:  # warm-up: page cache, allocators, worker imports
            shape = fn()
            assert tuple(shape) == (n, D), (name, shape)
        print(
            f"  warm-up read of each (untimed) took {time.perf_counter() - t0:.1f} s; "
            f"load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        ratios = []

        def on_round(r, times):
            line = ", ".join(
                f"{key} {times[names[key]]:.2f} s" for key in names if names[key] in times
            )
            ratio = ""
            if names["ours"] in times and names["table"] in times:
                ratios.append(times[names["ours"]] / times[names["table"]])
                ratio = f"; ours / read_table {ratios[-1]:.2f}"
            print(f"  round {r + 1}: {line}{ratio}; load {os.getloadavg()[0]:.2f}", flush=True)

        per_worker = PeakRSS(pids)
        with per_worker:
            results = timed_in_turns(entries, pids=(), on_round=on_round)
        worker_peak = max(per_worker.per_process_peak[p] for p in pids)
    for name, _, _ in entries:
        assert tuple(results[name][3]) == (n, D), (name, results[name][3])
    gib = n * D * 4 / 2**30
    ours_med = results[names["ours"]][0]
    print(
        "\n| implementation | median (s) | runs (s) | GiB/s of float32 | ours / this |\n"
        "|---|---|---|---|---|"
    )
    for name, _, _ in entries:
        med, times, _, _ = results[name]
        print(
            f"| {name} | {med:.2f} | {', '.join(f'{t:.2f}' for t in times)} | "
            f"{gib / med:.2f} | {ours_med / med:.2f} |"
        )
    if ratios:
        median_ratio = statistics.median(ratios)
        verdict = "within" if median_ratio <= TARGET_RATIO else "NOT within"
        print(
            f"\nours / pq.read_table per round: {', '.join(f'{r:.2f}' for r in ratios)}; "
            f"median {median_ratio:.2f}: {verdict} {TARGET_RATIO}x"
        )
    print(
        f"worker peak RSS (largest of the {workers} workers, over all rounds): "
        f"{worker_peak / 2**30:.2f} GiB; load average at end {os.getloadavg()[0]:.2f}; "
        f"memory available {psutil.virtual_memory().available / 2**30:.1f} GiB"
    )
    return 0
