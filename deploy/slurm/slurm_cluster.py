"""Start a Dask cluster on Slurm with dask-jobqueue and keep it up until interrupted.

dask-jobqueue is NOT a dependency of dimred-dask. Install it into the same virtualenv,
keeping dask and distributed at the pinned versions:

    pip install -c constraints.txt dask-jobqueue

This process runs the Dask scheduler (on the node where it starts: a login node, or inside
the batch job of run_embed.sbatch) and submits `--jobs` Slurm jobs, each running
`--processes` single-threaded Dask workers. It prints the scheduler address, writes it to
`--address-file` (default ./scheduler_address), and then waits; pass the address to

    dimred-dask run --input ... --output ... --scheduler "$(cat scheduler_address)"

Ctrl-C / SIGTERM closes the cluster, which cancels the worker jobs (scancel).

The worker jobs start from this process's environment: the virtualenv (python = this
interpreter, so it must be on a shared filesystem) and the AWS_* variables, which
sbatch passes on by default (--export=ALL). Never put credentials on the command line.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=4, help="Slurm jobs of workers (default 4)")
    p.add_argument("--cores", type=int, default=8, help="cores per job (default 8)")
    p.add_argument(
        "--processes",
        type=int,
        default=None,
        help="worker processes per job (default: one single-threaded worker per core)",
    )
    p.add_argument("--memory", default="32GiB", help="memory per job, split across its workers")
    p.add_argument("--walltime", default="04:00:00", help="per worker job (HH:MM:SS)")
    p.add_argument("--queue", default=os.environ.get("SLURM_PARTITION"), help="Slurm partition")
    p.add_argument("--account", default=os.environ.get("SLURM_ACCOUNT"), help="Slurm account")
    p.add_argument(
        "--interface",
        default=None,
        help="network interface the workers reach the scheduler on (e.g. ib0)",
    )
    p.add_argument(
        "--local-directory",
        default=os.environ.get("TMPDIR", "/tmp"),
        help="node-local disk for spilling (default $TMPDIR or /tmp)",
    )
    p.add_argument(
        "--address-file",
        default="scheduler_address",
        help="file the scheduler address is written to",
    )
    p.add_argument(
        "--wait-workers",
        type=int,
        default=1,
        help="wait until this many workers have joined before writing the address",
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        print(
            "dask-jobqueue is not installed: pip install -c constraints.txt dask-jobqueue",
            file=sys.stderr,
        )
        return 2
    from distributed import Client

    # SIGTERM (scancel of the job running this script) -> SystemExit -> clusters close.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    processes = args.processes or args.cores
    venv = os.environ.get("VIRTUAL_ENV")
    cluster = SLURMCluster(
        cores=args.cores,
        processes=processes,
        memory=args.memory,
        walltime=args.walltime,
        queue=args.queue,
        account=args.account,
        interface=args.interface,
        local_directory=args.local_directory,
        python=sys.executable,
        job_name="dimred-dask-worker",
        job_script_prologue=[f"source {venv}/bin/activate"] if venv else [],
        log_directory="dask-worker-logs",
    )
    try:
        cluster.scale(jobs=args.jobs)
        with Client(cluster) as client:
            if args.wait_workers:
                print(f"waiting for {args.wait_workers} worker(s) ...", file=sys.stderr)
                client.wait_for_workers(args.wait_workers)
        address = cluster.scheduler_address
        tmp = args.address_file + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(address + "\n")
        os.replace(tmp, args.address_file)  # readers never see a half-written file
        print(address, flush=True)
        print(
            f"scheduler address written to {args.address_file}; Ctrl-C to stop the cluster",
            file=sys.stderr,
        )
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.close()
        try:
            os.remove(args.address_file)
        except FileNotFoundError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
