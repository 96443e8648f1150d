"""The rendezvous store: set/get/wait/add/check/delete, timeouts, and several processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest
from ignis.distributed import DistributedError, DistributedTimeoutError, TCPStore


@pytest.fixture
def server():
    s = TCPStore("127.0.0.1", 0, is_master=True, timeout=10)
    yield s
    s.close()


def test_set_then_get_from_another_client(server):
    client = TCPStore("127.0.0.1", server.port, timeout=10)
    try:
        uid = bytes(range(128))
        server.set("nccl_id", uid)
        assert client.get("nccl_id") == uid
        client.set("text", "héllo")
        assert server.get("text") == "héllo".encode()
    finally:
        client.close()


def test_get_waits_for_a_key_set_later(server):
    client = TCPStore("127.0.0.1", server.port, timeout=10)
    try:
        timer = threading.Timer(0.2, lambda: server.set("late", b"x"))
        timer.start()
        t0 = time.monotonic()
        assert client.get("late") == b"x"
        assert time.monotonic() - t0 >= 0.15
        timer.join()  # (its own reply may still be on the way)
    finally:
        client.close()


def test_add_is_an_atomic_counter(server):
    clients = [TCPStore("127.0.0.1", server.port, timeout=10) for _ in range(4)]
    try:

        def bump(c):
            for _ in range(25):
                c.add("n", 1)

        threads = [threading.Thread(target=bump, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert server.add("n", 0) == 100
        assert server.add("m", -3) == -3
    finally:
        for c in clients:
            c.close()


def test_wait_check_and_delete(server):
    assert not server.check(["a", "b"])
    server.set("a", b"1")
    server.set("b", b"2")
    server.wait(["a", "b"], timeout=1)
    assert server.check(["a", "b"])
    assert server.delete_key("a") is True
    assert server.delete_key("a") is False
    assert not server.check("a")


def test_get_times_out_naming_the_key_and_time(server):
    t0 = time.monotonic()
    with pytest.raises(DistributedTimeoutError, match=r"get\('missing'\).*0.3 s"):
        server.get("missing", timeout=0.3)
    assert time.monotonic() - t0 < 3
    with pytest.raises(DistributedTimeoutError, match=r"wait\('x', 'y'\)"):
        server.wait(["x", "y"], timeout=0.2)


def test_a_client_without_a_server_times_out():
    from ignis.distributed.run import free_port

    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(DistributedTimeoutError, match=f"127.0.0.1:{port} within 0.5 s"):
        TCPStore("127.0.0.1", port, timeout=0.5)
    assert time.monotonic() - t0 < 3


def test_a_closed_server_is_reported(server):
    client = TCPStore("127.0.0.1", server.port, timeout=10)
    server.close()
    with pytest.raises(DistributedError, match="lost the connection|timed out"):
        client.get("k", timeout=0.5)
    client.close()
    with pytest.raises(DistributedError, match="has been closed"):
        client.get("k")


def test_bad_arguments_are_refused(server):
    with pytest.raises(TypeError, match="key must be a non-empty str"):
        server.set("", b"x")
    with pytest.raises(TypeError, match="value must be bytes or str, got int"):
        server.set("k", 3)
    with pytest.raises(TypeError, match="amount must be an int"):
        server.add("k", 1.5)
    with pytest.raises(ValueError, match="timeout must be > 0"):
        server.get("k", timeout=0)
    with pytest.raises(ValueError, match="a client needs the server's port"):
        TCPStore("127.0.0.1", 0)


_WORKER = textwrap.dedent("""
    import sys
    from ignis.distributed import TCPStore
    port, rank, world = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    s = TCPStore("127.0.0.1", port, timeout=30)
    s.set(f"rank{rank}", str(rank * 10))
    n = s.add("arrived", 1)
    s.wait([f"rank{r}" for r in range(world)])
    total = sum(int(s.get(f"rank{r}")) for r in range(world))
    print(total, n >= 1)
""")


def test_several_processes_meet_through_the_store(server, tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    world = 3
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(server.port), str(r), str(world)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert [p.returncode for p in procs] == [0] * world
    assert outs == [["30", "True"]] * world
    assert server.add("arrived", 0) == world
