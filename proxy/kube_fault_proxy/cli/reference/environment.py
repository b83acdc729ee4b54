"""The `KFP_*` environment variables: who reads each, what it means, its default.

tests/unit/test_reference_pages.py finds every `KFP_*` name in the package, scripts/, tests/, bench/, the compose
files, the Dockerfile and deploy/, and fails when one is missing here or one here is named nowhere."""

from __future__ import annotations

from dataclasses import dataclass

from kube_fault_proxy.cli.exits import DEFAULT_CONTROL
from kube_fault_proxy.cli.reference.commands import STATE_DIR_SHOWN
from kube_fault_proxy.cli.reference.markdown import code, page, table, text


@dataclass(frozen=True)
class Variable:
    """One environment variable."""

    name: str
    read_by: str
    meaning: str
    default: str = ""


FOR_USERS = (
    Variable("KFP_STATE_DIR", "every command", "where the proxy's CA, the journal and the local control plane's "
             "state are kept (the image sets `/state`)", STATE_DIR_SHOWN),
    Variable("KFP_CACHE_DIR", "`cluster build` and every command that runs the rig; scripts/fetch-promtool, "
             "scripts/fetch-nginx, scripts/container-setup", "where the binaries built from Go modules (etcd, "
             "kube-apiserver, schedulers, KWOK, kfp-burst) and the scripts' downloads are kept "
             "(the search worker image sets `/opt/kfp-cache`)", "~/.cache/kube-fault-proxy"),
    Variable("KFP_CONTROL_TOKEN", "`serve`, `ctl`, the pytest plugin, docker-compose.yaml", "`serve`: the bearer "
             "token its control plane requires, when `--control-token` is not given (a non-loopback `--control` "
             "needs one); `ctl` and the pytest plugin: the token they send, when `--token` is not given", "unset"),
    Variable("KFP_CONTROL_URL", "`ctl`", "the control plane `ctl` talks to when `--control` is not given; "
             "`cluster env` exports it for the local control plane's proxy", DEFAULT_CONTROL),
    Variable("KFP_STOCK_MITMPROXY", "`serve`", "`1`: run mitmproxy, hyper-h2 and hpack as they ship, as "
             "`serve --stock-mitmproxy` does", "unset"),
    Variable("KFP_KUBECTL", "nothing (for your shell)", "exported by `cluster env`: the kubectl `cluster build` made"),
    Variable("KFP_PROXY_KUBECONFIG", "nothing (for your shell)", "exported by `cluster env`: an admin kubeconfig "
             "that goes through the local control plane's proxy"),
    Variable("KFP_YUNIKORN_URL", "nothing (for your shell)", "exported by `cluster env` when YuniKorn runs: its "
             "REST API"),
    Variable("KFP_DEBIAN_MIRROR", "scripts/container-setup", "the Debian mirror debootstrap builds the base image "
             "from", "the first Debian archive in the machine's apt sources, else http://deb.debian.org/debian"),
    Variable("KFP_YUNIKORN_DIR", "docker-compose.yunikorn-local.yaml", "the directory holding the "
             "`yunikorn-scheduler` binary `cluster build` made", "required by that file"),
    Variable("KFP_BASE", "docker-compose.yunikorn-local.yaml", "the image the YuniKorn binary is put on",
             "python:3.12-slim"),
)

FOR_THE_TEST_SUITE = (
    Variable("KFP_PROMTOOL", "tests/unit/test_metrics.py", "the promtool that lints `/metrics`; scripts/test "
             "sets it from scripts/fetch-promtool", "promtool on the PATH"),
    Variable("KFP_IMAGE_BUILD", "tests/container", "the directory where scripts/test's background image build "
             "writes its output, exit status and seconds; unset: the tests build the image themselves"),
    Variable("KFP_MATRIX_SEEDS", "tests/matrix/test_fault_matrix.py", "the seeds every cell of the fault matrix "
             "runs under, comma-separated", "1"),
    Variable("KFP_MATRIX_RESULTS", "tests/matrix/test_fault_matrix.py", "a file each cell's result is appended to, "
             "as a JSON line"),
    Variable("KFP_MATRIX_RECHECK", "tests/matrix/test_fault_matrix.py", "seconds to keep watching each cell after "
             "its verdict, failing the cell if the verdict changes"),
    Variable("KFP_DOCS_SCREENSHOT", "tests/browser/test_dashboard_cluster.py", "`1`: refresh "
             "docs/images/dashboard.png from the test's screenshot"),
)


FOR_THE_BENCHMARKS = (
    Variable("KFP_NGINX", "bench/nginx.py and its tests", "the nginx binary a benchmark runs privately; "
             "scripts/test sets it from scripts/fetch-nginx", "nginx on the PATH"),
    Variable("KFP_MEMTRACE_DIR", "bench/memtrace/sitecustomize.py (bench/memory_soak.py sets it)", "trace the "
             "benchmarked proxy's memory: each SIGUSR2 writes a dump into this directory", "unset: no tracing"),
    Variable("KFP_MEMTRACE_FRAMES", "bench/memtrace/sitecustomize.py", "with KFP_MEMTRACE_DIR: tracemalloc's frames "
             "per allocation (0: tracemalloc off)", "0"),
    Variable("KFP_MEMTRACE_TRIM", "bench/memtrace/sitecustomize.py", "`1`: each dump also measures what glibc's "
             "malloc_trim gives back", "unset"),
)
ALL = (*FOR_USERS, *FOR_THE_TEST_SUITE, *FOR_THE_BENCHMARKS)


def _rows(variables: tuple[Variable, ...]) -> list[tuple[str, str, str, str]]:
    return [(code(v.name), text(v.meaning), text(v.read_by), text(v.default) if v.default else "")
            for v in variables]


def undescribed() -> list[str]:
    """Every variable here without a meaning or a reader."""
    return [f"environment variable {v.name}" for v in ALL if not v.meaning or not v.read_by]


def environment_page() -> str:
    """docs/reference/environment.md."""
    header = ("variable", "what it sets", "read by", "default")
    return page("Environment variables", "Every `KFP_*` variable the package, its scripts, tests and benchmarks "
                "read. "
                "Where a command-line option sets the same thing, the option is used when it is given.", [
                    "## For users\n\n" + table(header, _rows(FOR_USERS)),
                    "## For the test suite\n\n" + table(header, _rows(FOR_THE_TEST_SUITE)),
                    "## For the benchmarks\n\n" + table(header, _rows(FOR_THE_BENCHMARKS)),
                ])
