"""Admission: the budget's default from the container's limit, FIFO order, fit and no fit, oversize requests alone,
cancel, release however a request ends, and the place and wait a visitor is told."""

import threading

import pytest

from attnviz import settings
from attnviz.core.admission import (
    Admission,
    Need,
    Place,
    default_budget_bytes,
    memory_budget_bytes,
    read_cgroup_limit,
)

MB, GB = 2**20, 2**30


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def admission(budget_mb: int, clock=None, log=None) -> Admission:
    return Admission(budget_mb * MB, clock=clock or Clock(), on_admit=log)


# ---- the budget's default ---------------------------------------------------------------------------------------


def test_cgroup_v2_limit_is_read(tmp_path):
    (tmp_path / "memory.max").write_text("8589934592\n")
    assert read_cgroup_limit(tmp_path) == 8 * GB


def test_cgroup_v2_max_means_no_limit(tmp_path):
    (tmp_path / "memory.max").write_text("max\n")
    assert read_cgroup_limit(tmp_path) is None


def test_cgroup_v1_limit_is_read_and_its_huge_unlimited_value_is_none(tmp_path):
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("4294967296\n")
    assert read_cgroup_limit(tmp_path) == 4 * GB
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert read_cgroup_limit(tmp_path) is None


def test_no_cgroup_files_is_no_limit(tmp_path):
    assert read_cgroup_limit(tmp_path) is None


def test_default_is_the_container_limit_less_the_cache_and_the_models(tmp_path):
    (tmp_path / "memory.max").write_text("8589934592\n")  # 8 GB container on a 64 GB machine
    budget = default_budget_bytes(2048 * MB, 1536 * MB, tmp_path, physical=lambda: 64 * GB)
    assert budget == (8192 - 2048 - 1536) * MB == 4608 * MB


def test_default_without_a_limit_is_the_machine_ram_the_same_way(tmp_path):
    (tmp_path / "memory.max").write_text("max\n")
    assert default_budget_bytes(2048 * MB, 1536 * MB, tmp_path, physical=lambda: 16 * GB) == 12800 * MB


def test_a_limit_above_the_ram_counts_the_ram(tmp_path):
    (tmp_path / "memory.max").write_text(str(64 * GB))
    assert default_budget_bytes(1024 * MB, 1024 * MB, tmp_path, physical=lambda: 4 * GB) == 2048 * MB


def test_a_container_smaller_than_the_reserves_gets_a_zero_budget(tmp_path):
    (tmp_path / "memory.max").write_text(str(3 * GB))
    assert default_budget_bytes(2048 * MB, 1536 * MB, tmp_path, physical=lambda: 64 * GB) == 0


def test_env_overrides_the_default(tmp_path, monkeypatch):
    (tmp_path / "memory.max").write_text(str(8 * GB))
    monkeypatch.setenv(settings.MEMORY_MB_ENV, "6144")
    assert memory_budget_bytes(tmp_path, physical=lambda: 64 * GB) == 6144 * MB
    monkeypatch.delenv(settings.MEMORY_MB_ENV)
    monkeypatch.setenv(settings.CACHE_MB_ENV, "1024")
    assert memory_budget_bytes(tmp_path, physical=lambda: 64 * GB) == (8192 - 1024 - settings.MODELS_RESERVE_MB) * MB


def test_a_bad_env_value_is_one_clear_error(monkeypatch):
    monkeypatch.setenv(settings.MEMORY_MB_ENV, "6GB")
    with pytest.raises(ValueError, match="ATTNVIZ_MEMORY_MB"):
        memory_budget_bytes()


# ---- admission ------------------------------------------------------------------------------------------------


def test_requests_that_fit_start_at_once_and_the_next_waits():
    log = []
    gate = admission(6144, log=lambda ticket, in_flight, waiting: log.append((ticket.id, in_flight // MB, waiting)))
    first, second, third = (gate.enter(Need(2048 * MB, 10)) for _ in range(3))
    fourth = gate.enter(Need(1024 * MB, 10))
    assert [t.state for t in (first, second, third, fourth)] == ["running", "running", "running", "waiting"]
    assert gate.in_flight_bytes == 6144 * MB and gate.n_waiting == 1
    assert log == [(0, 2048, 0), (1, 4096, 0), (2, 6144, 0)]
    gate.release(first)
    assert fourth.state == "running" and gate.in_flight_bytes == 5120 * MB
    assert log[-1] == (3, 5120, 0)


def test_strict_fifo_a_small_request_does_not_overtake_a_large_one_at_the_head():
    gate = admission(4096)
    running = gate.enter(Need(3072 * MB, 10))
    large = gate.enter(Need(2048 * MB, 10))  # 3 + 2 GB > 4 GB: waits
    small = gate.enter(Need(512 * MB, 10))  # would fit (3.5 GB) but is behind the large one
    assert (large.state, small.state) == ("waiting", "waiting")
    gate.release(running)
    assert (large.state, small.state) == ("running", "running")  # both start, in order, once the head fits


def test_admission_is_in_arrival_order():
    gate = admission(1024)
    tickets = [gate.enter(Need(1024 * MB, 1)) for _ in range(4)]
    order = []
    for _ in range(4):
        (running,) = [t for t in tickets if t.state == "running"]
        order.append(running.id)
        gate.release(running)
    assert order == [t.id for t in tickets]


def test_a_request_larger_than_the_budget_runs_alone_and_never_deadlocks():
    gate = admission(1024)
    small = gate.enter(Need(512 * MB, 5))
    huge = gate.enter(Need(3072 * MB, 5))
    after = gate.enter(Need(256 * MB, 5))
    assert (huge.state, after.state) == ("waiting", "waiting")
    gate.release(small)
    assert huge.state == "running" and after.state == "waiting"  # alone: nothing else starts beside it
    gate.release(huge)
    assert after.state == "running"


def test_an_oversize_request_on_an_idle_server_starts_at_once():
    assert admission(0).enter(Need(1, 1)).state == "running"


def test_cancel_while_waiting_leaves_the_queue_and_the_next_moves_up():
    gate = admission(1024)
    running = gate.enter(Need(1024 * MB, 10))
    leaving, staying = gate.enter(Need(512 * MB, 10)), gate.enter(Need(512 * MB, 10))
    assert gate.place(staying).place == 2
    gate.cancel(leaving)
    assert leaving.state == "cancelled" and gate.place(staying).place == 1 and gate.n_waiting == 1
    gate.release(leaving)  # the request's finally: nothing more happens
    assert gate.n_waiting == 1 and gate.in_flight_bytes == 1024 * MB
    gate.release(running)
    assert staying.state == "running"


def test_a_waiting_thread_is_woken_when_memory_frees_and_by_a_cancel():
    gate = Admission(1024 * MB)
    running = gate.enter(Need(1024 * MB, 10))
    waiting, cancelled = gate.enter(Need(1024 * MB, 10)), gate.enter(Need(1024 * MB, 10))
    results = {}
    threads = [
        threading.Thread(target=lambda: results.update(waiting=gate.wait(waiting, timeout=30))),
        threading.Thread(target=lambda: results.update(cancelled=gate.wait(cancelled, timeout=30))),
    ]
    for thread in threads:
        thread.start()
    assert gate.wait(waiting, timeout=0.05) is False  # still waiting: the timeout says so
    gate.cancel(cancelled)
    gate.release(running)
    for thread in threads:
        thread.join(timeout=30)
    assert results == {"waiting": True, "cancelled": False}


def test_release_in_finally_frees_the_budget_when_the_request_raises():
    gate = admission(1024)

    class Stopped(BaseException):  # as Streamlit's StopException and RerunException are
        pass

    with pytest.raises(Stopped):
        ticket = gate.enter(Need(1024 * MB, 10))
        try:
            raise Stopped
        finally:
            gate.release(ticket)
    assert gate.in_flight_bytes == 0 and gate.n_running == 0
    assert gate.enter(Need(1024 * MB, 10)).state == "running"


def test_place_and_estimate_hand_computed():
    clock = Clock()
    gate = admission(2048, clock=clock)
    a = gate.enter(Need(1024 * MB, 60))  # running
    b = gate.enter(Need(1024 * MB, 30))  # running: a and b share the cores, each at half speed
    c = gate.enter(Need(1024 * MB, 40))  # waits for b (30 s of work at half speed: 60 s)
    d = gate.enter(Need(2048 * MB, 10))  # waits until a and c are both done
    assert (a.state, b.state, c.state, d.state) == ("running", "running", "waiting", "waiting")
    clock.now = 20.0  # a and b have each done 10 s of their work
    assert gate.place(c) == Place(1, 2, 40.0)  # b: 20 s left, at half speed: 40 s
    # after b ends (t+40): a has 30 s left, c 40 s; both at half speed: a ends after 60 s more, then c alone 10 s
    assert gate.place(d).place == 2 and gate.place(d).of == 2
    assert gate.place(d).wait_s == pytest.approx(40 + 60 + 10)
    assert gate.place(a).wait_s == 0.0  # running: no wait


def test_estimate_of_a_job_past_its_prediction_counts_it_as_ending_now():
    clock = Clock()
    gate = admission(1024, clock=clock)
    gate.enter(Need(1024 * MB, 5))
    waiting = gate.enter(Need(1024 * MB, 5))
    clock.now = 50.0
    assert gate.estimated_wait_s(waiting) == 0.0


def test_a_need_below_zero_is_refused():
    with pytest.raises(ValueError, match="-1"):
        Need(-1, 1.0)


def test_a_running_cap_holds_the_head_back_even_when_memory_fits():
    gate = Admission(budget_bytes=1000, max_running=1, clock=lambda: 0.0)
    first, second = gate.enter(Need(100, 10.0)), gate.enter(Need(100, 20.0))
    assert (first.state, second.state) == ("running", "waiting")  # 200 of 1,000 bytes would fit: the cap decides
    assert gate.place(second) == Place(1, 1, 10.0)  # it starts when the first ends, after its 10 s alone
    gate.release(first)
    assert second.state == "running"


def test_the_running_cap_comes_from_the_cores_or_the_environment(monkeypatch):
    monkeypatch.delenv(settings.MAX_RUNNING_ENV, raising=False)
    assert [settings.max_running(cores) for cores in (1, 2, 3, 16)] == [1, 1, 1, 8]
    monkeypatch.setenv(settings.MAX_RUNNING_ENV, "3")
    assert settings.max_running(2) == 3
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv(settings.MAX_RUNNING_ENV, bad)
        with pytest.raises(ValueError, match="ATTNVIZ_MAX_RUNNING"):
            settings.max_running(2)
    with pytest.raises(ValueError, match="at least one"):
        Admission(budget_bytes=1, max_running=0)


# ---- memory on the device that holds the work --------------------------------------------------------------------


def test_work_on_an_accelerator_waits_for_its_device_memory_not_only_the_hosts():
    free = {"cuda:0": 10 * GB, "cuda:1": 10 * GB}
    gate = Admission(100 * GB, device_free=free.get)
    first = gate.enter(Need(1 * MB, 1.0, 6 * GB, "cuda:0"))
    free["cuda:0"] = 4 * GB  # it took what it asked
    assert first.state == "running"
    # 6 + 4 GB on cuda:0 is over 90 % of its room (4 free + 6 held): waits, though the host has room for both
    second = gate.enter(Need(1 * MB, 1.0, 4 * GB, "cuda:0"))
    assert second.state == "waiting"
    # the same on the other GPU starts at once; work on the CPU needs no device room
    other = gate.enter(Need(1 * MB, 1.0, 4 * GB, "cuda:1"))
    assert other.state == "waiting"  # strict FIFO: the head waits, so does everyone behind it
    gate.release(first)
    free["cuda:0"] = 10 * GB
    assert second.state == "running" and other.state == "running"
    small = gate.enter(Need(1 * MB, 1.0, 4 * GB, "cuda:0"))  # 4 + 4 <= 0.9 x (10 + 4)
    assert small.state == "running"


def test_one_request_alone_on_a_device_always_starts_and_a_device_that_cannot_say_is_not_checked():
    gate = Admission(100 * GB, device_free=lambda device: None)
    assert gate.enter(Need(MB, 1.0, 500 * GB, "cuda:0")).state == "running"
    assert gate.enter(Need(MB, 1.0, 500 * GB, "cuda:0")).state == "running"  # no figure: host memory decides
    lone = Admission(100 * GB, device_free=lambda device: 0)
    assert lone.enter(Need(MB, 1.0, 500 * GB, "cuda:0")).state == "running"
    assert lone.enter(Need(MB, 1.0, 0, "cpu")).state == "running"


def test_the_running_cap_comes_from_the_devices(monkeypatch):
    monkeypatch.delenv(settings.MAX_RUNNING_ENV, raising=False)
    assert settings.max_running(16, accelerators=0) == 8  # cores / 2 on a CPU-only machine
    assert settings.max_running(16, accelerators=1) == settings.RUNNING_PER_ACCELERATOR
    assert settings.max_running(64, accelerators=4) == 4 * settings.RUNNING_PER_ACCELERATOR
    monkeypatch.setenv(settings.MAX_RUNNING_ENV, "3")
    assert settings.max_running(16, accelerators=4) == 3
