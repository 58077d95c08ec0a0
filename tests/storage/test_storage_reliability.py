"""Storage under adverse conditions, on real SQLite files (no mocks of SQLite).

Foreign, future and read-only files stay untouched; races and absurd ids give
``NotFound``; damaged or swapped checkpoints fail their check; a full disk still
lets the user read (and, with the database open, delete); ids are never reused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import zlib
from pathlib import Path

import pytest
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.schema import CreateIndex, CreateTable

from storage import checkpoint_rows, conversation_rows, node_rows, reserve, tree_reads
from storage.db import open_database
from storage.errors import NotFound, StorageUnavailable
from storage.migrations import SCHEMA_VERSION
from storage.tables import Base

ROOT = Path(__file__).resolve().parents[2]


def _chain(db, length: int, title: str = "t") -> list[int]:
    _conv, root = conversation_rows.create_conversation(db, title, None)
    ids = [root.id]
    for i in range(length):
        role = "user" if i % 2 == 0 else "assistant"
        ids.append(node_rows.add_node(db, ids[-1], role, f"m{i}", tokens=[i, i + 1]).id)
    return ids


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file in ``folder`` with the sha256 of its bytes."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
    }


# --- files that are not ours stay untouched -----------------------------------


def test_foreign_sqlite_file_is_left_byte_for_byte(tmp_path: Path):
    foreign = tmp_path / "contacts.sqlite3"
    with contextlib.closing(sqlite3.connect(foreign)) as con:
        con.execute("CREATE TABLE contacts (name TEXT)")
        con.execute("INSERT INTO contacts VALUES ('Ada')")
        con.commit()
    before = _snapshot(tmp_path)
    with pytest.raises(StorageUnavailable, match="not an Arbor database"):
        open_database(foreign)
    assert _snapshot(tmp_path) == before  # same bytes (still not WAL), no -shm


def test_future_schema_is_left_byte_for_byte(tmp_path: Path):
    path = tmp_path / "arbor.sqlite3"
    open_database(path).close()
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        con.commit()
    before = _snapshot(tmp_path)
    with pytest.raises(StorageUnavailable, match="newer version of Arbor"):
        open_database(path)
    assert _snapshot(tmp_path) == before


def test_relative_path_opens_twice(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        db = open_database(Path("data") / "arbor.sqlite3")
        try:
            assert db.path == tmp_path / "data" / "arbor.sqlite3"
            conversation_rows.create_conversation(db, "x", None)
        finally:
            db.close()


# --- read-only files and folders ----------------------------------------------

_READ_ONLY_CHECK = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from storage import checkpoint_rows, conversation_rows, node_rows, tree_reads
    from storage.db import open_database
    from storage.errors import StorageUnavailable

    db = open_database(Path(sys.argv[1]))
    assert db.read_only, "not opened read-only"
    assert [c.title for c in conversation_rows.list_conversations(db)] == ["kept"]
    assert node_rows.mark_interrupted_generations(db) == 0
    try:
        conversation_rows.create_conversation(db, "new", None)
    except StorageUnavailable as exc:
        print(exc)
    else:
        raise AssertionError("a write went through")
    db.close()
    """
)


def _unprivileged() -> list[str]:
    """A command prefix running as an unprivileged user, or skip the test."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot drop privileges")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _run_read_only_check(path: Path) -> str:
    result = subprocess.run(
        [*_unprivileged(), sys.executable, "-c", _READ_ONLY_CHECK, str(path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def shared_folder():
    # pytest's tmp_path is private to its user; the unprivileged user needs a
    # folder it may enter.
    folder = Path(tempfile.mkdtemp(prefix="arbor-ro-"))
    folder.chmod(0o755)
    yield folder / "data"
    for path in folder.rglob("*"):
        path.chmod(0o700 if path.is_dir() else 0o600)
    shutil.rmtree(folder)


def _kept_database(folder: Path) -> Path:
    folder.mkdir()
    path = folder / "arbor.sqlite3"
    db = open_database(path)
    conversation_rows.create_conversation(db, "kept", None)
    db.close()
    return path


@pytest.mark.parametrize("what", ["file", "folder"])
def test_read_only_database_reads_and_refuses_writes(shared_folder: Path, what):
    path = _kept_database(shared_folder)
    if what == "file":
        path.chmod(0o444)
        shared_folder.chmod(0o777)  # writable folder: only the file is read-only
        expected = "no write permission on the file"
    else:
        path.chmod(0o644)
        shared_folder.chmod(0o555)
        expected = "no write permission on the folder"
    before = _snapshot(shared_folder)
    message = _run_read_only_check(path)
    assert "is read-only" in message and expected in message
    assert "you can read, not write" in message
    assert "corrupt" not in message
    assert _snapshot(shared_folder) == before


def test_read_only_file_system(tmp_path: Path):
    mount = tmp_path / "mnt"
    mount.mkdir()
    if os.geteuid() != 0 or not _mount_tmpfs(mount):
        pytest.skip("cannot mount a tmpfs here")
    try:
        path = _kept_database(mount / "data")
        before = _snapshot(path.parent)
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        db = open_database(path)
        try:
            assert db.read_only
            assert "read-only file system" in (db.read_only_reason or "")
            assert [c.title for c in conversation_rows.list_conversations(db)] == [
                "kept"
            ]
            with pytest.raises(StorageUnavailable, match="you can read, not write"):
                conversation_rows.create_conversation(db, "new", None)
        finally:
            db.close()
        assert _snapshot(path.parent) == before
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def _mount_tmpfs(mount: Path, size: str = "4m") -> bool:
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
    )
    return result.returncode == 0


# --- races and ids ----------------------------------------------------------------


def test_send_racing_a_branch_delete_gives_only_not_found(tmp_path: Path):
    path = tmp_path / "arbor.sqlite3"
    db = open_database(path, busy_timeout_ms=5000)
    other = open_database(path, busy_timeout_ms=5000)  # like a second process
    profile = checkpoint_rows.ensure_profile(db, "fp", {})
    unexpected: list[BaseException] = []
    not_found = 0
    try:
        for _round in range(15):
            ids = _chain(db, 2)
            branch = ids[1]
            deleted = threading.Event()

            def delete(branch: int = branch, deleted: threading.Event = deleted):
                try:
                    node_rows.delete_subtree(other, branch)
                except BaseException as exc:  # pragma: no cover - reported below
                    unexpected.append(exc)
                finally:
                    deleted.set()

            thread = threading.Thread(target=delete)
            thread.start()
            while True:
                done = deleted.is_set()
                try:
                    node_rows.update_node(db, ids[2], text="streaming")
                    checkpoint_rows.save_checkpoint(
                        db, ids[2], profile, "delta", 0, 2, b"x" * 64
                    )
                    node_rows.add_node(db, ids[2], "assistant", "reply")
                    conversation_rows.set_active_node(db, ids[2])
                except NotFound:
                    not_found += 1
                    break
                if done:
                    break
            thread.join()
            with pytest.raises(NotFound, match=f"No node with id {ids[2]}"):
                node_rows.update_node(db, ids[2], text="late")
            with pytest.raises(NotFound):
                checkpoint_rows.save_checkpoint(
                    db, ids[2], profile, "delta", 0, 2, b"x"
                )
        assert unexpected == []
        assert not_found > 0
        with contextlib.closing(sqlite3.connect(path)) as con:
            assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        other.close()
        db.close()


@pytest.mark.parametrize("bad", [2**63, 2**64 + 5, -1, 0])
def test_ids_outside_sqlite_range_are_not_found(tmp_path: Path, bad: int):
    db = open_database(tmp_path / "arbor.sqlite3")
    try:
        ids = _chain(db, 1)
        profile = checkpoint_rows.ensure_profile(db, "fp", {})
        for call in (
            lambda: node_rows.get_node(db, bad),
            lambda: node_rows.get_path(db, bad),
            lambda: conversation_rows.get_conversation(db, bad),
            lambda: tree_reads.tree(db, bad),
            lambda: node_rows.update_node(db, bad, text="x"),
            lambda: node_rows.add_node(db, bad, "user", "x"),
            lambda: node_rows.delete_subtree(db, bad),
            lambda: conversation_rows.delete_conversation(db, bad),
            lambda: conversation_rows.set_active_node(db, bad),
            lambda: conversation_rows.rename_conversation(db, bad, "x"),
            lambda: checkpoint_rows.save_checkpoint(
                db, bad, profile, "delta", 0, 2, b""
            ),
        ):
            with pytest.raises(NotFound):
                call()
        assert node_rows.get_children(db, bad) == []
        assert checkpoint_rows.load_checkpoints(db, [bad, ids[1]], profile) == {}
        assert checkpoint_rows.checkpointed_nodes(db, [bad], bad) == {}
        assert checkpoint_rows.delete_checkpoints(db, node_ids=[bad]) == 0
    finally:
        db.close()


def test_deleted_newest_ids_are_never_reused(tmp_path: Path):
    db = open_database(tmp_path / "arbor.sqlite3")
    try:
        ids = _chain(db, 2)
        node_rows.delete_subtree(db, ids[-1])
        assert node_rows.add_node(db, ids[-2], "assistant", "again").id > ids[-1]
        conv = node_rows.get_node(db, ids[0]).conversation_id
        conversation_rows.delete_conversation(db, conv)
        new_conv, _root = conversation_rows.create_conversation(db, "next", None)
        assert new_conv.id > conv
    finally:
        db.close()


# --- checkpoints: wrong types and swaps -----------------------------------------


@pytest.fixture
def checkpointed(tmp_path: Path):
    """A database with two sibling replies, each with a checkpoint."""
    db = open_database(tmp_path / "arbor.sqlite3")
    _conv, root = conversation_rows.create_conversation(db, "t", None)
    user = node_rows.add_node(db, root.id, "user", "q", tokens=[1, 2])
    siblings = [
        node_rows.add_node(db, user.id, "assistant", t, tokens=tok, start_pos=2)
        for t, tok in (("a", [3, 4]), ("b", [5, 6]))
    ]
    profile = checkpoint_rows.ensure_profile(db, "fp", {})
    for node, fill in zip(siblings, (b"A", b"B"), strict=True):
        checkpoint_rows.save_checkpoint(db, node.id, profile, "delta", 2, 4, fill * 300)
    yield db, [s.id for s in siblings], profile
    db.close()


def _stored(db, node_id: int, profile: int):
    stored = checkpoint_rows.load_checkpoints(db, [node_id], profile).get(node_id)
    assert stored is not None
    return stored


@pytest.mark.parametrize("value", ["text", 12345, 1.5])
def test_blob_of_the_wrong_sql_type_is_not_intact(checkpointed, value):
    db, (first, _second), profile = checkpointed
    assert _stored(db, first, profile).is_intact()
    with contextlib.closing(sqlite3.connect(db.path)) as con:
        con.execute(
            "UPDATE checkpoint_blob SET data = ? WHERE checkpoint_id = "
            "(SELECT id FROM checkpoint WHERE node_id = ?)",
            (value, first),
        )
        con.commit()
    assert not _stored(db, first, profile).is_intact()


def test_null_blob_or_tokens_are_not_intact(checkpointed):
    # The columns are NOT NULL, so only a damaged file can hold NULL there.
    db, (first, _second), profile = checkpointed
    stored = _stored(db, first, profile)
    assert not dataclasses.replace(stored, data=None).is_intact()
    assert not dataclasses.replace(stored, node_tokens=None).is_intact()
    assert not dataclasses.replace(stored, checksum=None).is_intact()


def test_siblings_swapped_with_their_checksums_are_detected(checkpointed):
    db, (first, second), profile = checkpointed
    with contextlib.closing(sqlite3.connect(db.path)) as con:
        rows = {
            node: con.execute(
                "SELECT c.id, c.checksum, b.data FROM checkpoint c JOIN "
                "checkpoint_blob b ON b.checkpoint_id = c.id WHERE c.node_id = ?",
                (node,),
            ).fetchone()
            for node in (first, second)
        }
        for node, other in ((first, second), (second, first)):
            checkpoint_id = rows[node][0]
            _id, checksum, data = rows[other]
            con.execute(
                "UPDATE checkpoint SET checksum = ? WHERE id = ?",
                (checksum, checkpoint_id),
            )
            con.execute(
                "UPDATE checkpoint_blob SET data = ? WHERE checkpoint_id = ?",
                (data, checkpoint_id),
            )
        con.commit()
    assert not _stored(db, first, profile).is_intact()
    assert not _stored(db, second, profile).is_intact()


def test_checkpoint_of_a_node_whose_tokens_changed_is_not_intact(checkpointed):
    db, (first, _second), profile = checkpointed
    node_rows.update_node(db, first, tokens=[3, 9])
    assert not _stored(db, first, profile).is_intact()


# --- version 2 databases are upgraded ---------------------------------------------


def _make_version_2(path: Path) -> dict[str, list]:
    """Build a version-2 file: no AUTOINCREMENT, CRC-32 checksums."""
    dialect = sqlite_dialect.dialect()
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute("PRAGMA auto_vacuum=INCREMENTAL")
        con.execute("PRAGMA journal_mode=WAL")
        for table in Base.metadata.sorted_tables:
            ddl = str(CreateTable(table).compile(dialect=dialect))
            con.execute(ddl.replace(" AUTOINCREMENT", ""))
            for index in table.indexes:
                con.execute(str(CreateIndex(index).compile(dialect=dialect)))
        now = "2024-01-01 00:00:00.000000"
        con.execute(
            "INSERT INTO conversation (id, title, active_node_id, created_at, "
            "updated_at) VALUES (1, 'old', 4, ?, ?)",
            (now, now),
        )
        for node_id, parent in ((1, None), (2, 1), (3, 2), (4, 3)):
            con.execute(
                "INSERT INTO node (id, conversation_id, parent_id, role, text, "
                "tokens, n_tokens, start_pos, chunks, status, created_at) "
                "VALUES (?, 1, ?, 'user', ?, ?, 2, 0, '[]', 'complete', ?)",
                (node_id, parent, f"m{node_id}", bytes(8), now),
            )
        con.execute(
            "INSERT INTO backend_profile (id, fingerprint, details, created_at) "
            "VALUES (1, 'fp', '{}', ?)",
            (now,),
        )
        for node_id in (2, 3, 4):
            data = bytes([node_id]) * 50
            con.execute(
                "INSERT INTO checkpoint (id, node_id, profile_id, kind, start_pos, "
                "end_pos, byte_size, checksum, created_at, last_used_at) "
                "VALUES (?, ?, 1, 'delta', 0, 2, 50, ?, ?, ?)",
                (node_id, node_id, f"crc32:{zlib.crc32(data):08x}", now, now),
            )
            con.execute("INSERT INTO checkpoint_blob VALUES (?, ?)", (node_id, data))
        # One damaged checkpoint: the migration drops it.
        con.execute("UPDATE checkpoint_blob SET data = x'00' WHERE checkpoint_id = 2")
        con.execute("PRAGMA user_version = 2")
        con.commit()
        return {
            table: con.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
            for table in ("conversation", "node", "backend_profile")
        }


def _with_counts(
    con: sqlite3.Connection, rows: list[tuple], values: dict[str, int]
) -> list[tuple]:
    """Conversation ``rows`` with the columns named in ``values`` set so."""
    columns = [row[1] for row in con.execute("PRAGMA table_info(conversation)")]
    return [
        tuple(values.get(name, value) for name, value in zip(columns, row, strict=True))
        for row in rows
    ]


def test_schema_2_database_is_upgraded_keeping_rows_and_ids(tmp_path: Path):
    path = tmp_path / "old.sqlite3"
    before = _make_version_2(path)
    with contextlib.closing(sqlite3.connect(path)) as con:
        assert (
            "AUTOINCREMENT"
            not in con.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'node'"
            ).fetchone()[0]
        )
    db = open_database(path)
    try:
        with contextlib.closing(sqlite3.connect(path)) as con:
            assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            assert con.execute("PRAGMA foreign_key_check").fetchall() == []
            assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            for table, rows in before.items():
                if table == "conversation":
                    # Counted by the step to version 7: its 4 nodes and the
                    # two checkpoints kept of 50 bytes each.
                    counted = {"node_count": 4, "checkpoint_bytes": 100}
                    rows = _with_counts(con, rows, counted)
                assert (
                    con.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall() == rows
                )
            checksums = [r[0] for r in con.execute("SELECT checksum FROM checkpoint")]
        node_ids = [row[0] for row in before["node"]]
        profile = checkpoint_rows.ensure_profile(db, "fp", {})
        stored = checkpoint_rows.load_checkpoints(db, node_ids, profile)
        # Two verified checkpoints re-bound; the damaged one dropped.
        assert len(checksums) == 2 and all(c.startswith("xxh3:") for c in checksums)
        assert len(stored) == 2 and all(s.is_intact() for s in stored.values())
        # Cascades still work, and a deleted newest id is not given again.
        node_rows.delete_subtree(db, 4)
        assert checkpoint_rows.checkpointed_nodes(db, node_ids, profile) == {3: 50}
        assert conversation_rows.get_conversation(db, 1).active_node_id == 3
        assert node_rows.add_node(db, 3, "user", "new").id == 5
    finally:
        db.close()
    assert (tmp_path / "old.sqlite3.v2.bak").exists()


# --- a full disk ----------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path):
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or not _mount_tmpfs(mount, "6m"):
        pytest.skip("cannot mount a tmpfs here")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def _fill(folder: Path) -> None:
    # Big writes, then single bytes: not one block is left.
    for name, size in (("filler", 65536), ("filler-tail", 1)):
        fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * size)
        except OSError:
            pass
        finally:
            os.close(fd)
    assert os.statvfs(folder).f_bavail == 0


def _conversations_with_checkpoints(db, count: int = 3) -> list[list[int]]:
    profile = checkpoint_rows.ensure_profile(db, "fp", {})
    chains = []
    for c in range(count):
        ids = _chain(db, 3, title=f"c{c}")
        for node in ids[1:]:
            checkpoint_rows.save_checkpoint(
                db, node, profile, "delta", 0, 2, os.urandom(100_000)
            )
        chains.append(ids)
    return chains


def test_full_disk_with_the_database_open_reads_and_deletes(small_disk: Path):
    db = open_database(small_disk / "arbor.sqlite3")
    try:
        chains = _conversations_with_checkpoints(db)
        # An earlier deletion checkpointed the -wal, whose space is reused.
        checkpoint_rows.delete_checkpoints(db, node_ids=[chains[0][1]])
        _fill(small_disk)
        assert len(conversation_rows.list_conversations(db)) == 3
        assert len(node_rows.get_path(db, chains[0][-1])) == 4
        with pytest.raises(StorageUnavailable, match=r"disk holding .* is full"):
            node_rows.add_node(db, chains[0][-1], "user", "x" * 3_000_000)
        assert checkpoint_rows.delete_checkpoints(db, node_ids=[chains[1][1]]) > 0
        node_rows.delete_subtree(db, chains[1][2])
        conversation_rows.delete_conversation(
            db, node_rows.get_node(db, chains[2][0]).conversation_id
        )
        assert [c.title for c in conversation_rows.list_conversations(db)] == [
            "c1",
            "c0",
        ]
        # The deletions gave their pages back to the file system.
        assert os.statvfs(small_disk).f_bavail > 0
    finally:
        db.close()


def test_full_disk_reopened_spends_the_reserve_to_delete(small_disk: Path):
    path = small_disk / "arbor.sqlite3"
    db = open_database(path)
    chains = _conversations_with_checkpoints(db)
    db.close()
    assert reserve.reserve_path(path).stat().st_size == reserve.RESERVE_BYTES
    _fill(small_disk)
    db = open_database(path)
    try:
        # The reserve made room for SQLite's -wal and -shm: writable again.
        assert not db.read_only and db.space_low
        assert not reserve.reserve_path(path).exists()
        assert len(conversation_rows.list_conversations(db)) == 3
        # The room is for deleting: a new message would only fill it again.
        with pytest.raises(StorageUnavailable, match="is full"):
            node_rows.add_node(db, chains[0][-1], "user", "more")
        conversation_rows.delete_conversation(
            db, node_rows.get_node(db, chains[2][0]).conversation_id
        )
        assert checkpoint_rows.delete_checkpoints(db, conversation_id=None) > 0
        # Deleting freed the space, and the reserve is back for next time.
        assert os.statvfs(small_disk).f_bavail > 0
        (small_disk / "filler").unlink()  # and the user frees some more
        node_rows.add_node(db, chains[0][-1], "user", "more")
        assert not db.space_low and reserve.reserve_path(path).exists()
    finally:
        db.close()


def test_full_disk_without_a_reserve_reads_read_only(small_disk: Path):
    path = small_disk / "arbor.sqlite3"
    db = open_database(path)
    chains = _conversations_with_checkpoints(db)
    db.close()
    reserve.give_up(path)
    _fill(small_disk)
    db = open_database(path)
    try:
        assert db.read_only and "disk holding it is full" in (db.read_only_reason or "")
        assert len(conversation_rows.list_conversations(db)) == 3
        assert len(node_rows.get_path(db, chains[0][-1])) == 4
        with pytest.raises(StorageUnavailable, match="disk holding it is full"):
            node_rows.delete_subtree(db, chains[0][2])
    finally:
        db.close()
