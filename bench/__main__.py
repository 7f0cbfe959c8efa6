"""python -m bench NAME [options]: run a benchmark of this project against its peers."""
from __future__ import annotations

import argparse
import os
import sys


def main(argv=None) -> int:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("name", choices=["pca"], help="which benchmark")
    p.add_argument("--big", action="store_true",
                   help="out of core: a Zarr array on disk larger than memory (pca)")
    p.add_argument("--rows", type=int, default=None, help="rows of the data (default per bench)")
    p.add_argument("--repeat", type=int, default=3, help="timed repetitions (median reported)")
    p.add_argument("--gib", type=float, default=None, help="--big: size of the array in GiB")
    p.add_argument("--dir", default=None, help="--big: where to write the array (kept)")
    p.add_argument("--workers", type=int, default=None, help="--big: worker processes")
    p.add_argument("--threads", type=int, default=2, help="--big: threads per worker")
    args = p.parse_args(argv)
    from . import pca

    if args.big:
        return pca.main_big(args)
    return pca.main(args)


if __name__ == "__main__":
    sys.exit(main())
