"""Many app processes behind nginx (deploy/): affinity by cookie, websockets, a worker killed and brought back, a
prompt and complete stop, clear errors, and deployment files that parse and name their probes and affinity.

The served tests use 2 workers + nginx through :func:`deploy.serve.serving` (conftest's ``cluster``, which the
failover test shares), and ``python -m deploy.serve`` once for the stop test. They need nginx (``make test``
installs it as root); without it they skip with a message.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from deploy import DeployError, nginx, worker
from deploy.procs import free_port, healthy
from deploy.serve import WORKER_HEALTH, serving

#: It starts servers: with the browser tests, one after another on one xdist worker (see docs/architecture.md).
pytestmark = pytest.mark.xdist_group("browser")

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
try:
    NGINX = nginx.find_nginx()
except DeployError as exc:
    NGINX, NO_NGINX = None, str(exc)
needs_nginx = pytest.mark.skipif(
    NGINX is None, reason="nginx is not installed (apt-get install -y nginx; make test installs it when run as root)"
)


def get(url: str, path: str = WORKER_HEALTH, worker: str | None = None) -> http.client.HTTPResponse:
    """GET ``path`` from ``url`` with the affinity cookie naming ``worker`` (no cookie when None); read."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=15)
    try:
        conn.request("GET", path, headers={"Cookie": f"ae_worker={worker}"} if worker else {})
        response = conn.getresponse()
        response.read()
        return response
    finally:
        conn.close()


def answered(response) -> str:
    """The address of the worker that answered (the last one nginx tried)."""
    return response.headers["X-Worker"].split(", ")[-1]


def affinity_cookie(response) -> str | None:
    """The value the response sets ``ae_worker`` to, or None."""
    for header in response.headers.get_all("Set-Cookie") or []:
        name, _, rest = header.partition("=")
        if name.strip() == "ae_worker":
            return rest.split(";")[0]
    return None


def address(worker) -> str:
    return f"127.0.0.1:{worker.port}"


# --- the files --------------------------------------------------------------------------------------------


def test_render_gives_each_worker_its_upstream_with_the_others_as_backups():
    conf = nginx.render([nginx.Upstream("w1", "10.0.0.1:8501"), nginx.Upstream("w2", "10.0.0.2:8501")], "8080")
    assert not nginx.FIELD.search(conf) and "listen 8080;" in conf
    w1 = conf[conf.index("upstream ae_w1 {") :]
    w1 = w1[: w1.index("}")]
    assert "server 10.0.0.1:8501 max_fails=1" in w1 and "server 10.0.0.2:8501 max_fails=1 fail_timeout=5s backup;" in w1
    assert "w2 ae_w2;" in conf and '"~(^| )10\\.0\\.0\\.2:8501$" w2;' in conf
    with pytest.raises(ValueError, match="differ"):
        nginx.render([nginx.Upstream("w1", "a:1"), nginx.Upstream("w1", "b:1")], "8080")


@needs_nginx
def test_rendered_config_passes_nginx_t(tmp_path):
    conf = nginx.render([nginx.Upstream(f"w{i}", f"127.0.0.1:{9000 + i}") for i in (1, 2, 3)], "127.0.0.1:8080")
    nginx.prepare_prefix(tmp_path, conf)
    nginx.check(NGINX, tmp_path)  # raises DeployError quoting nginx when it rejects the file
    nginx.prepare_prefix(tmp_path, conf.replace("proxy_pass", "proxy_passs", 1))
    with pytest.raises(DeployError, match="unknown directive"):
        nginx.check(NGINX, tmp_path)


def test_kubernetes_manifests_parse_and_name_probes_affinity_and_timeouts():
    docs = [d for f in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert {"Deployment", "Service", "Ingress"} <= set(by_kind)
    pod = by_kind["Deployment"]["spec"]["template"]["spec"]
    assert 10 <= pod["terminationGracePeriodSeconds"] <= 30
    container = pod["containers"][0]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["path"] == "/_stcore/health", probe
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    assert "deploy.worker" in container["command"]
    notes = by_kind["Ingress"]["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/affinity"] == "cookie"
    assert notes["nginx.ingress.kubernetes.io/affinity-mode"] == "persistent"
    assert int(notes["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600
    backend = by_kind["Ingress"]["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == by_kind["Service"]["metadata"]["name"]


def test_compose_file_parses_and_puts_the_front_before_healthy_workers():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    apps = [name for name, s in services.items() if "deploy.worker" in s["command"]]
    front = services["front"]
    assert len(apps) >= 2 and "deploy.serve" in front["command"]
    assert [a for a in front["command"] if ":8501" in a] == [f"{a}:8501" for a in apps]
    assert all(front["depends_on"][a]["condition"] == "service_healthy" for a in apps)
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    for needed in (
        "HEALTHCHECK",
        "/_stcore/health",
        "STOPSIGNAL SIGTERM",
        "USER explorer",
        "download.pytorch.org/whl/cpu",
        "deploy.serve",
    ):
        assert needed in dockerfile, needed


def test_workers_run_without_a_file_watcher():
    # the poll watcher held a visited server 16 to 19 s after SIGTERM (deploy/worker.py says why)
    cmd = worker.command(8600)
    assert cmd[cmd.index("--server.fileWatcherType") + 1] == "none"
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"


# --- the served app ---------------------------------------------------------------------------------------


def test_a_first_visit_gets_the_cookie_and_stays_on_its_worker(cluster):
    first = get(cluster.url, "/")
    assert first.status == 200
    name = affinity_cookie(first)
    worker = {w.name: w for w in cluster.workers}[name]
    assert answered(first) == address(worker)
    again = [get(cluster.url, worker=name) for _ in range(10)]
    assert {(r.status, answered(r)) for r in again} == {(200, address(worker))}
    assert all(affinity_cookie(r) is None for r in again), "a cookie that is right is not set again"


def test_fresh_visitors_spread_over_the_workers(cluster):
    seen = {answered(get(cluster.url)) for _ in range(30)}
    assert seen == {address(w) for w in cluster.workers}


def test_the_front_answers_its_own_health_check(cluster):
    response = get(cluster.url, "/_front/health")
    assert response.status == 200 and "X-Worker" not in response.headers and affinity_cookie(response) is None


def open_stream(url: str, worker: str | None = None):
    """A websocket to Streamlit's ``/_stcore/stream`` through the front at ``url`` (a context manager)."""
    from websockets.sync.client import connect

    headers = {"Cookie": f"ae_worker={worker}"} if worker else {}
    return connect(
        url.replace("http://", "ws://") + "/_stcore/stream", additional_headers=headers, proxy=None, open_timeout=15
    )


def run_app(ws) -> None:
    """Be a visitor on ``ws``: ask for a run of the app's default page and wait until it has finished."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    rerun = BackMsg()
    rerun.rerun_script.query_string = ""
    ws.send(rerun.SerializeToString())
    while True:
        msg = ForwardMsg()
        msg.ParseFromString(ws.recv(timeout=120))
        if msg.WhichOneof("type") == "script_finished":
            return


def test_a_websocket_opens_on_the_cookies_worker(cluster):
    w2 = cluster.workers[1]
    with open_stream(cluster.url, w2.name) as ws:
        assert ws.response.status_code == 101
        assert ws.response.headers["X-Worker"] == address(w2)
        assert ws.ping().wait(10), "no pong through the front"


def test_a_killed_worker_is_routed_around_and_brought_back(cluster):
    w1, w2 = cluster.workers
    old_pid, said = w1.pid, len(cluster.notes)  # the cluster is shared: what it says from here on
    with open_stream(cluster.url, w2.name) as ws:
        os.kill(old_pid, signal.SIGKILL)
        pinned = [get(cluster.url, worker=w1.name) for _ in range(10)]
        assert [r.status for r in pinned] == [200] * 10, "the client saw an error while its worker was down"
        assert {answered(r) for r in pinned} == {address(w2)}
        assert affinity_cookie(pinned[0]) == w2.name, "the session moved, and the cookie with it"
        assert ws.ping().wait(10), "the other worker's websocket did not answer"
    deadline = time.monotonic() + 60
    while not (w1.pid != old_pid and healthy(f"http://{address(w1)}{WORKER_HEALTH}")):
        assert time.monotonic() < deadline, f"w1 was not restarted: {cluster.notes}"
        time.sleep(0.3)
    assert any(n.startswith("w1 exited with code -9") for n in cluster.notes[said:])
    # once its 5 s out of rotation are over, the cookie that names it reaches it again
    while answered(get(cluster.url, worker=w1.name)) != address(w1):
        assert time.monotonic() < deadline, "the restarted worker never got its cookie's requests back"
        time.sleep(0.5)


def test_the_front_alone_serves_a_worker_started_as_a_container_starts_it(tmp_path):
    """compose's layout on one machine: ``python -m deploy.worker`` (an app container's command) and a front
    started with ``--upstream`` and a host name, as compose's front service is."""
    if NGINX is None:
        pytest.skip(NO_NGINX)
    port = free_port()
    with open(tmp_path / "worker.log", "wb") as log:
        app = subprocess.Popen(
            [sys.executable, "-m", "deploy.worker", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        with serving(upstreams=[f"localhost:{port}"]) as front:
            assert front.workers == [] and len(front.pids()) == 1  # nginx only
            first = get(front.url)
            assert first.status == 200 and answered(first) == f"127.0.0.1:{port}" and affinity_cookie(first) == "w1"
    finally:
        app.terminate()
        app.wait(timeout=15)


# --- the command ------------------------------------------------------------------------------------------


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def serve_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "deploy.serve", *args]


@needs_nginx
def test_sigterm_stops_every_process_it_started(tmp_path):
    port = free_port()
    (tmp_path / "tmp").mkdir()
    with open(tmp_path / "serve.log", "wb") as log:
        serve = subprocess.Popen(
            serve_command("--workers", "2", "--port", str(port)),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TMPDIR": str(tmp_path / "tmp")},
        )
    try:
        deadline = time.monotonic() + 120
        while not healthy(f"http://127.0.0.1:{port}/_stcore/health"):
            assert serve.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.3)
        started = descendants(serve.pid)
        assert len(started) >= 4, started  # 2 workers, nginx's master and its worker process
        with open_stream(f"http://127.0.0.1:{port}") as ws:
            run_app(ws)  # a server that has served a visitor, whose websocket is still open
            t0 = time.monotonic()
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(timeout=15) == 0
            stop_s = time.monotonic() - t0
        assert not [p for p in started if alive(p)], "processes outlived deploy.serve"
        assert stop_s < 12, f"stopping took {stop_s:.1f} s"
        assert "SIGTERM: stopped" in (tmp_path / "serve.log").read_text()
        assert not list((tmp_path / "tmp").iterdir()), "the private prefix was left behind"
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()


def run_serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m deploy.serve ARGS`` to its end; the prefix it keeps after an error goes under ``tmp_path``."""
    return subprocess.run(
        serve_command(*args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )


def test_without_nginx_it_says_how_to_install_it(tmp_path):
    done = run_serve(tmp_path, "--workers", "1", "--nginx", "/nonexistent/nginx")
    assert done.returncode == 1
    assert "apt-get install -y nginx" in done.stderr and "Traceback" not in done.stderr


@needs_nginx
def test_a_taken_port_is_a_clear_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_serve(tmp_path, "--workers", "1", "--port", str(port))
    assert done.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use" in done.stderr and "Traceback" not in done.stderr


@needs_nginx
def test_an_app_that_fails_to_start_is_a_clear_error(tmp_path):
    done = run_serve(tmp_path, "--workers", "1", "--port", str(free_port()), "--app", "no_such_app.py")
    assert done.returncode == 1
    assert "w1 exited with code" in done.stderr and "File does not exist: no_such_app.py" in done.stderr
    assert list(tmp_path.glob("attention-explorer-*/logs/w1.log")), "the logs the message quotes were removed"
    assert "Traceback" not in done.stderr
