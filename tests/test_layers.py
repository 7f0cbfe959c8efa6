"""docs/design.md section 2 as a test: one-way imports between the layers."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "dimred_dask"


def _imports(path: pathlib.Path) -> set[str]:
    """Absolute module names imported by a file (relative imports resolved)."""
    rel = path.relative_to(ROOT).with_suffix("")
    package = list(rel.parts[:-1]) if rel.name != "__init__" else list(rel.parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)
    return found


def _layer(path: pathlib.Path) -> str:
    parts = path.relative_to(PKG).parts
    return parts[0].removesuffix(".py") if len(parts) > 1 else "top:" + parts[0].removesuffix(".py")


def _files():
    return sorted(PKG.rglob("*.py"))


def test_nothing_in_the_package_imports_prefect():
    bad = [str(f) for f in _files() if any(m.split(".")[0] == "prefect" for m in _imports(f))]
    assert not bad


def test_blocks_are_pure_in_memory_kernels():
    for f in (PKG / "blocks").rglob("*.py"):
        mods = _imports(f)
        assert not any(
            m.split(".")[0] in ("dask", "distributed", "zarr", "fsspec") for m in mods
        ), f
        assert not any(
            m.startswith("dimred_dask.") and not m.startswith("dimred_dask.blocks") for m in mods
        ), f


def test_only_io_touches_storage_libraries():
    for f in _files():
        if _layer(f) == "io":
            continue
        assert not any(m.split(".")[0] in ("zarr", "fsspec", "s3fs") for m in _imports(f)), f


def test_one_way_imports():
    # a layer may import from the layers listed for it (and the shared top-level modules)
    allowed = {
        "blocks": {"blocks"},
        "linalg": {"blocks", "linalg"},
        "pairwise": {"blocks", "linalg", "pairwise"},
        "graphs": {"blocks", "linalg", "pairwise", "graphs"},
        "methods": {"blocks", "linalg", "pairwise", "graphs", "methods"},
        "metrics": {"blocks", "linalg", "pairwise", "graphs", "metrics"},
        "io": {"io"},
    }
    shared = {"errors", "_validation", "_compute", "_progress"}
    for f in _files():
        layer = _layer(f)
        if layer not in allowed:
            continue
        for m in _imports(f):
            if not m.startswith("dimred_dask."):
                continue
            target = m.split(".")[1]
            assert target in allowed[layer] | shared, f"{f.relative_to(ROOT)} imports {m}"


def _module_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports (imports inside functions included;
    package ``__init__`` files, which re-export, are neither sources nor targets)."""
    files = {}
    for f in list(_files()) + sorted((ROOT / "flows").rglob("*.py")):
        rel = f.relative_to(ROOT).with_suffix("")
        if rel.name != "__init__":
            files[".".join(rel.parts)] = f
    edges = {}
    for name, f in files.items():
        found = set()
        for m in _imports(f):
            while m and m not in files:  # "pkg.mod.func" -> "pkg.mod"; "pkg" -> nothing
                m = m.rpartition(".")[0]
            if m and m != name:
                found.add(m)
        edges[name] = found
    return edges


def test_no_import_cycles():
    """No module imports itself through others, function-local imports counted (a cycle
    closed inside a function hides from the import-time layer rules): a shared piece
    belongs in a module both can import."""
    edges = _module_graph()
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def strongly_connected(v):  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strongly_connected(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                cycles.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            strongly_connected(v)
    assert not cycles, f"import cycles: {cycles}"


def test_flows_use_the_package_not_its_kernels():
    """The flows (Prefect tasks, no numerics) reach the numerics through the package's layers,
    never the in-memory kernels of ``blocks`` directly."""
    for f in sorted((ROOT / "flows").rglob("*.py")):
        bad = [m for m in _imports(f) if m.startswith("dimred_dask.blocks")]
        assert not bad, f"{f.relative_to(ROOT)} imports {bad}"


def test_modules_stay_small():
    for f in list(_files()) + sorted((ROOT / "flows").rglob("*.py")):
        assert len(f.read_text().splitlines()) <= 800, f


def test_the_package_and_the_cli_import_no_method_until_asked():
    """`import dimred_dask` (and so the CLI module and the errors) loads no method and no
    scikit-learn: the estimators are imported on first use (PEP 562)."""
    import subprocess
    import sys

    code = (
        "import sys, dimred_dask, flows.cli\n"
        "from dimred_dask.errors import InputError\n"
        "print(sorted(m for m in sys.modules if m.startswith(('dimred_dask.methods', "
        "'sklearn'))))\n"
        "print(dimred_dask.PCA.__module__, 'PCA' in dir(dimred_dask))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.splitlines()
    assert out == ["[]", "dimred_dask.methods.pca True"], out


def test_cli_help_loads_no_method():
    """``dimred-dask run --help`` answers without importing a method or scikit-learn (the
    methods and their parameters are ``dimred-dask methods``)."""
    import subprocess
    import sys

    code = (
        "import sys, contextlib, io\n"
        "from flows.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out, "
        "contextlib.suppress(SystemExit):\n"
        "    main(['run', '--help'])\n"
        "assert 'dimred-dask methods' in out.getvalue()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('dimred_dask.methods', "
        "'sklearn'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.splitlines()
    assert out == ["[]"], out
