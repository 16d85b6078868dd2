"""The PostgreSQL store under faults (issue 23, items 12 to 15): a writer frozen inside
its transaction, a network that goes silent, a server killed right after a fork, a
message over jsonb's limit.

The faults are real: another connection that never commits, a writer process stopped
with SIGSTOP between its blob and its row, a network namespace whose loopback is cut
while a writer in it holds a session (its packets then go nowhere, and nothing closes
the connection), a server killed with SIGKILL and started again. Each test failed
against the store before the issue was fixed: it waited for ever, or lost the fork.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sessionlab.pgserver import Cluster, NoServer, why_not_available
from sessionlab.testing import Peer

if (reason := why_not_available()) is not None:
    pytest.skip(f"needs PostgreSQL. {reason}", allow_module_level=True)
import psycopg  # noqa: E402 - after the skip

# The campaign (tests/conftest.py): PostgreSQL servers killed and networks cut.
pytestmark = pytest.mark.campaign

WRITER = Path(__file__).with_name("pg_writer.py")
HANG = 60       # seconds: a guard against a test that would otherwise wait for ever
LARGE = "The elder's map, copied out. " * 1000     # what pg_writer.py stores as a blob


@pytest.fixture
def pg(store):
    if not hasattr(store, "PostgresSessionLog"):
        pytest.skip("this store has no PostgreSQL store (lesson 11)")
    return store


def sql(url, statement, parameters=()):
    with psycopg.connect(url, autocommit=True) as connection:
        cursor = connection.execute(statement, parameters)
        return cursor.fetchall() if cursor.description else []


def contents(pg, url, session_id):
    with pg.PostgresSessionLog(url, session_id) as log:
        return [message["content"] for message in log.load()]


class Writer(Peer):
    """pg_writer.py in another process, optionally under a command prefix (nsenter)."""

    def __init__(self, module, url, session_id, action, network_timeout, prefix=()):
        super().__init__([*prefix, sys.executable, str(WRITER), module, url, session_id,
                          action, str(network_timeout)], hang=HANG)


@pytest.fixture
def writer(pg):
    started = []

    def start(url, session_id, action, network_timeout, prefix=()):
        process = Writer(pg.__file__, url, session_id, action, network_timeout, prefix)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.process.poll() is None:
            os.kill(process.process.pid, signal.SIGCONT)
        process.stop()


def in_thread(work, wait):
    """Run `work` in a thread; (True, its result or error) if it ended within `wait`
    seconds, (False, None) if it is still running (a daemon thread, left behind)."""
    outcome = {}

    def run():
        try:
            outcome["result"] = work()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            outcome["result"] = error
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(wait)
    return (not thread.is_alive()), outcome.get("result")


# --- 12. a writer frozen inside its blob transaction ----------------------------


def test_a_write_waiting_on_another_hosts_unfinished_blob_gives_up_in_time(
        pg, database):
    """Another connection stored the same content's blob and never commits (a program
    of another host, hung): a writer pasting the same content waits at most its
    network_timeout, then raises StoreBusy naming its session and the process in the
    way; nothing of the message is stored, the writer is not stopped, and once the
    other transaction ends the same append goes through."""
    digest = hashlib.sha256(LARGE.encode()).hexdigest()
    log = pg.PostgresSessionLog(database, "quest-1", network_timeout=1)
    log.append({"role": "user", "content": "first"})
    other_host = psycopg.connect(database, application_name="inn-2 importer")
    try:
        other_host.execute("INSERT INTO session_blobs (sha256, data) VALUES (%s, %s)",
                           (digest, LARGE.encode()))
        ended, result = in_thread(
            lambda: log.append({"role": "user", "content": LARGE}), wait=20)
        assert ended, ("a writer storing content another transaction holds uncommitted "
                       "should give up after its network_timeout (1 s); it was still "
                       "waiting after 20 s")
        assert isinstance(result, pg.StoreBusy), (
            f"the append should raise StoreBusy; it gave {result!r}")
        said = str(result)
        assert "'quest-1'" in said and "inn-2 importer" in said, (
            f"StoreBusy should name the session and the connection in the way: {said}")
        assert contents(pg, database, "quest-1") == ["first"], (
            "nothing of the refused message should be stored")
    finally:
        other_host.rollback()
        other_host.close()
    log.append({"role": "user", "content": LARGE})
    log.close()
    assert contents(pg, database, "quest-1") == ["first", LARGE], (
        "once the other transaction ended, the same writer's append should go through")


def test_a_writer_frozen_between_its_blob_and_its_row_blocks_no_one_for_long(
        pg, database, writer):
    """A real writer process stopped (SIGSTOP) inside its transaction, its blob stored
    and its row not: the server ends that transaction once it has been idle for the
    writer's network_timeout, so another session storing the same content goes on,
    and the frozen writer, continued, is told its write did not happen (WriterStopped)
    and stores nothing."""
    frozen = writer(database, "quest-1", "frozen", 1)
    frozen.expect("inside")
    started = time.monotonic()
    ended, result = in_thread(lambda: store_in(pg, database, "quest-2"), wait=30)
    assert ended, ("a writer frozen inside its transaction should block another "
                   "session's same content for about its network_timeout (1 s); the "
                   "other session was still waiting after 30 s")
    assert result is None, (
        f"the other session's append should go through once the frozen writer's "
        f"transaction was ended; it raised {result!r}")
    assert time.monotonic() - started < 15, "it should not have waited that long"
    os.kill(frozen.process.pid, signal.SIGCONT)
    said = frozen.expect("refused")
    assert "WriterStopped" in said and "'quest-1'" in said, (
        f"the frozen writer, continued, should stop, naming its session: {said}")
    assert contents(pg, database, "quest-1") == ["Ask the elder about the cave."], (
        "the frozen writer's large message should not be stored")
    assert contents(pg, database, "quest-2") == [LARGE], "quest-2 holds the content"


def store_in(pg, url, session_id):
    with pg.PostgresSessionLog(url, session_id, network_timeout=10) as log:
        log.append({"role": "user", "content": LARGE})


# --- 13. a network that goes silent ---------------------------------------------


@pytest.fixture
def namespace():
    """A network namespace of its own, held by a sleeping process: the command prefix
    that runs a process in it. Its loopback is up; cut() takes it down, and every
    packet between the processes in it then goes nowhere, with nothing closed."""
    tools = [shutil.which(name) for name in ("unshare", "nsenter", "ip")]
    if os.geteuid() != 0 or None in tools:
        pytest.skip("a network namespace needs root, unshare, nsenter and ip")
    unshare, nsenter, ip = tools
    holder = subprocess.Popen([unshare, "--net", "sleep", "600"])
    prefix = (nsenter, f"--net=/proc/{holder.pid}/ns/net")
    try:
        deadline = time.monotonic() + 10
        while (os.readlink(f"/proc/{holder.pid}/ns/net")
               == os.readlink("/proc/self/ns/net")) and time.monotonic() < deadline:
            time.sleep(0.01)
        if subprocess.run([*prefix, ip, "link", "set", "lo", "up"],
                          capture_output=True).returncode != 0:
            pytest.skip("this machine does not let the tests make a network namespace")

        class Namespace:
            def __init__(self):
                self.prefix = prefix

            def cut(self):
                subprocess.run([*prefix, ip, "link", "set", "lo", "down"], check=True)
        yield Namespace()
    finally:
        holder.kill()
        holder.wait()


def test_a_writer_whose_network_goes_silent_lets_go_of_the_session(
        pg, namespace, writer):
    """A writer on another host holds a session over TCP, idle, when its network goes
    silent (no packet gets through either way; nothing closes the connection). The
    server notices within about the writer's network_timeout (TCP keepalives,
    tcp_user_timeout) and ends its connection, so the session's lock is free for the
    next writer; and the silent writer's next append fails (WriterStopped) within about
    the same time, instead of hanging."""
    try:
        cluster = Cluster(listen="127.0.0.1", prefix=namespace.prefix)
    except NoServer as error:
        pytest.skip(f"the server did not start in a network namespace: {error}")
    with cluster:
        over_tcp = "postgresql://postgres@127.0.0.1:5432/postgres"
        holder = writer(over_tcp, "quest-1", "hold", 2, prefix=namespace.prefix)
        holder.expect("holding")
        with pg.PostgresSessionLog(cluster.url, "quest-1") as log:
            with pytest.raises(pg.SessionBusy):
                log.open_for_append()   # the holder has it, before the cut
        namespace.cut()
        cut = time.monotonic()
        with pg.PostgresSessionLog(cluster.url, "quest-1", timeout=30) as log:
            try:
                history = log.open_for_append()
            except pg.SessionBusy:
                pytest.fail("a writer whose network went silent still held the session "
                            "30 s later: the server never noticed it was gone")
            freed = time.monotonic() - cut
        assert [m["content"] for m in history] == ["Ask the elder about the cave."], (
            "the next writer should find the silent writer's message")
        assert freed < 20, (
            f"the session was held {freed:.0f} s after the network went silent; the "
            "server should notice within about the writer's network_timeout (2 s)")
        holder.go()
        said = holder.expect("refused", wait=30)
        assert "WriterStopped" in said and "'quest-1'" in said, (
            f"the silent writer's next append should stop it, naming the session: "
            f"{said}")


# --- 14. a durable fork and a server that crashes ---------------------------------------


@pytest.fixture
def crashable():
    """A server of this test's own, which it kills with SIGKILL and starts again. Its
    WAL writer waits 10 s between flushes (the most it may): a commit that did not wait
    for its own flush is then still in the server's memory when it is killed."""
    try:
        cluster = Cluster(settings=("wal_writer_delay=10s",))
    except NoServer as error:
        pytest.skip(f"needs a server of its own, which did not start: {error}")
    with cluster:
        yield cluster


def test_a_durable_fork_survives_a_crash_of_the_server_right_after_it(pg, crashable):
    """fork_postgres(..., durable=True) returns once its commit is flushed: the server
    killed with SIGKILL the moment it returns, then started again, has the fork, with
    its lineage and every message."""
    url = crashable.url
    with pg.PostgresSessionLog(url, "quest-1", durable=True) as log:
        log.append({"role": "user", "content": "Ask the elder about the cave."})
        log.append({"role": "assistant", "content": "The elder wants a torch."})
    for number in range(3):
        pg.fork_postgres(url, "quest-1", f"quest-fork-{number}", durable=True)
        crashable.kill()
        crashable.start()
        found = pg.lineage(url, f"quest-fork-{number}")
        assert found is not None and found["parent"] == "quest-1", (
            f"a durable fork acknowledged before the server crashed should be there "
            f"after it restarts; quest-fork-{number}'s lineage: {found}")
        assert contents(pg, url, f"quest-fork-{number}") == [
            "Ask the elder about the cave.", "The elder wants a torch."], (
            "the durable fork should hold the source's messages after the crash")


# --- 15. what a row cannot hold -----------------------------------------------
# (A text part over jsonb's limit: the contract suite, tests/contract, checks that both
# stores refuse it alike.)


def available_memory() -> int:
    with open("/proc/meminfo") as info:
        for row in info:
            if row.startswith("MemAvailable:"):
                return int(row.split()[1]) * 1024
    return 0


def test_a_content_over_a_blob_rows_limit_is_refused_and_the_writer_goes_on(
        pg, database):
    """A content one bytea value cannot hold (1 GiB and a byte; the store takes up to
    MAX_BLOB_BYTES): the database store refuses it with MessageTooLarge before sending
    a byte, and the writer goes on. (The server used to close the connection, and the
    writer stopped as if the network had broken.)"""
    size = 2**30 + 1
    if available_memory() < 4 * size:
        pytest.skip(f"needs about {4 * size >> 30} GiB of free memory")
    with pg.PostgresSessionLog(database, "quest-1") as log:
        log.append({"role": "user", "content": "first"})
        with pytest.raises(pg.MessageTooLarge, match=str(pg.MAX_BLOB_BYTES)):
            log.append({"role": "user", "content": "a" * size})
        log.append({"role": "assistant", "content": "still writing"})
    assert contents(pg, database, "quest-1") == ["first", "still writing"], (
        "nothing of the refused content should be stored, and the writer goes on")
    assert sql(database, "SELECT count(*) FROM session_blobs") == [(0,)]
