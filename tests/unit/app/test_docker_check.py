"""`make docker-check` (deploy/docker_check.sh) against a stand-in `docker` on PATH: no engine, healthy, unhealthy."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# answers like the docker CLI: `info` by $ENGINE, the health status from the lines of $STATUSES in turn (the last
# one from then on)
FAKE_DOCKER = """#!/bin/sh
echo "$*" >> "$CALLS"
case "$1" in
    info) [ "$ENGINE" = yes ] ;;
    inspect)
        case "$3" in
            *Running*) echo true ;;
            *Health*)
                n=$(( $(cat "$CALLS.n" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$CALLS.n"
                line=$(sed -n "${n}p" "$STATUSES"); [ -n "$line" ] || line=$(tail -n 1 "$STATUSES"); echo "$line" ;;
        esac ;;
    logs) echo "a log line" ;;
    *) : ;;
esac
"""


def run_check(tmp_path: Path, engine: bool, statuses: list[str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(0o755)
    (tmp_path / "statuses").write_text("\n".join(statuses) + "\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls"),
           "STATUSES": str(tmp_path / "statuses"), "ENGINE": "yes" if engine else "no",
           "DOCKER_CHECK_POLL": "1", "DOCKER_CHECK_TIMEOUT": "3"}  # fmt: skip
    done = subprocess.run(["sh", str(ROOT / "deploy" / "docker_check.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    return done, (tmp_path / "calls").read_text().splitlines()


def test_without_an_engine_it_says_so_in_one_line_and_exits_0(tmp_path):
    done, calls = run_check(tmp_path, engine=False, statuses=["healthy"])
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == "docker-check: no Docker engine here (docker info fails): the image was not built or run\n"
    assert calls == ["info"]  # nothing built, nothing run


@pytest.mark.slow
def test_it_builds_runs_waits_for_healthy_and_removes_the_container(tmp_path):
    done, calls = run_check(tmp_path, engine=True, statuses=["starting", "starting", "healthy"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("docker-check: attnviz:check built and healthy after ")
    assert calls[:3] == ["info", "build -t attnviz:check .", "rm -f attnviz-check"]
    assert calls[3] == "run -d --name attnviz-check --memory 8g attnviz:check"
    assert "inspect --format {{.State.Health.Status}} attnviz-check" in calls
    assert calls[-1] == "rm -f attnviz-check"  # stopped and removed once healthy


def test_an_unhealthy_container_fails_with_its_log_and_is_removed(tmp_path):
    done, calls = run_check(tmp_path, engine=True, statuses=["unhealthy"])
    assert done.returncode == 1
    assert "docker-check: the container is unhealthy" in done.stderr and "a log line" in done.stderr
    assert calls[-1] == "rm -f attnviz-check"


@pytest.mark.slow
def test_a_container_never_healthy_fails_at_the_timeout(tmp_path):
    done, calls = run_check(tmp_path, engine=True, statuses=["starting"])
    assert done.returncode == 1
    assert "docker-check: not healthy after 3 s (status: starting)" in done.stderr
    assert calls[-1] == "rm -f attnviz-check"
