"""N attnviz replicas behind nginx, in the foreground: ``python deploy/replicas.py [--replicas 2] [--port 8080]``.

Starts ``streamlit run serve.py`` N times on loopback ports (``--first-port``, ``--first-port`` + 1, ...), each
with ``ATTNVIZ_REPLICA=r0``, ``r1``, ... so the app knows its own name, waits until every one answers its health
check, then runs Debian's nginx in front on ``--listen``:``--port`` with the configuration generated from
``deploy/nginx.conf`` (sticky sessions, websocket upgrades, failover). Everything it writes (the generated
configuration, nginx's pid file, temporary files and logs, one log per replica, ``replicas.json`` with each
replica's name, port and pid) is under ``--run-dir``. Runs as any user. Ctrl-C or SIGTERM stops nginx and every
replica. A replica that stops on its own is reported and left stopped: nginx sends its visitors to the others.

``--check`` only writes the configuration and runs ``nginx -t`` on it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = Path(__file__).with_name("nginx.conf")
REPLICA_ENV = "ATTNVIZ_REPLICA"  # the same name as attnviz.settings.REPLICA_ENV (this script imports no attnviz)
START_TIMEOUT_S = 300.0  # each replica loads the default model before it answers; a busy 2-core machine is slow


def replica_name(index: int) -> str:
    return f"r{index}"


def render_config(run_dir: Path, listen: str, ports: list[int]) -> str:
    """deploy/nginx.conf with this run's directory, address and one upstream server per replica port."""
    servers = "\n".join(f"        server 127.0.0.1:{port} max_fails=1 fail_timeout=30s;" for port in ports)
    names = "\n".join(f'        "~(^|, )127\\.0\\.0\\.1:{port}$" {replica_name(i)};' for i, port in enumerate(ports))
    text = TEMPLATE.read_text()
    for name, value in (
        ("@RUN_DIR@", str(run_dir.resolve())),
        ("@LISTEN@", listen),
        ("@UPSTREAM_SERVERS@", servers),
        ("@REPLICA_MAP@", names),
    ):
        text = text.replace(name, value)
    return text


def nginx_path() -> str:
    path = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
    if path is None:
        raise SystemExit("attnviz: nginx is not installed: run `apt-get install nginx` (Debian's package)")
    return path


def prepare(run_dir: Path, listen: str, ports: list[int]) -> Path:
    """Write the configuration and make the directories nginx writes to; return the configuration's path."""
    for sub in ("logs", "tmp"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    conf = run_dir / "nginx.conf"
    conf.write_text(render_config(run_dir, listen, ports))
    return conf


def nginx_command(run_dir: Path, conf: Path, *extra: str) -> list[str]:
    # -e: the error log before the configuration is read (Debian's default is under /var/log, not ours to write)
    return [nginx_path(), "-p", str(run_dir.resolve()), "-e", str(run_dir.resolve() / "logs" / "error.log"),
            "-c", str(conf.resolve()), *extra]  # fmt: skip


def check_config(run_dir: Path, conf: Path) -> subprocess.CompletedProcess:
    """``nginx -t`` on the generated configuration."""
    return subprocess.run(nginx_command(run_dir, conf, "-t"), capture_output=True, text=True, timeout=60)


def healthy(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/_stcore/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def start_replica(index: int, port: int, run_dir: Path, script: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / script), "--server.port", str(port),
           "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]  # fmt: skip
    log = open(run_dir / f"replica-{replica_name(index)}.log", "w")  # noqa: SIM115 (the child holds it)
    env = {**os.environ, REPLICA_ENV: replica_name(index), "PYTHONUNBUFFERED": "1"}
    # a session of its own: Ctrl-C in the terminal reaches this script, which stops the replicas in order
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + 15
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy/replicas.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=2, help="how many Streamlit replicas (default 2)")
    parser.add_argument("--port", type=int, default=8080, help="the port nginx listens on (default 8080)")
    parser.add_argument("--listen", default="127.0.0.1", help="the address nginx listens on (default 127.0.0.1)")
    parser.add_argument("--first-port", type=int, default=8601, help="the first replica's port (default 8601)")
    parser.add_argument("--run-dir", type=Path, default=ROOT / "build" / "replicas", help="where it all is written")
    parser.add_argument("--script", default="serve.py", help="what each replica runs (default serve.py)")
    parser.add_argument("--ports", default="", help="the replicas' ports, comma-separated (instead of --first-port)")
    parser.add_argument("--check", action="store_true", help="write the configuration, run nginx -t, exit")
    args = parser.parse_args(argv)
    if not 1 <= args.replicas <= 64:
        parser.error(f"--replicas must be 1 to 64, not {args.replicas}")
    try:
        ports = [int(p) for p in args.ports.split(",")] if args.ports else []
    except ValueError:
        parser.error(f"--ports must be port numbers separated by commas, not {args.ports!r}")
    ports = ports or [args.first_port + i for i in range(args.replicas)]
    run_dir = args.run_dir
    conf = prepare(run_dir, f"{args.listen}:{args.port}", ports)
    checked = check_config(run_dir, conf)
    if checked.returncode != 0 or args.check:
        print(checked.stderr.strip(), file=sys.stderr)
        return checked.returncode

    stopping = False

    def on_signal(signum, _frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    replicas = [start_replica(i, port, run_dir, args.script) for i, port in enumerate(ports)]
    nginx = None
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not stopping and not all(healthy(port) for port in ports):
            if any(p.poll() is not None for p in replicas) or time.monotonic() > deadline:
                print(f"attnviz: a replica did not start (logs in {run_dir})", file=sys.stderr)
                return 1
            time.sleep(0.5)
        if stopping:
            return 0
        nginx = subprocess.Popen(nginx_command(run_dir, conf, "-g", "daemon off;"), start_new_session=True)
        while not stopping and not healthy(args.port, args.listen):  # listening: the line below means ready
            if nginx.poll() is not None or time.monotonic() > deadline:
                print(f"attnviz: nginx did not start (logs in {run_dir}/logs)", file=sys.stderr)
                return 1
            time.sleep(0.2)
        listing = [{"name": replica_name(i), "port": port, "pid": proc.pid}
                   for i, (port, proc) in enumerate(zip(ports, replicas, strict=True))]  # fmt: skip
        (run_dir / "replicas.json").write_text(json.dumps({"nginx_pid": nginx.pid, "replicas": listing}, indent=1))
        print(f"attnviz: {len(ports)} replicas behind http://{args.listen}:{args.port} (run directory {run_dir})",
              flush=True)  # fmt: skip
        reported = set()
        while not stopping:
            if nginx.poll() is not None:
                print(f"attnviz: nginx stopped (exit code {nginx.returncode}; {run_dir}/logs)", file=sys.stderr)
                return 1
            for i, proc in enumerate(replicas):
                if proc.poll() is not None and i not in reported:
                    reported.add(i)
                    print(f"attnviz: replica {replica_name(i)} stopped (exit code {proc.returncode}); "
                          "nginx sends its visitors to the others", flush=True)  # fmt: skip
            time.sleep(0.5)
        return 0
    finally:
        stop([p for p in (nginx,) if p is not None])
        stop(replicas)


if __name__ == "__main__":
    sys.exit(main())
