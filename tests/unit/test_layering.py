"""The layers, as the folders show them: the proxy half never imports the rig; mitmproxy is imported only in
proxy/mitm/ and FastAPI only in proxy/control/; the pure core imports neither."""

from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

import pytest
from mitmproxy import hooks
from mitmproxy.proxy import layers, server_hooks

TOP = Path(__file__).resolve().parents[2] / "proxy" / "kube_fault_proxy"
PACKAGE = TOP / "proxy"  # the proxy half
MODULES = sorted(PACKAGE.rglob("*.py"))
EVERY_MODULE = sorted(TOP.rglob("*.py"))


def imported(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function, written out in full."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


def imported_roots(path: Path) -> set[str]:
    return {name.split(".")[0] for name in imported(path)}


def layer(path: Path) -> str:
    """proxy, rig, kube, cli, or top (the package's own face and its shared leaves)."""
    parts = path.relative_to(TOP).parts
    return parts[0] if len(parts) > 1 else "top"


# What each layer may import of the package; `kube` (Kubernetes access) and the top-level leaves serve both halves.
MAY_IMPORT = {"top": {"top"}, "kube": {"top", "kube"}, "proxy": {"top", "kube", "proxy"},
              "rig": {"top", "kube", "proxy", "rig"}, "cli": {"top", "kube", "proxy", "rig", "cli"}}
FACE = {"__main__.py": {"cli"}}  # `python -m kube_fault_proxy` is the command line


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "top"
    return parts[1] if (TOP / parts[1]).is_dir() else "top"


@pytest.mark.parametrize("path", EVERY_MODULE, ids=[str(p.relative_to(TOP)) for p in EVERY_MODULE])
def test_no_layer_imports_one_above_it(path: Path) -> None:
    allowed = MAY_IMPORT[layer(path)] | FACE.get(str(path.relative_to(TOP)), set())
    ours = {m for m in imported(path) if m.split(".")[0] == "kube_fault_proxy"}
    above = sorted(m for m in ours if layer_of(m) not in allowed)
    assert above == [], f"{path.relative_to(TOP)} ({layer(path)}) imports {above}"


@pytest.mark.parametrize(("module", "expected"), [
    ("kube_fault_proxy", "top"), ("kube_fault_proxy.shipped", "top"), ("kube_fault_proxy.kube.kubeapi", "kube"),
    ("kube_fault_proxy.proxy.mitm.addon", "proxy"), ("kube_fault_proxy.rig.workloads.load", "rig"),
    ("kube_fault_proxy.rig", "rig"), ("kube_fault_proxy.cli.main", "cli")])
def test_layer_of_a_module(module: str, expected: str) -> None:
    assert layer_of(module) == expected


def test_the_layers_are_the_folders() -> None:
    assert sorted(p.name for p in TOP.iterdir() if (p / "__init__.py").exists()) == ["cli", "kube", "proxy", "rig"]


@pytest.mark.parametrize("path", EVERY_MODULE, ids=[str(p.relative_to(TOP)) for p in EVERY_MODULE])
def test_framework_imports_stay_home(path: Path) -> None:
    """The grain is the package: anything under proxy/mitm/ may import mitmproxy, nothing else may."""
    roots, where = imported_roots(path), path.relative_to(TOP).parts[:2]
    if "mitmproxy" in roots:
        assert where == ("proxy", "mitm"), f"{path} imports mitmproxy outside proxy/mitm/"
    if roots & {"fastapi", "starlette", "uvicorn"}:
        assert where == ("proxy", "control"), f"{path} imports FastAPI outside proxy/control/"


# The addons of serve's chain that touch flows, by module: one job each. A module named here other than an addon's
# own holds what its addon's hooks share with a neighbour (the answers held, which the upstream loss rule reads).
FLOW_ADDONS = {"mitm/addon.py": {"FaultAddon"}, "mitm/binds.py": {"BindReads", "BindAccounting"},
               "mitm/bind_commits.py": {"BindCommits"}, "mitm/connection_stalls.py": {"ConnectionStalls"},
               "mitm/crash_points.py": {"CrashPoints"}, "mitm/held.py": set(), "mitm/in_flight.py": {"InFlightTracking"},
               "mitm/late_commits.py": {"LateCommits"},
               "mitm/outage.py": {"OutageController", "OutageStarts"},
               "mitm/stale_reads.py": {"StaleAnswers", "StaleReads"}, "mitm/stream_settings.py": {"StreamSettings"},
               "mitm/stream_stalls.py": {"StreamStalls"},
               "mitm/timeouts.py": {"ConnectionTimeouts"}, "mitm/watch_edits.py": {"WatchEdits"}}
HOOK_NAMES = frozenset(hooks.all_hooks)  # every hook mitmproxy defines (its layers' and its server's among them)
assert layers.http.HttpRequestHook.name in HOOK_NAMES and server_hooks.ClientConnectedHook.name in HOOK_NAMES


def test_only_the_chains_addons_touch_flows() -> None:
    """Flows are touched by the addons of serve's chain, one job each, all in proxy/mitm/ (and by nothing the
    library changes or the pure core hold)."""
    users = sorted(str(p.relative_to(PACKAGE)) for p in EVERY_MODULE if "HTTPFlow" in p.read_text())
    assert users == sorted(FLOW_ADDONS)
    for name, expected in FLOW_ADDONS.items():
        flow_hooked = {c for c, h in addon_classes(ast.parse((PACKAGE / name).read_text())).items()
                       if h & FLOW_HOOKS}
        assert flow_hooked == expected, name


FLOW_HOOKS = frozenset({"requestheaders", "request", "responseheaders", "response", "error"})


def addon_classes(tree: ast.Module) -> dict[str, set[str]]:
    """The classes of a module that are mitmproxy addons (they define a hook), with the hooks they define."""
    found: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            defined = {f.name for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
            if defined & HOOK_NAMES:
                found[node.name] = defined & HOOK_NAMES
    return found


def addons_calling_addons(sources: dict[str, str]) -> list[str]:
    """Each addon that holds, makes or reaches another addon (its class named in the addon's body: a constructor
    parameter, an attribute, a call; or the master's `addons.get`): mitmproxy's chain alone calls an addon, and
    what an addon learns from another it reads from `flow.metadata`."""
    trees = {name: ast.parse(text) for name, text in sources.items()}
    addons = {cls for tree in trees.values() for cls in addon_classes(tree)}
    problems: list[str] = []
    for name, tree in trees.items():
        for node in tree.body:
            if not (isinstance(node, ast.ClassDef) and node.name in addons):
                continue
            for inner in ast.walk(node):
                named = inner.id if isinstance(inner, ast.Name) else inner.attr if isinstance(
                    inner, ast.Attribute) else None
                if named in addons and named != node.name:
                    problems.append(f"{name}: {node.name} reaches the addon {named} (line {inner.lineno})")
                if isinstance(inner, ast.Attribute) and inner.attr == "get" and isinstance(
                        inner.value, ast.Attribute) and inner.value.attr == "addons":
                    problems.append(f"{name}: {node.name} looks up an addon of the master (line {inner.lineno})")
    return problems


# The step types of the behaviours with an addon of their own: the fault addon decides them, never performs them.
OWNED_STEPS = {"StartOutage": "mitm/outage.py", "CommitLater": "mitm/late_commits.py",
               "HoldAnswer": "mitm/crash_points.py", "ServeStale": "mitm/stale_reads.py",
               "EditEvents": "mitm/watch_edits.py"}


def test_a_step_with_an_addon_of_its_own_is_named_by_that_addon_alone() -> None:
    users = {step: sorted(str(p.relative_to(PACKAGE)) for p in MODULES if p.parts[-2] == "mitm"
                          and re.search(rf"\b{step}\b", p.read_text())) for step in OWNED_STEPS}
    assert users == {step: [owner] for step, owner in OWNED_STEPS.items()}


MITM_MODULES = sorted(p for p in (PACKAGE / "mitm").glob("*.py"))


def test_no_addon_calls_another() -> None:
    assert addons_calling_addons({str(p.relative_to(PACKAGE)): p.read_text() for p in MITM_MODULES}) == []


def test_an_addon_that_calls_another_is_caught() -> None:
    """The check above can fail: an addon handed another in its constructor, one that makes another, one that
    looks another up in the master."""
    sources = {"a.py": "class Outage:\n    def error(self, flow): ...\n    def start(self): ...\n",
               "b.py": "class Faults:\n    def __init__(self, outage: Outage) -> None:\n        self.outage = outage\n"
                       "    def request(self, flow):\n        self.outage.start()\n",
               "c.py": "import a\nclass Late:\n    def __init__(self) -> None:\n        self.o = a.Outage()\n"
                       "    def response(self, flow): ...\n",
               "d.py": "class Held:\n    def response(self, flow):\n        ctx.master.addons.get('outage').start()\n"}
    assert addons_calling_addons(sources) == [
        "b.py: Faults reaches the addon Outage (line 2)", "c.py: Late reaches the addon Outage (line 4)",
        "d.py: Held looks up an addon of the master (line 3)"]
    assert addons_calling_addons({"a.py": sources["a.py"], "e.py": "class Plain:\n    def __init__(self, o: Outage)"
                                  " -> None: ...\n"}) == [], "a plain class (no hooks) may hold an addon"


PURE = ["requests/identity.py", "requests/binding.py", "requests/status.py", "schema",
        "profiles/profile.py", "profiles/loader.py", "profiles/problems.py", "profiles/yaml_reader.py",
        "profiles/match.py", "engine.py", "runtime.py", "journal.py", "profiles/library.py", "faults",
        "crd/objects.py", "crd/schema.py", "crd/definitions.py", "crd/reconciler.py", "crd/status.py",
        "revisions.py", "stale_views.py", "stale_rewrites.py", "watch_signals.py"]


def test_pure_core_has_no_framework_imports() -> None:
    for name in PURE:
        target = PACKAGE / name
        for path in [target] if target.is_file() else sorted(target.rglob("*.py")):
            assert not imported_roots(path) & {"mitmproxy", "fastapi", "starlette", "uvicorn",
                                               "asyncio", "socket", "prometheus_client"}, path


def test_prometheus_has_one_home() -> None:
    """Only the control plane's collector (read at scrape time) and its route import prometheus_client."""
    users = sorted(str(p.relative_to(PACKAGE)) for p in EVERY_MODULE if "prometheus_client" in imported_roots(p))
    assert users == ["control/metrics.py", "control/observe.py"]


def test_the_pure_core_has_no_circle_schema_below_faults_and_requests_below_profiles() -> None:
    """schema/ (the strict model, units, globs) imports nothing of the proxy; faults/ and requests/ build on it and
    never on profiles/, which builds on them: no circle between the three."""
    def proxy_imports(folder: str) -> set[str]:
        return {m for p in (PACKAGE / folder).rglob("*.py") for m in imported(p)
                if m.startswith("kube_fault_proxy.proxy.")}
    assert proxy_imports("schema") == set()
    for folder in ("faults", "requests"):
        assert not {m for m in proxy_imports(folder) if m.startswith("kube_fault_proxy.proxy.profiles")}, folder


def module_name(path: Path) -> str:
    parts = path.relative_to(TOP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules a file imports, at the top, inside a function or under TYPE_CHECKING: a name
    imported from a package is the module of that name when there is one, else the package itself."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found & modules


def test_no_module_is_in_an_import_circle() -> None:
    """Not even one a type annotation alone draws (an import under TYPE_CHECKING): a circle is a room that
    cannot be read without the one that reads it."""
    paths = {module_name(p): p for p in EVERY_MODULE}
    graph = {name: package_imports(path, set(paths)) - {name} for name, path in paths.items()}
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        pytest.fail(f"an import circle: {' -> '.join(e.args[1])}")


SERVER = PACKAGE / "mitm" / "server.py"
ARCHITECTURE = TOP.parents[1] / "docs" / "concepts" / "architecture.md"


def chain_order(source: str) -> list[str]:
    """The project's addons in the order `server.start` adds them (`*limits` holds the StreamSettings, where used;
    mitmproxy's own, reached through their modules, are left out)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add" and \
                isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "addons":
            for arg in node.args:
                if isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name) and arg.value.id == "limits":
                    names.append("StreamSettings")
                elif isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name):
                    names.append(arg.func.id)
    return names


def test_the_architecture_pages_table_is_the_chain_in_its_order() -> None:
    """Where an addon sits says what it sees (the stale views read an answer before a fault replaces it, and wrap
    the watch edits' stream): the page's table lists serve's chain in the order server.py adds it."""
    chain = [name for name in chain_order(SERVER.read_text()) if name != "PreferHttp2"]  # TLS's: before any request
    table = re.findall(r"^\| `(\w+)` \|", ARCHITECTURE.read_text(), re.MULTILINE)
    assert chain == table
    assert chain.index("StaleAnswers") + 1 == chain.index("FaultAddon") < chain.index("WatchEdits") < \
        chain.index("StaleReads")


def test_the_chains_order_is_read_from_the_call() -> None:
    source = "m.addons.add(core.Core(), A(x), *limits, B(), *extra, ready)\nother.add(C())\n"
    assert chain_order(source) == ["A", "StreamSettings", "B"], "mitmproxy's own (core.Core) are not the project's"
