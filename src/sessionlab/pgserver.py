"""A throwaway PostgreSQL server for lesson 11's tests, the contract suite and the bench.

`initdb` and `pg_ctl` from the distribution's postgresql package make a cluster in a
temporary folder that listens on a Unix socket only (no TCP port, nothing another machine
can reach) and is removed when the run ends. SESSIONLAB_POSTGRES_URL, when set, names a
server to use instead (each test then works in a schema of its own, dropped afterwards).

Why not pytest-postgresql's `postgresql_proc`, which does the same: it runs initdb and
pg_ctl as the current user, and both refuse to run as root, which is how CI runs (and
many containers). Here, as root, the cluster belongs to the `postgres` user
(`runuser -u postgres -- initdb ...`). Its plugin would also load into every pytest run
of the course, lessons 00 to 07 included, and slow their start.

No import of psycopg at the top: the plugin that registers these fixtures is loaded by
every lesson's tests.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import pytest

URL_VARIABLE = "SESSIONLAB_POSTGRES_URL"
INSTALL = ("`sudo apt-get install postgresql` (Debian, Ubuntu), `brew install "
           f"postgresql` (macOS), or set {URL_VARIABLE}=postgresql://user@host/db")
INSTALL_DRIVER = "`pip install -e '.[postgres]'` (psycopg 3)"
# Time for pg_ctl to start or stop the server; a loaded machine needs more than 10 s.
PG_CTL_SECONDS = "60"


class NoServer(RuntimeError):
    """No PostgreSQL here: the message says, in one line, how to get one."""


def find_binary(name: str) -> str | None:
    """`initdb` or `pg_ctl`: on PATH, else in the distribution's own folder (Debian keeps
    them out of PATH, in /usr/lib/postgresql/<version>/bin), newest version first."""
    if found := shutil.which(name):
        return found
    candidates = glob.glob(f"/usr/lib/postgresql/*/bin/{name}")
    candidates.sort(key=lambda path: int(Path(path).parts[-3]) if
                    Path(path).parts[-3].isdigit() else 0, reverse=True)
    return candidates[0] if candidates else None


def _as_server_user(command: list[str]) -> list[str]:
    """The command as it may run: as root, handed to the `postgres` user."""
    if os.geteuid() != 0:
        return command
    runuser = shutil.which("runuser")
    if runuser is None:
        raise NoServer("PostgreSQL refuses to run as root and `runuser` is missing: "
                       f"run the tests as another user, or set {URL_VARIABLE}")
    return [runuser, "-u", "postgres", "--", *command]


@contextlib.contextmanager
def throwaway_cluster(*, fsync: bool = False) -> Iterator[str]:
    """Start a new cluster in a temporary folder; yield its URL; stop and remove it.

    fsync=False (the tests') skips the server's own fsyncs: a test server's data need
    not survive a power cut, and its runs are faster. The bench passes fsync=True, so
    that a durable commit costs what it costs in production.
    """
    with Cluster(fsync=fsync) as cluster:
        yield cluster.url


class Cluster:
    """A throwaway cluster in a temporary folder, which its owner may crash and start
    again: `url` reaches it through its Unix socket; kill() ends the server and every
    process of it with SIGKILL, as a crash would; start() starts it on the same data
    (the server's crash recovery replays its WAL); close() stops it and removes it all.

    `settings` are extra `-c name=value` server settings. `listen` (an address, such
    as 127.0.0.1) makes it listen on TCP port 5432 too, and `prefix` is a command that
    pg_ctl runs under (`nsenter --net=...`: the server then lives in that network
    namespace, and so does its address).
    """

    def __init__(self, *, fsync: bool = False, settings: tuple[str, ...] = (),
                 listen: str = "", prefix: tuple[str, ...] = ()) -> None:
        initdb, pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise NoServer(f"PostgreSQL is not installed here (no initdb): {INSTALL}")
        self.pg_ctl = pg_ctl
        self.prefix = list(prefix)
        # Not under pytest's tmp_path: its parents are private to root, and the server,
        # as root, runs as `postgres`, which must reach its own folder.
        # The server's socket lives in this folder, and a socket's path must fit in 107
        # bytes: under a long TMPDIR (a grader's run folder), use /tmp instead.
        base = tempfile.gettempdir()
        if len(base) > 60 and os.path.isdir("/tmp"):
            base = "/tmp"
        self.folder = Path(tempfile.mkdtemp(prefix="sessionlab-pg-", dir=base))
        self.data = self.folder / "data"
        self.url = f"postgresql://postgres@/postgres?host={self.folder}"
        self.options = " ".join([f"-k {self.folder}", f"-c listen_addresses='{listen}'",
                                 f"-c fsync={'on' if fsync else 'off'}",
                                 *(f"-c {setting}" for setting in settings)])
        self.running = False
        try:
            if os.geteuid() == 0:
                try:
                    server_user = pwd.getpwnam("postgres")
                except KeyError:
                    raise NoServer("PostgreSQL refuses to run as root and there is no "
                                   f"`postgres` user: run as another user, or set "
                                   f"{URL_VARIABLE}") from None
                os.chown(self.folder, server_user.pw_uid, server_user.pw_gid)
            _run(_as_server_user([initdb, "-D", str(self.data), "-U", "postgres", "-A",
                                  "trust", "-E", "UTF8", "--no-locale", "--no-sync"]),
                 "initdb")
            self.start()
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    def start(self) -> None:
        _run(self.prefix + _as_server_user(
            [self.pg_ctl, "-D", str(self.data), "-l", str(self.folder / "log"), "-w",
             "-t", PG_CTL_SECONDS, "-o", self.options, "start"]),
             "pg_ctl start", log=self.folder / "log")
        self.running = True

    def kill(self) -> None:
        """SIGKILL the server and every process it started, at once, and wait until
        they are gone: nothing is flushed, as in a crash of the server's machine whose
        disk keeps what was written to it."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        family = [postmaster] + [
            pid for pid in _pids() if _parent_of(pid) == postmaster]
        for pid in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + float(PG_CTL_SECONDS)
        while any(_alive(pid) for pid in family) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.running = False

    def close(self) -> None:
        if self.running:
            subprocess.run(_as_server_user([self.pg_ctl, "-D", str(self.data), "-m",
                                            "immediate", "-w", "-t", PG_CTL_SECONDS,
                                            "stop"]),
                           capture_output=True, check=False)
            self.running = False
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])     # the field after the state


def _alive(pid: int) -> bool:
    """Whether `pid` is still there, a zombie included: the server's next start
    refuses to run while its old postmaster's pid answers a signal."""
    return os.path.exists(f"/proc/{pid}")


def _run(command: list[str], what: str, log: Path | None = None) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        if log is not None and log.exists():
            said += log.read_text(errors="replace").strip().splitlines()[-3:]
        raise NoServer(f"{what} failed: {' / '.join(said[-3:]) or done.returncode}")


def with_schema(url: str, schema: str) -> str:
    """`url` with every connection's search_path set to `schema` (libpq's `options`),
    and the schema as its application_name, so the fixture can find its connections."""
    separator = "&" if "?" in url else "?"
    return (f"{url}{separator}options=-csearch_path%3D{schema}"
            f"&application_name={schema}")


def why_not_available() -> str | None:
    """Why no test can reach PostgreSQL here (one line saying how to fix it), or None.

    Cheap: it looks for the driver and for initdb (or the URL), it starts nothing.
    """
    try:
        import psycopg  # noqa: F401 - only to know that it is there
    except ImportError:
        return f"PostgreSQL's Python driver is not installed: {INSTALL_DRIVER}"
    if os.environ.get(URL_VARIABLE) or find_binary("initdb") and find_binary("pg_ctl"):
        return None
    return f"PostgreSQL is not installed here (no initdb): {INSTALL}"


# --- the fixtures (registered by sessionlab.pytest_plugin) ----------------------------


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of a PostgreSQL server for this run: SESSIONLAB_POSTGRES_URL, or a
    throwaway cluster. Without either, or without psycopg, every test that needs it is
    skipped with one line saying how to get it."""
    if (reason := why_not_available()) is not None:
        pytest.skip(f"needs PostgreSQL. {reason}")
    if url := os.environ.get(URL_VARIABLE):
        yield url
        return
    try:
        cluster = throwaway_cluster()
        url = cluster.__enter__()
    except NoServer as error:
        pytest.skip(f"needs PostgreSQL, which did not start: {error}")
    try:
        yield url
    finally:
        cluster.__exit__(None, None, None)


@pytest.fixture
def database(postgres_server: str) -> Iterator[str]:
    """A URL whose connections work in a new, empty schema of their own: a test sees no
    table another test made. The schema is dropped after the test."""
    import psycopg

    schema = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
        started = connection.execute("SELECT clock_timestamp()").fetchone()[0]
    try:
        yield with_schema(postgres_server, schema)
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as connection:
            end_connections_since(connection, started)
            connection.execute(f"DROP SCHEMA {schema} CASCADE")


def end_connections_since(connection: Any, started: Any, wait: float = 10.0) -> None:
    """End every other connection to this database opened since `started` (the test's
    own: the store names its connections after its process, not the schema), and wait
    until they are gone.

    A writer the test left open (in a child it killed, say) would make the drop wait for
    its locks, and its advisory lock, which is per database and not per schema, would
    make the next test's writer of the same session id find the session busy.
    pg_terminate_backend() only asks: the lock goes when the backend has exited.
    """
    query = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
             "AND pid <> pg_backend_pid() AND backend_start >= %s")
    pids = [row[0] for row in connection.execute(query, (started,))]
    for pid in pids:
        connection.execute("SELECT pg_terminate_backend(%s)", (pid,))
    deadline = time.monotonic() + wait
    while pids and time.monotonic() < deadline:
        alive = connection.execute("SELECT pid FROM pg_stat_activity "
                                   "WHERE pid = ANY(%s)", (pids,)).fetchall()
        if not alive:
            return
        time.sleep(0.01)
