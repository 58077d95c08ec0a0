"""ORM tables: conversations, nodes, backend profiles and checkpoints."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from typing import Any

import xxhash
from sqlalchemy import (
    JSON,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from storage.values import Status


def utcnow() -> datetime:
    """Return the current time, timezone-aware in UTC."""
    return datetime.now(UTC)


# The title of a conversation nobody has named yet; its first message names it.
DEFAULT_TITLE = "New conversation"


class Base(DeclarativeBase):
    """Declarative base of every Arbor table."""


class Conversation(Base):
    """A conversation: one tree of nodes under a single root."""

    __tablename__ = "conversation"
    # AUTOINCREMENT: an id is never given again after its row is deleted, so a
    # remembered id (a CLI argument, an open window) never points elsewhere.
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: Mapped[int] = mapped_column(primary_key=True)
    title: Mapped[str] = mapped_column(String(200), default=DEFAULT_TITLE)
    system_prompt: Mapped[str | None] = mapped_column(Text)
    # The node the user last worked on: where the window reopens.
    active_node_id: Mapped[int | None] = mapped_column(Integer)
    # The reasoning choice for replies ("on", "off", "low", ...), None for the
    # model template's own default.
    reasoning: Mapped[str | None] = mapped_column(String(16))
    # The model the conversation was last continued with: its file, and the
    # file's content identity (a moved file is the same model, a re-quantized
    # one under the same name is not). None before a reply was generated.
    model_path: Mapped[str | None] = mapped_column(Text)
    model_identity: Mapped[str | None] = mapped_column(String(64))
    # The sampling the conversation's replies use (temperature, top_p, ...,
    # and the name of the preset they came from); None: the Settings' own.
    sampling: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Where it was made, when elsewhere than in the window or the CLI (an
    # ``Origin``: "local server"); the list marks such conversations.
    origin: Mapped[str | None] = mapped_column(String(32))
    # The program that made it, where known (an API client's name: its user
    # agent or what it said in a header); None for the window and the CLI.
    client: Mapped[str | None] = mapped_column(String(100))
    # The context size its model is loaded with, in tokens, when the user
    # raised it for this conversation; None: the Settings' own.
    context_size: Mapped[int | None] = mapped_column(Integer)
    # Its nodes (roots included) and the bytes of their checkpoints, what the
    # list shows; kept by the triggers of storage/counters.py, never by Python.
    node_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    checkpoint_bytes: Mapped[int] = mapped_column(
        Integer, default=0, server_default="0"
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class Node(Base):
    """One message of the tree and the exact tokens it appended to the context.

    ``tokens`` is the node's span (template markup + content) as little-endian
    int32 ids; ``start_pos`` is its first position, which is the end of an
    earlier node on its path: usually its parent, or further up when the chat
    template re-rendered earlier turns (the span then holds their new rendering
    too). ``span_text`` is the text the span stands for, as the template
    rendered it (None for nodes made before it was recorded). ``chunks`` records
    the batch sizes the span was decoded in, so reprocessing can replay the same
    batch boundaries and reproduce the same KV bytes. ``vocab_id`` names the
    tokenizer the span belongs to: a span made by another model's tokenizer is
    re-rendered. ``text`` of a reply is its answer; ``thinking`` its reasoning.
    """

    __tablename__ = "node"
    __table_args__ = (
        Index("ix_node_conversation_parent", "conversation_id", "parent_id"),
        # Deleting a node looks up its children by parent alone (the foreign
        # key's check and cascade), which the index above cannot serve.
        Index("ix_node_parent", "parent_id"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversation.id", ondelete="CASCADE")
    )
    parent_id: Mapped[int | None] = mapped_column(
        ForeignKey("node.id", ondelete="CASCADE")
    )
    role: Mapped[str] = mapped_column(String(16))  # root | user | assistant | tool
    text: Mapped[str] = mapped_column(Text, default="")
    thinking: Mapped[str] = mapped_column(Text, default="", server_default="")
    span_text: Mapped[str | None] = mapped_column(Text)
    tokens: Mapped[bytes] = mapped_column(LargeBinary, default=b"")
    n_tokens: Mapped[int] = mapped_column(Integer, default=0)
    start_pos: Mapped[int] = mapped_column(Integer, default=0)
    chunks: Mapped[list[int]] = mapped_column(JSON, default=list)
    vocab_id: Mapped[str | None] = mapped_column(String(64))
    # generating | complete | stopped | interrupted (killed mid-reply)
    status: Mapped[str] = mapped_column(String(16), default=Status.COMPLETE)
    generation: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The node's part in tool use, None where it has none (``ToolUse``): on a
    # start, the tools offered to the model; on a reply, the calls it made;
    # on a tool node, the call it answers.
    tool_use: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class BackendProfile(Base):
    """A backend configuration whose KV state is interchangeable.

    ``fingerprint`` hashes the model file's content identity, n_ctx, KV cache
    types, flash attention and the llama.cpp build; ``details`` keeps them
    readable.
    """

    __tablename__ = "backend_profile"

    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    details: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Checkpoint(Base):
    """Metadata of a node's saved KV state; the bytes live in CheckpointBlob.

    kind ``delta`` holds only the cells of the node's own span;
    kind ``full`` holds the whole sequence state at the end of the node (models
    whose state cannot be split per token).
    """

    __tablename__ = "checkpoint"
    __table_args__ = (
        Index("ix_checkpoint_node_profile", "node_id", "profile_id", unique=True),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    profile_id: Mapped[int] = mapped_column(
        ForeignKey("backend_profile.id", ondelete="CASCADE")
    )
    kind: Mapped[str] = mapped_column(String(8))
    start_pos: Mapped[int] = mapped_column(Integer)
    end_pos: Mapped[int] = mapped_column(Integer)
    byte_size: Mapped[int] = mapped_column(Integer)
    checksum: Mapped[str] = mapped_column(String(64))  # checkpoint_checksum
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class CheckpointBlob(Base):
    """The serialized llama.cpp sequence state of one checkpoint."""

    __tablename__ = "checkpoint_blob"

    checkpoint_id: Mapped[int] = mapped_column(
        ForeignKey("checkpoint.id", ondelete="CASCADE"), primary_key=True
    )
    data: Mapped[bytes] = mapped_column(LargeBinary)


class Setting(Base):
    """A persisted preference: one JSON value per key."""

    __tablename__ = "setting"

    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[Any] = mapped_column(JSON)


CHECKSUM_PREFIX = "xxh3:"


def checkpoint_checksum(
    node_id: int,
    profile: str,
    kind: str,
    start_pos: int,
    end_pos: int,
    node_tokens: bytes | memoryview,
    data: bytes | memoryview,
) -> str:
    """The checksum stored with a checkpoint and verified before every restore.

    It covers what the bytes belong to as well as the bytes: the node id, the
    backend profile's fingerprint, the kind, the span positions and the node's
    stored token ids. Two sibling checkpoints swapped together with their
    checksums therefore fail the check instead of restoring the wrong state.
    It guards against damage, not against an attacker, so a fast hash serves:
    XXH3 takes about 0.05 ms per MiB here, CRC-32 0.25 ms, and a cold resume
    verifies every checkpoint on the path.
    """
    digest = xxhash.xxh3_128()
    # Every variable-length part is preceded by its length, so no two different
    # bindings can produce the same byte stream.
    fields = f"{node_id}\0{kind}\0{start_pos}\0{end_pos}\0{profile}".encode()
    for part in (fields, node_tokens, data):
        digest.update(struct.pack("<Q", len(part)))
        digest.update(part)
    return CHECKSUM_PREFIX + digest.hexdigest()
