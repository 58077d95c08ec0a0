"""Each conversation's node count and checkpoint bytes, kept by triggers.

The conversation list shows both figures for every conversation. Counting
the nodes and summing the checkpoints at each listing made ``arbor list``
and the window's list grow with everything in the file (0.8 ms for 100
nodes, 11.7 ms for 10,000); read from two columns of ``conversation`` it
costs what the conversations do. Triggers keep the columns right for every
write, whichever code path makes it (the ORM, raw SQL, an import, a foreign
key's cascade), as the search index's triggers keep it.

One ordering matters. A checkpoint finds its conversation through its node,
and a checkpoint removed by the cascade of its node's deletion no longer
finds it (SQLite deletes the node first). So a node being deleted removes
its own checkpoints first, while it still exists; the cascade then finds
none. Nodes never move to another conversation, so no trigger follows that.

A step that rebuilds the node or checkpoint table drops these triggers
with the old table: it must call ``create_counters`` again.
"""

from __future__ import annotations

import sqlite3

_TRIGGERS = {
    "node_counted": "AFTER INSERT ON node BEGIN "
    "UPDATE conversation SET node_count = node_count + 1 "
    "WHERE id = new.conversation_id; END",
    "node_uncounted": "BEFORE DELETE ON node BEGIN "
    "DELETE FROM checkpoint WHERE node_id = old.id; "
    "UPDATE conversation SET node_count = node_count - 1 "
    "WHERE id = old.conversation_id; END",
    "checkpoint_counted": "AFTER INSERT ON checkpoint BEGIN "
    "UPDATE conversation SET checkpoint_bytes = checkpoint_bytes + new.byte_size "
    "WHERE id = (SELECT conversation_id FROM node WHERE id = new.node_id); END",
    "checkpoint_uncounted": "AFTER DELETE ON checkpoint BEGIN "
    "UPDATE conversation SET checkpoint_bytes = checkpoint_bytes - old.byte_size "
    "WHERE id = (SELECT conversation_id FROM node WHERE id = old.node_id); END",
    "checkpoint_recounted": "AFTER UPDATE OF byte_size, node_id ON checkpoint BEGIN "
    "UPDATE conversation SET checkpoint_bytes = checkpoint_bytes - old.byte_size "
    "WHERE id = (SELECT conversation_id FROM node WHERE id = old.node_id); "
    "UPDATE conversation SET checkpoint_bytes = checkpoint_bytes + new.byte_size "
    "WHERE id = (SELECT conversation_id FROM node WHERE id = new.node_id); END",
}

# The figures from the rows themselves: what the triggers keep them equal to.
_RECOUNT = """
UPDATE conversation SET
  node_count = (SELECT count(*) FROM node WHERE node.conversation_id = conversation.id),
  checkpoint_bytes = (SELECT coalesce(sum(checkpoint.byte_size), 0)
                      FROM checkpoint JOIN node ON node.id = checkpoint.node_id
                      WHERE node.conversation_id = conversation.id)
"""


def create_counters(raw: sqlite3.Connection) -> None:
    """(Re)create the counting triggers and count what is there now.

    Runs inside the caller's transaction; the columns must exist.
    """
    drop_counters(raw)
    for name, body in _TRIGGERS.items():
        raw.execute(f"CREATE TRIGGER {name} {body}")
    raw.execute(_RECOUNT)


def drop_counters(raw: sqlite3.Connection) -> None:
    """Drop the counting triggers, if there: a step that rebuilds the
    conversation table cannot drop it while they refer to it."""
    for name in _TRIGGERS:
        raw.execute(f"DROP TRIGGER IF EXISTS {name}")
