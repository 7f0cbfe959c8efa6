"""The deployment files under deploy/: parsed and cross-checked, not run.

No Docker engine, Kubernetes or Slurm is needed (or used): every YAML file is parsed with
yaml.safe_load_all, the compose services, Kubernetes manifests, Prefect deployments and the
Dockerfile are checked against each other and against the code (the flow's signature, the
pins in constraints.txt), and the Python scripts are compiled, never imported or executed.
Fast and offline.
"""

from __future__ import annotations

import ast
import re
import shlex
import zoneinfo
from datetime import datetime
from importlib import metadata
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
IMAGE = "dimred-dask:0.1.0"

# ---------------------------------------------------------------------------- helpers


def load_docs(path: Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))


def compose() -> dict:
    (doc,) = load_docs(DEPLOY / "compose.yaml")
    return doc


def k8s_docs() -> list[dict]:
    return [d for p in sorted(K8S.glob("*.yaml")) for d in load_docs(p)]


def k8s_kind(kind: str) -> list[dict]:
    return [d for d in k8s_docs() if d.get("kind") == kind]


def prefect_yaml() -> dict:
    (doc,) = load_docs(DEPLOY / "prefect.yaml")
    return doc


def env_dict(env) -> dict:
    """A compose `environment` (mapping or KEY=VALUE list) as a dict."""
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return dict(env or {})


def words(command) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


SECRET_NAME = re.compile(r"SECRET|PASSWORD|TOKEN|API_KEY|ACCESS_KEY|PRIVATE_KEY", re.I)
# ${VAR} or ${VAR:?message} / ${VAR?message}: no literal default may hide in `:-...`.
INTERPOLATION = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(:?\?[^}]*)?\}$")
AWS_KEY_ID = re.compile(r"^(AKIA|ASIA)[A-Z0-9]{16}$")
AWS_SECRET = re.compile(r"^[A-Za-z0-9/+]{40}$")


def literal_secrets(node, where: str = "") -> list[str]:
    """Places in a parsed YAML tree where a credential is written as a literal value."""
    found: list[str] = []
    if isinstance(node, dict):
        # Kubernetes env entry: {name: AWS_SECRET_ACCESS_KEY, value: ...} must use valueFrom.
        name = node.get("name")
        if isinstance(name, str) and SECRET_NAME.search(name) and "value" in node:
            found.append(f"{where}: env {name} has a literal value (use valueFrom.secretKeyRef)")
        if node.get("kind") == "Secret" and (node.get("data") or node.get("stringData")):
            found.append(f"{where}: a Secret manifest with data")
        for key, value in node.items():
            if (
                isinstance(key, str)
                and SECRET_NAME.search(key)
                and isinstance(value, str)
                and value
                and not INTERPOLATION.match(value)
            ):
                found.append(f"{where}.{key}: {value!r} is not a ${{VAR}} interpolation")
            found += literal_secrets(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            if isinstance(item, str) and "=" in item:
                key, _, value = item.partition("=")
                if SECRET_NAME.search(key) and value and not INTERPOLATION.match(value):
                    found.append(f"{where}[{i}]: {key} has a literal value")
            found += literal_secrets(item, f"{where}[{i}]")
    elif isinstance(node, str) and (AWS_KEY_ID.match(node) or AWS_SECRET.match(node)):
        found.append(f"{where}: {node[:4]}... looks like an AWS credential")
    return found


def memory_bytes(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?", text.strip())
    assert m, f"not a memory size: {text!r}"
    number, unit = float(m.group(1)), (m.group(2) or "B").rstrip("B") or "B"
    factor = {
        "B": 1,
        "K": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
    }[unit]
    return number * factor


# ------------------------------------------------------------------------------ YAML


def test_every_yaml_file_parses():
    files = yaml_files()
    names = {p.relative_to(DEPLOY).as_posix() for p in files}
    assert {
        "compose.yaml",
        "prefect.yaml",
        "kubernetes/daskcluster.yaml",
        "kubernetes/prefect-worker.yaml",
        "kubernetes/configmap.yaml",
    } <= names
    for path in files:
        docs = load_docs(path)
        assert docs and all(isinstance(d, dict) for d in docs), path


def test_secret_detector_flags_literals_and_accepts_references():
    bad_compose = {
        "services": {
            "w": {
                "environment": {
                    "AWS_SECRET_ACCESS_KEY": "hunter2-but-longer",
                    "AWS_ACCESS_KEY_ID": "${ID:-AKIA0000}",
                }
            }
        }
    }
    bad_list = {"environment": ["MINIO_ROOT_PASSWORD=changeme"]}
    bad_k8s = {"env": [{"name": "AWS_SECRET_ACCESS_KEY", "value": "x"}]}
    bad_secret = {"kind": "Secret", "stringData": {"AWS_SECRET_ACCESS_KEY": "x"}}
    bad_shape = {"anything": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}
    for bad in (bad_compose, bad_list, bad_k8s, bad_secret, bad_shape):
        assert literal_secrets(bad), bad
    assert len(literal_secrets(bad_compose)) == 2
    good = {
        "environment": {"AWS_SECRET_ACCESS_KEY": "${AWS_SECRET_ACCESS_KEY:?set it}"},
        "env": [
            {
                "name": "AWS_SECRET_ACCESS_KEY",
                "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}},
            }
        ],
    }
    assert literal_secrets(good) == []


def test_no_literal_secret_in_compose_or_kubernetes_files():
    paths = [DEPLOY / "compose.yaml", *sorted(K8S.glob("*.yaml"))]
    problems = [
        p
        for path in paths
        for doc in load_docs(path)
        for p in literal_secrets(doc, path.relative_to(DEPLOY).as_posix())
    ]
    assert problems == []


# --------------------------------------------------------------------------- compose


def test_compose_has_the_services_wired_together():
    services = compose()["services"]
    assert {
        "prefect-server",
        "dask-scheduler",
        "dask-worker",
        "minio",
        "create-bucket",
        "prefect-worker",
    } <= set(services)

    prefect_pin = next(
        d.split("==")[1]
        for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
        if d.startswith("prefect==")
    )
    server = services["prefect-server"]
    assert server["image"] == f"prefecthq/prefect:{prefect_pin}-python3.11"
    assert words(server["command"])[:3] == ["prefect", "server", "start"]
    assert "0.0.0.0" in words(server["command"])

    for name in ("dask-scheduler", "dask-worker", "create-bucket", "prefect-worker"):
        svc = services[name]
        assert svc["image"] == IMAGE, name
        context = (DEPLOY / svc["build"]["context"]).resolve()
        assert context == ROOT, name
        assert (context / svc["build"]["dockerfile"]).resolve() == DEPLOY / "Dockerfile", name

    assert words(services["dask-scheduler"]["command"])[:2] == ["dask", "scheduler"]
    worker = words(services["dask-worker"]["command"])
    assert worker[:3] == ["dask", "worker", "tcp://dask-scheduler:8786"]
    assert worker[worker.index("--nthreads") + 1] == "1"
    assert worker[worker.index("--memory-limit") + 1] == "4GiB"
    assert services["dask-worker"]["deploy"]["replicas"] == 2

    assert services["minio"]["image"].startswith("minio/minio:")


def test_compose_environment_and_credentials():
    services = compose()["services"]
    pw = env_dict(services["prefect-worker"]["environment"])
    assert pw["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    assert pw["DASK_SCHEDULER_ADDRESS"] == "tcp://dask-scheduler:8786"
    for name in ("prefect-worker", "dask-worker", "create-bucket"):
        env = env_dict(services[name]["environment"])
        assert env["AWS_ENDPOINT_URL"] == "http://minio:9000", name
        for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert re.fullmatch(r"\$\{%s(:?\?[^}]*)?\}" % var, env[var]), (name, var)
    minio = env_dict(services["minio"]["environment"])
    assert minio["MINIO_ROOT_USER"].startswith("${AWS_ACCESS_KEY_ID")
    assert minio["MINIO_ROOT_PASSWORD"].startswith("${AWS_SECRET_ACCESS_KEY")

    # the Prefect worker serves a pool that a deployment in prefect.yaml targets
    cmd = words(services["prefect-worker"]["command"])
    assert cmd[:3] == ["prefect", "worker", "start"]
    pool = cmd[cmd.index("--pool") + 1]
    assert pool in {d["work_pool"]["name"] for d in prefect_yaml()["deployments"]}
    assert cmd[cmd.index("--type") + 1] == "process"


def test_compose_bucket_script_compiles():
    cmd = compose()["services"]["create-bucket"]["command"]
    assert cmd[:2] == ["python", "-c"]
    compile(cmd[2], "create-bucket", "exec")
    assert "$" not in cmd[2]  # compose would interpolate it


# ------------------------------------------------------------------------ Kubernetes


def test_k8s_manifests_are_namespaced_objects():
    docs = k8s_docs()
    assert {d["kind"] for d in docs} >= {"DaskCluster", "Deployment", "ConfigMap"}
    for d in docs:
        assert d["apiVersion"] and d["metadata"]["name"], d
        assert d["metadata"]["namespace"] == "dimred", d["metadata"]["name"]


def _secret_ref(container: dict, var: str) -> dict:
    entry = next(e for e in container["env"] if e["name"] == var)
    assert "value" not in entry
    return entry["valueFrom"]["secretKeyRef"]


def test_daskcluster_scheduler_and_workers():
    (cluster,) = k8s_kind("DaskCluster")
    assert cluster["apiVersion"] == "kubernetes.dask.org/v1"
    spec = cluster["spec"]
    # the operator's schema requires scheduler.spec + scheduler.service and worker.spec
    (scheduler,) = spec["scheduler"]["spec"]["containers"]
    assert words(scheduler["args"])[:2] == ["dask", "scheduler"]
    assert 8786 in {p["port"] for p in spec["scheduler"]["service"]["ports"]}
    assert spec["worker"]["replicas"] >= 1
    (worker,) = spec["worker"]["spec"]["containers"]
    assert scheduler["image"] == worker["image"] == IMAGE

    args = words(worker["args"])
    assert args[:2] == ["dask", "worker"]
    assert args[args.index("--nthreads") + 1] == "1"
    res = worker["resources"]
    assert res["requests"]["cpu"] and res["limits"]["memory"]
    # Dask's own limit below the container's, so Dask spills before the OOM killer acts
    assert memory_bytes(args[args.index("--memory-limit") + 1]) < memory_bytes(
        res["limits"]["memory"]
    )

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert _secret_ref(worker, var) == {"name": "dimred-aws", "key": var}


def test_k8s_config_points_at_the_daskcluster_and_prefect_worker_uses_it():
    (cluster,) = k8s_kind("DaskCluster")
    (config,) = k8s_kind("ConfigMap")
    data = config["data"]
    name, ns = cluster["metadata"]["name"], cluster["metadata"]["namespace"]
    assert data["DASK_SCHEDULER_ADDRESS"] in (
        f"tcp://{name}-scheduler:8786",
        f"tcp://{name}-scheduler.{ns}.svc.cluster.local:8786",
    )
    assert re.fullmatch(r"https?://[^/\s]+(/.*)?/api", data["PREFECT_API_URL"])

    (deployment,) = k8s_kind("Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == IMAGE
    cmd = words(container["command"])
    assert cmd[:3] == ["prefect", "worker", "start"]
    assert cmd[cmd.index("--pool") + 1] in {
        d["work_pool"]["name"] for d in prefect_yaml()["deployments"]
    }
    assert {"configMapRef": {"name": config["metadata"]["name"]}} in container["envFrom"]
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert _secret_ref(container, var) == {"name": "dimred-aws", "key": var}
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


# --------------------------------------------------------------------------- Prefect


def _flow_def(path: str, name: str) -> ast.FunctionDef:
    tree = ast.parse((ROOT / path).read_text())
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _embed_flow() -> ast.FunctionDef:
    return _flow_def("flows/embed.py", "embed")


def test_prefect_deployments_resolve_and_are_scheduled():
    doc = prefect_yaml()
    deployments = {d["name"]: d for d in doc["deployments"]}
    assert "pca-nightly" in deployments  # the original deployment is kept
    for name, dep in deployments.items():
        path, _, func = dep["entrypoint"].partition(":")
        assert (ROOT / path).is_file(), name
        assert dep["entrypoint"] in ("flows/embed.py:embed", "flows/transform.py:transform")
        fn = _flow_def(path, func)
        decorators = [d.func if isinstance(d, ast.Call) else d for d in fn.decorator_list]
        assert any(isinstance(d, ast.Name) and d.id == "flow" for d in decorators)
        args = [a.arg for a in fn.args.args + fn.args.kwonlyargs]
        assert set(dep.get("parameters") or {}) <= set(args), name

        crons = [s for s in dep["schedules"] if "cron" in s]
        assert crons, name
        for s in crons:
            from cronsim import CronSim

            next(CronSim(s["cron"], datetime(2026, 1, 1)))  # raises on a bad expression
            zoneinfo.ZoneInfo(s.get("timezone", "UTC"))

    # the cluster deployment runs unattended, so it must name its required input and output
    embed = _embed_flow()
    n_required = len(embed.args.args) - len(embed.args.defaults)
    required = {a.arg for a in embed.args.args[:n_required]}
    assert required == {"input", "output"}
    assert required <= set(deployments["pca-nightly-cluster"]["parameters"])
    # the nightly chain writes a dated store: tonight's run never replaces yesterday's
    chain = deployments["pca-umap-nightly"]["parameters"]
    assert chain["method"] == "pca+umap" and "{date}" in chain["output"]
    assert chain["overwrite"] is False and chain["params"]["pca.n_components"] == 50
    # the nightly placement: a fixed model, the night's dated input, a dated output
    place = deployments["place-nightly"]["parameters"]
    assert "{date}" in place["input"] and "{date}" in place["output"]
    assert "{date}" not in place["model"] and place["overwrite"] is False
    transform = _flow_def("flows/transform.py", "transform")
    n_required = len(transform.args.args) - len(transform.args.defaults)
    assert {a.arg for a in transform.args.args[:n_required]} == {"model", "input", "output"}


def test_prefect_pull_step_matches_the_image():
    (step,) = prefect_yaml()["pull"]
    directory = step["prefect.deployments.steps.set_working_directory"]["directory"]
    var = re.fullmatch(r"\{\{\s*\$(\w+)\s*\}\}", directory).group(1)
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    home = re.search(rf"\b{var}=(\S+)", dockerfile).group(1)
    assert re.search(rf"^WORKDIR\s+{re.escape(home)}\s*$", dockerfile, re.M)
    assert re.search(r"^COPY\s+flows/\s+flows/", dockerfile, re.M)


# ----------------------------------------------------------------------------- Slurm


def test_slurm_files():
    source = (DEPLOY / "slurm" / "slurm_cluster.py").read_text()
    code = compile(source, "slurm_cluster.py", "exec")  # compiled, never imported
    assert code is not None
    assert "pip install" in source and "dask-jobqueue" in source
    assert "SLURMCluster(" in source and "cluster.scale(jobs=" in source
    for kw in ("cores=", "memory=", "walltime="):
        assert kw in source
    # dask-jobqueue is imported lazily, inside main(), never at module level
    top_imports = [n for n in ast.parse(source).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not any("jobqueue" in ast.unparse(n) for n in top_imports)

    sbatch = (DEPLOY / "slurm" / "run_embed.sbatch").read_text()
    assert sbatch.startswith("#!/bin/bash")
    assert re.search(r"^#SBATCH --time=", sbatch, re.M)
    assert re.search(r"^source .*/bin/activate", sbatch, re.M)
    # the commands themselves (comments dropped, continuation lines joined)
    code = re.sub(
        r"\\\n\s*",
        " ",
        "\n".join(line for line in sbatch.splitlines() if not line.lstrip().startswith("#")),
    )
    (run,) = [
        line.strip() for line in code.splitlines() if line.strip().startswith("dimred-dask run")
    ]
    assert "--input" in run and "--output" in run
    address = re.search(r'--scheduler "\$\(cat ([^)]+)\)"', run).group(1).strip('"')
    if address.startswith("$"):  # a variable: follow its assignment
        var = address.strip("${}")
        address = re.search(rf'^{var}="?([^"\n]+?)"?$', code, re.M).group(1)
    assert address.endswith("scheduler_address")
    # ... the file slurm_cluster.py is told to write
    written = re.search(r"slurm_cluster\.py.*--address-file ([^\s)]+)", code).group(1)
    assert Path(address).name == Path(written.strip('"')).name
    # #SBATCH lines only count before the first command
    first_command = next(
        i for i, line in enumerate(sbatch.splitlines()) if line.strip() and not line.startswith("#")
    )
    last_directive = max(
        i for i, line in enumerate(sbatch.splitlines()) if line.startswith("#SBATCH")
    )
    assert last_directive < first_command


# ---------------------------------------------------------------------------- Docker

# `pip freeze` (make freeze) leaves these out of constraints.txt; the base image provides them.
NOT_FROZEN = {"pip", "setuptools", "wheel"}
# The image's interpreter: python:3.11-slim (latest 3.11 patch release) on Linux.
IMAGE_ENV = {
    "python_version": "3.11",
    "python_full_version": "3.11.9",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "platform_machine": "x86_64",
}


def test_dockerfile_installs_the_pinned_set():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\s*$", text, re.M)
    copied = [
        src
        for line in re.findall(r"^COPY\s+(.+)$", text, re.M)
        for src in line.split()[:-1]
        if not src.startswith("--")
    ]
    for required in ("pyproject.toml", "constraints.txt", "README.md", "dimred_dask/", "flows/"):
        assert required in copied
    for src in copied:  # every source exists in the build context (the repository root)
        assert (ROOT / src).exists(), src
    installs = [
        line for line in re.findall(r"pip install[^\n\\&]*", text) if "-c constraints.txt" in line
    ]
    assert installs and any('".[s3]"' in line for line in installs)
    assert re.search(r"^CMD\s+\[", text, re.M)

    from packaging.specifiers import SpecifierSet

    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert "3.11" in SpecifierSet(requires)


def test_constraints_pin_everything_the_image_installs():
    """Walk `.[s3]`'s requirements for the image's Python through the installed metadata:
    every distribution reached must be pinned (==) in constraints.txt, and the pin must satisfy
    the requirement. (The installed versions must be the pinned ones, or the walk is wrong.)"""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            pins[canonicalize_name(req.name)] = spec.version

    env = {**default_environment(), **IMAGE_ENV}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [
        Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["s3"]
    ]
    seen: dict[str, set] = {}
    unpinned, unsatisfied, drifted = [], [], []
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen and set(req.extras) <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | set(req.extras)
        if name in NOT_FROZEN:
            continue
        if name not in pins:
            unpinned.append(str(req))
            continue
        if not req.specifier.contains(pins[name], prereleases=True):
            unsatisfied.append(f"{req} vs =={pins[name]}")
        dist = metadata.distribution(name)
        if dist.version != pins[name]:
            drifted.append(f"{name} installed {dist.version}, pinned {pins[name]}")
            continue
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is None or any(
                sub.marker.evaluate({**env, "extra": e}) for e in ("", *seen[name])
            ):
                todo.append(sub)
    assert len(seen) > 50  # the walk went through the dependency tree
    assert {"prefect", "distributed", "zarr", "s3fs", "numpy"} <= set(seen)
    assert unpinned == []
    assert unsatisfied == []
    assert drifted == [], "reinstall with `make install` (pip install -c constraints.txt)"
