"""dimred-dask command line: run an embedding, make and run the demo, inspect an output."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import traceback

from dimred_dask.errors import DimredError, InputError

from .summary import print_placement, print_summary, print_unfinished, unfinished_report

EPILOG = """examples:
  dimred-dask demo
  dimred-dask run --input data.zarr --output out.zarr --method pca --n-components 16
  dimred-dask run --input s3://lab/cells.zarr#counts --output s3://lab/runs/pca16 \\
      --method pca --n-components 0.95 --param solver=covariance --scheduler tcp://10.0.0.5:8786
  dimred-dask run --input table.parquet --columns a,b,c --output out.zarr --method pca
  dimred-dask run --input data.zarr --output kpca.zarr --method kpca --param kernel=gaussian \\
      --param width=3.0 --param solver=nystrom --param n_landmarks=2000
  dimred-dask run --input data.zarr --labels y.zarr --output spca.zarr --method spca
  dimred-dask run --input roll.zarr --output mvu.zarr --method mvu --param n_neighbors=6
  dimred-dask run --input walk.zarr --actions actions.zarr --output are.zarr --method are
  dimred-dask run --input cells.zarr --output map.zarr --method pca+umap \\
      --param pca.n_components=50 --param umap.n_neighbors=30
  dimred-dask transform --model map.zarr --input new-cells.zarr --output placed.zarr
  dimred-dask inspect out.zarr
  dimred-dask unlock out.zarr      # the lease of a run whose machine was lost

environment:
  DASK_SCHEDULER_ADDRESS   use this Dask scheduler instead of a local cluster
  PREFECT_API_URL          report runs to this Prefect server (else a temporary local one)
  AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
                           object storage endpoint and credentials (never put them in a URL)
  DIMRED_DEBUG=1           as --debug

Ctrl-C stops a run within seconds and leaves its output resumable: run the same command again
to finish it (completed stages are reused). Exit status: 0 done, 2 refused or failed (one
"error:" block saying what to fix), 3 inspect of an unfinished run, 130 interrupted.
"""


def _location(uri: str | None, role: str, *, store: bool = False) -> str | None:
    """A location typed at the shell in canonical form (`dimred_dask.io.parse_uri`: a local
    path resolved from this directory, a ``#`` in it part of the name unless it follows an
    existing file or Zarr store); ``store``: a store of its own, never an element."""
    from dimred_dask.io import parse_store, parse_uri

    if uri is None:
        return None
    return str(parse_store(uri, role=role) if store else parse_uri(uri, role=role))


def _params(args) -> dict:
    from .adapter import parse_param_value

    params = {}
    for item in args.param or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InputError(
                f"--param takes name=value; found {item!r}.",
                f"give the value too, e.g. --param {name or 'solver'}="
                f"{'true' if name else 'covariance'}.",
            )
        step, dot, key = name.strip().rpartition(".")  # a chain's step keeps its own name
        params[step + dot + key.replace("-", "_")] = parse_param_value(value)
    if args.n_components is not None:
        params["n_components"] = parse_param_value(args.n_components)
    return params


def _version_text() -> str:
    from importlib import metadata

    import dimred_dask

    parts = []
    for pkg in ("numpy", "dask", "distributed", "zarr", "prefect"):
        try:
            parts.append(f"{pkg} {metadata.version(pkg)}")
        except metadata.PackageNotFoundError:
            continue
    return f"dimred-dask {dimred_dask.__version__} ({', '.join(parts)})"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dimred-dask",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Distributed dimensionality reduction: Prefect flows driving Dask over "
        "chunked Zarr arrays, with outputs written as Zarr run stores.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show Prefect's log lines and full tracebacks on the terminal",
    )
    p.add_argument(
        "--debug",
        action="store_true",
        help="show Prefect's log lines and full tracebacks on the terminal",
    )
    p.add_argument(
        "--version",
        action="version",
        version=_version_text(),
        help="the version of dimred-dask and of the libraries a run records",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="embed an array and write a run store",
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    run.add_argument(
        "--input",
        required=True,
        metavar="URI",
        help="Zarr array (uri#path inside a group), .npy, .parquet or .csv; local "
        "path, file://, s3:// or memory://",
    )
    run.add_argument("--output", required=True, metavar="URI", help="where the run store goes")
    run.add_argument(
        "--method",
        default="pca",
        metavar="METHOD",
        help="embedding method (default: pca; `dimred-dask methods` lists them, with their "
        "parameters); or a chain pca+METHOD (e.g. pca+umap): PCA first, then METHOD on its "
        "embedding, in one run store",
    )
    run.add_argument(
        "--n-components",
        metavar="K",
        help="components to keep: an int, or a fraction of variance in (0, 1)",
    )
    run.add_argument(
        "--param",
        action="append",
        metavar="NAME=VALUE",
        help="a method parameter, repeatable (e.g. solver=randomized, whiten=true); "
        "in a chain STEP.NAME=VALUE (pca.n_components=50, "
        "umap.n_neighbors=30; without STEP: the final step); "
        "`dimred-dask methods METHOD` lists a method's parameters",
    )
    run.add_argument("--columns", help="comma-separated numeric columns of a Parquet/CSV input")
    run.add_argument(
        "--scheduler",
        metavar="ADDR",
        help="tcp://host:port of an existing Dask scheduler (default: a local cluster)",
    )
    run.add_argument(
        "--labels",
        metavar="URI",
        help="labels / targets, one per input row (supervised: spca, kspca)",
    )
    run.add_argument(
        "--eval-labels",
        metavar="URI",
        help="class labels the embedding is judged by, one per input row (any method; an "
        "AnnData file's #obs/<column>): KNC and kNN accuracy in the manifest, the picture "
        "coloured by them",
    )
    run.add_argument(
        "--actions",
        metavar="URI",
        help="the actions between consecutive rows, n - 1 labels (sequence methods: are)",
    )
    run.add_argument(
        "--graph-cache",
        metavar="URI",
        help="where kNN graphs are shared between runs on the same data (default: "
        ".dimred-cache next to the output; 'none' turns it off)",
    )
    run.add_argument(
        "--knn-target-recall",
        metavar="R",
        default="0.9",
        help="the recall the kNN graph of the graph methods should reach, checked "
        "on a sample against exact neighbours; short of it NN-descent builds "
        "again with a denser search, the partitioned backend with each row in twice "
        "as many cells (default 0.9; 'none': no check)",
    )
    run.add_argument(
        "--knn-recall-budget",
        metavar="SECONDS",
        type=float,
        help="the time the kNN backend may spend improving a graph short of the "
        "target recall (default: four times its first build)",
    )
    run.add_argument("--overwrite", action="store_true", help="replace an existing output")
    run.add_argument(
        "--credentials-block",
        metavar="NAME",
        help="a Prefect Secret block with aws_access_key_id / aws_secret_access_key "
        "for s3:// (default: the AWS_* environment of each process)",
    )
    run.add_argument(
        "--chunk-rows",
        type=int,
        metavar="N",
        help="rows per chunk (default: planned from the workers' memory)",
    )
    run.add_argument(
        "--sample-size",
        type=int,
        default=2000,
        help="rows sampled for the quality metrics (default 2000)",
    )
    run.add_argument(
        "--allow-missing-chunks",
        action="store_true",
        help="read absent chunks of a Zarr input as its fill value (zarr leaves out "
        "chunks holding only the fill value) instead of refusing the input; "
        "the manifest counts them",
    )
    run.add_argument("--json", action="store_true", help="print the manifest as JSON")

    tr = sub.add_parser(
        "transform",
        help="place the rows of a new input on a finished run's map (a run store of its own)",
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    tr.add_argument(
        "--model",
        required=True,
        metavar="RUN",
        help="the committed run whose map "
        "places the rows (its --output; a chain places through every step)",
    )
    tr.add_argument(
        "--input",
        required=True,
        metavar="URI",
        help="the new rows, in any format `run` reads, with the training data's columns",
    )
    tr.add_argument(
        "--output", required=True, metavar="URI", help="where the placement's run store goes"
    )
    tr.add_argument("--columns", help="comma-separated numeric columns of a Parquet/CSV input")
    tr.add_argument("--overwrite", action="store_true", help="replace an existing output")
    tr.add_argument(
        "--chunk-rows",
        type=int,
        metavar="N",
        help="rows per chunk (default: planned from the workers' memory)",
    )
    tr.add_argument(
        "--allow-missing-chunks",
        action="store_true",
        help="read absent chunks of a Zarr input as its fill value",
    )
    tr.add_argument(
        "--drift-warn",
        type=float,
        default=None,
        metavar="SHARE",
        help="warn when more than this share of the new rows lie farther from "
        "their nearest training rows than 99 %% of the training rows do "
        "(default 0.05)",
    )
    tr.add_argument(
        "--scheduler",
        metavar="ADDR",
        help="tcp://host:port of an existing Dask scheduler (default: a local cluster)",
    )
    tr.add_argument(
        "--credentials-block",
        metavar="NAME",
        help="a Prefect Secret block with the object storage credentials",
    )
    tr.add_argument("--json", action="store_true", help="print the manifest as JSON")

    demo = sub.add_parser(
        "demo", help="make a synthetic dataset and embed it end to end", parents=[common]
    )
    demo.add_argument("--dir", default=".dimred-demo", help="folder for the data and the output")
    demo.add_argument(
        "--data",
        choices=("lowrank", "cells"),
        default="lowrank",
        help="lowrank: 200 000 x 256 dense, PCA (default); cells: a sparse count "
        "matrix as AnnData .h5ad (50 000 cells x 2 000 genes unless --rows / "
        "--features), PCA then UMAP",
    )
    demo.add_argument("--rows", type=int, default=None)
    demo.add_argument("--features", type=int, default=None)
    demo.add_argument("--rank", type=int, default=16, help="rank of the signal under the noise")
    demo.add_argument("--n-components", type=int, default=16)
    demo.add_argument("--scheduler", metavar="ADDR")

    ins = sub.add_parser(
        "inspect",
        help="print a run's manifest and metrics; of an unfinished run, the stages it "
        "committed and who holds its lease (exit status 3)",
        parents=[common],
    )
    ins.add_argument("uri", help="the run store")
    ins.add_argument("--json", action="store_true", help="the whole manifest as JSON")

    unl = sub.add_parser(
        "unlock",
        help="remove the lease of a run that is gone (e.g. its machine was lost), so that "
        "the same command can resume its store",
        parents=[common],
    )
    unl.add_argument("uri", help="the run store")

    met = sub.add_parser(
        "methods", help="list the methods, or one method's parameters", parents=[common]
    )
    met.add_argument("method", nargs="?", help="a method: its parameters and their defaults")
    return p


def _quiet_logs(debug: bool = False) -> None:
    """Dask's and asyncio's log lines on the terminal: with --debug their warnings; without,
    nothing below critical (a stopped or closing cluster logs comm errors and tracebacks that
    say nothing to a user; a failure that matters reaches the command as a typed error). Worker
    processes started here inherit the setting through the environment."""
    level = logging.WARNING if debug else logging.CRITICAL
    for name in (
        "distributed",
        "distributed.scheduler",
        "distributed.nanny",
        "distributed.core",
        "distributed.worker",
        "distributed.http.proxy",
        "distributed.batched",
        "distributed.worker.state_machine",
        "distributed.client",
        "distributed.comm",
        "asyncio",
        "tornado.application",
        "tornado.general",
    ):
        logging.getLogger(name).setLevel(level)
    if not debug:
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "critical")


def _target_recall(value: str):
    if value.strip().lower() == "none":
        return None
    try:
        return float(value)
    except ValueError:
        raise InputError(
            f"--knn-target-recall takes a number in (0, 1] or 'none'; found {value!r}.",
            "pass --knn-target-recall 0.9.",
        ) from None


def _run_arguments(args) -> dict:
    """`run`'s options as the arguments of `flows.embed.embed` (and `RunRequest.build`), less the
    scheduler and the credentials block."""
    columns = [c.strip() for c in args.columns.split(",")] if args.columns else None
    cache = args.graph_cache
    return dict(
        input=_location(args.input, "input"),
        output=_location(args.output, "output", store=True),
        method=args.method,
        params=_params(args),
        overwrite=args.overwrite,
        columns=columns,
        sample_size=args.sample_size,
        chunk_rows=args.chunk_rows,
        labels=_location(args.labels, "labels"),
        eval_labels=_location(args.eval_labels, "eval labels"),
        graph_cache=cache
        and (cache if cache.lower() == "none" else _location(cache, "graph cache", store=True)),
        actions=_location(args.actions, "actions"),
        allow_missing_chunks=args.allow_missing_chunks,
        knn_target_recall=_target_recall(args.knn_target_recall),
        knn_recall_budget=args.knn_recall_budget,
    )


def preflight_run(args) -> None:
    """Refuse a bad run before Prefect's server or a Dask cluster starts: the services it
    needs answer (a configured Prefect API, a scheduler address) and the validate stage's
    checks pass, the output's location included, in this process. The validate checks are
    skipped with --credentials-block (the credentials come from the Prefect API, inside the
    flow); the flow checks again in any case."""
    from dimred_dask.cluster import check_scheduler

    from ._process import check_prefect_api

    check_prefect_api()
    check_scheduler(args.scheduler)
    if args.credentials_block:
        return
    from .request import RunRequest
    from .validate import preflight

    preflight(RunRequest.build(**_run_arguments(args)))


def cmd_run(args) -> int:
    from .embed import embed

    manifest = embed(
        **_run_arguments(args),
        scheduler=args.scheduler,
        credentials_block=args.credentials_block,
    )
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
    else:
        print_summary(manifest)
    return 0


def _transform_arguments(args) -> dict:
    from .transform import DRIFT_WARN

    return dict(
        model=_location(args.model, "model", store=True),
        input=_location(args.input, "input"),
        output=_location(args.output, "output", store=True),
        overwrite=args.overwrite,
        columns=[c.strip() for c in args.columns.split(",")] if args.columns else None,
        chunk_rows=args.chunk_rows,
        allow_missing_chunks=args.allow_missing_chunks,
        drift_warn=DRIFT_WARN if args.drift_warn is None else args.drift_warn,
    )


def preflight_transform(args) -> None:
    """`preflight_run` for a placement: its services, then every check of its validate stage
    (the model, its training rows' fingerprint, the input, the output) in this process."""
    from dimred_dask.cluster import check_scheduler

    from ._process import check_prefect_api

    check_prefect_api()
    check_scheduler(args.scheduler)
    if args.credentials_block:
        return
    from .transform import PlaceRequest, check_placement

    check_placement(PlaceRequest.build(**_transform_arguments(args)))


def cmd_transform(args) -> int:
    from .transform import transform

    manifest = transform(
        **_transform_arguments(args),
        scheduler=args.scheduler,
        credentials_block=args.credentials_block,
    )
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
    else:
        print_placement(manifest)
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo

    if args.data == "cells":
        from .demo import run_cells_demo

        manifest = run_cells_demo(
            args.dir,
            cells=args.rows or 50_000,
            genes=args.features or 2000,
            scheduler=args.scheduler,
        )
    else:
        manifest = run_demo(
            args.dir,
            rows=args.rows or 200_000,
            features=args.features or 256,
            rank=args.rank,
            n_components=args.n_components,
            scheduler=args.scheduler,
        )
    print()
    print_summary(manifest)
    print(f"\nembedding   {manifest['output']}/embedding  (Zarr array)")
    print(f"picture     {manifest['output']}/embedding.png")
    print(f"manifest    {manifest['output']}/manifest.json")
    return 0


def cmd_inspect(args) -> int:
    """A finished run's manifest summary (exit 0); an unfinished one's progress: the stages
    it committed and who holds its lease (exit 3)."""
    from dimred_dask.io import open_run_store

    store = open_run_store(_location(args.uri, "run store", store=True))
    if not store.committed():
        report = unfinished_report(store)
        if args.json:
            print(json.dumps(report, indent=2, sort_keys=True, default=str))
        else:
            print_unfinished(report)
        return 3
    manifest = store.read_json("manifest.json")
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
    elif manifest.get("kind") == "placement":
        print_placement(manifest)
    else:
        print_summary(manifest)
    return 0


def cmd_unlock(args) -> int:
    """Remove the lease of a run that is gone (`Lease.clear`: refused while its holder is a
    live process on this host)."""
    from dimred_dask.io import Lease, RunStore

    store = RunStore(_location(args.uri, "run store", store=True), role="run store")
    removed = Lease(store).clear()
    if removed is None:
        print(f"no lease on {store.url}: nothing to remove")
    else:
        print(
            f"removed the lease on {store.url} of {removed.get('holder')} (host "
            f"{removed.get('host')}, pid {removed.get('pid')}); the same command now resumes "
            "the run"
        )
    return 0


def cmd_methods(args) -> int:
    """The methods from their specs (`dimred_dask.methods.specs`), or one method's
    parameters: flow default, type and first sentence of its description."""
    import re
    import textwrap

    from dimred_dask.methods.specs import SPECS

    if not args.method:
        width = max(map(len, SPECS))
        for name, spec in SPECS.items():
            print(f"{name:<{width}}  {spec.summary}")
        print("\nchains: pca+<method> (PCA, then the method on its embedding)")
        print("dimred-dask methods METHOD lists a method's parameters (--param NAME=VALUE)")
        return 0
    spec = SPECS.get(args.method)
    if spec is None:
        raise InputError(
            f"Unknown method {args.method!r}; available: {sorted(SPECS)}.",
            "run `dimred-dask methods` for the list.",
        )
    print(f"{spec.name}: {spec.summary}")
    print(f"estimator   dimred_dask.{spec.estimator.__name__}")
    print(f"takes       {spec.takes.replace('`', '')}")
    if spec.flow_adds:
        print(f"flow adds   {spec.flow_adds.replace('`', '')}")
    print("\nparameters (--param NAME=VALUE; default, type):")
    for param in spec.params():
        kind = re.sub(r",? *default .*$", "", param.type)
        print(f"  {param.name} = {param.default!r}" + (f"   ({kind})" if kind else ""))
        for line in textwrap.wrap(param.doc, 88):
            print(f"      {line}")
    return 0


def quiet_prefect_env() -> None:
    """No telemetry from the temporary Prefect server: this machine talks to loopback only."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")


def _where(args) -> str:
    return getattr(args, "output", None) or getattr(args, "dir", None) or "the output"


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    debug = bool(args.debug or os.environ.get("DIMRED_DEBUG"))
    quiet_prefect_env()
    _quiet_logs(debug)
    previous = os.environ.get("DIMRED_TERMINAL_PROGRESS")
    if args.command in ("run", "transform", "demo") and previous is None:
        os.environ["DIMRED_TERMINAL_PROGRESS"] = "1"  # for this command only
    from ._process import (
        interruptible,
        quiet_prefect_console,
        start_temporary_server,
        stop_temporary_server,
    )

    try:
        with (
            interruptible("interrupted: stopping the run (Ctrl-C again to stop at once)"),
            quiet_prefect_console(debug),
        ):
            if args.command == "run":
                preflight_run(args)
            elif args.command == "transform":
                preflight_transform(args)
            elif args.command == "demo":
                from ._process import check_prefect_api

                check_prefect_api()
            server = (
                start_temporary_server() if args.command in ("run", "transform", "demo") else None
            )
            try:
                return {
                    "run": cmd_run,
                    "transform": cmd_transform,
                    "demo": cmd_demo,
                    "inspect": cmd_inspect,
                    "unlock": cmd_unlock,
                    "methods": cmd_methods,
                }[args.command](args)
            finally:
                stop_temporary_server(server)
    except BrokenPipeError:  # the reader of our output stopped (| head): not a failure here
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141
    except DimredError as exc:
        if debug:
            traceback.print_exc()
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # not one of ours: a bug, or a failure nothing here recognises
        from dimred_dask.errors import storage_error

        from ._process import prefect_api_failure

        typed = prefect_api_failure(exc)
        if typed is None and isinstance(exc, OSError) and exc.errno is not None:
            typed = storage_error(exc, "The run")  # a disk or system failure, with its fix
        if typed is not None:
            if debug:
                traceback.print_exc()
            print(f"error: {type(typed).__name__}: {typed}", file=sys.stderr)
            return 2
        if debug:
            raise
        print(
            f"error: {type(exc).__name__}: {exc}\nThis failure has no explanation of its own in "
            "dimred-dask; the Prefect logs of the run hold the traceback, and --debug shows it "
            "here. Please report it if it looks like a bug.",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print(
            f"interrupted: the run did not finish and committed nothing new at {_where(args)}; "
            "run the same command again to resume (completed stages are reused).",
            file=sys.stderr,
        )
        return 130
    finally:
        if previous is None:
            os.environ.pop("DIMRED_TERMINAL_PROGRESS", None)


if __name__ == "__main__":
    sys.exit(main())
