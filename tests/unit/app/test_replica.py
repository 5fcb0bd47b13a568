"""Replicas: when a session moved here from a replica that stopped, and the nginx configuration for N replicas."""

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

from attnviz import settings
from attnviz.app.replica import moved_from, resumed_session_id
from attnviz.i18n.catalogue import catalogue

ROOT = Path(__file__).resolve().parents[3]
RESUMING = {"Sec-WebSocket-Protocol": "streamlit, 2|84eb2a20|08fa76|1796155112, 048f2a1d-1997-4675-a47f-799e48f41b95"}
FIRST = {"Sec-WebSocket-Protocol": "streamlit, 2|84eb2a20|08fa76|1796155112"}


def load_replicas_script():
    spec = importlib.util.spec_from_file_location("replicas_script", ROOT / "deploy" / "replicas.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_resumed_session_id_is_the_third_subprotocol_entry():
    assert resumed_session_id(RESUMING["Sec-WebSocket-Protocol"]) == "048f2a1d-1997-4675-a47f-799e48f41b95"
    assert resumed_session_id(FIRST["Sec-WebSocket-Protocol"]) is None
    assert resumed_session_id("streamlit, token, ") is None  # an empty entry is no id
    assert resumed_session_id(None) is None and resumed_session_id("") is None


def test_a_session_moved_only_when_the_cookie_names_another_replica_and_the_browser_resumes():
    cookie = {settings.REPLICA_COOKIE: "r0"}
    assert moved_from(cookie, RESUMING, "r1") == "r0"
    assert moved_from(cookie, RESUMING, "r0") is None  # reconnected to the same replica (its session is kept)
    assert moved_from(cookie, FIRST, "r1") is None  # a fresh page load with an old cookie: nothing was lost
    assert moved_from({}, RESUMING, "r1") is None  # never behind our nginx
    assert moved_from(cookie, RESUMING, None) is None and moved_from(cookie, RESUMING, "") is None  # no replica


def test_the_message_is_in_both_languages():
    en, zh = catalogue("en")["replicas.moved"], catalogue("zh")["replicas.moved"]
    assert en.startswith("The server that held your session stopped; this one rebuilt it from the link")
    assert "重建" in zh and "链接" in zh


def test_the_script_names_replicas_as_the_app_reads_them():
    script = load_replicas_script()
    assert script.REPLICA_ENV == settings.REPLICA_ENV
    assert [script.replica_name(i) for i in range(3)] == ["r0", "r1", "r2"]


def test_the_configuration_for_three_replicas(tmp_path):
    text = load_replicas_script().render_config(tmp_path, "127.0.0.1:8080", [8601, 8602, 8603])
    assert "@" not in re.sub(r"#.*", "", text)  # every placeholder filled
    servers = re.findall(r"server 127\.0\.0\.1:(\d+) max_fails=1 fail_timeout=30s;", text)
    assert servers == ["8601", "8602", "8603"]
    assert "hash $attnviz_route consistent;" in text and "listen 127.0.0.1:8080;" in text
    assert re.findall(r'"~\(\^\|, \)127\\\.0\\\.0\\\.1:(\d+)\$" (r\d);', text) == [
        ("8601", "r0"),
        ("8602", "r1"),
        ("8603", "r2"),
    ]
    stream = text[text.index("location /_stcore/stream") :]
    assert "proxy_set_header Upgrade $http_upgrade;" in stream and "proxy_set_header Host $host;" in stream
    assert "attnviz_replica=$attnviz_replica" in stream and "attnviz_replica=" not in text[: text.index(stream)]
    assert "proxy_http_version 1.1;" in text and "proxy_read_timeout 30m;" in text
    assert "proxy_next_upstream error timeout" in text
    paths = re.findall(r"^\s*(?:pid|\w+_temp_path|error_log|access_log) ([^\s;]+)", text, flags=re.M)
    assert len(paths) == 8, paths  # the pid file, two logs, five temporary paths
    for path in paths:
        assert path.startswith(str(tmp_path.resolve())), path  # nothing written outside the run directory


@pytest.mark.skipif(
    shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists(),
    reason="Debian's nginx is not installed (make browser)",
)
def test_nginx_accepts_the_generated_configuration(tmp_path):
    script = load_replicas_script()
    conf = script.prepare(tmp_path, "127.0.0.1:18080", [18601, 18602])
    checked = script.check_config(tmp_path, conf)
    assert checked.returncode == 0, checked.stderr
    assert "syntax is ok" in checked.stderr and "test is successful" in checked.stderr
