"""The figures a benchmark run produces, one frozen dataclass per table row.

Times are medians over the run's repeats, in milliseconds; sizes are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ColdResumeRow:
    """Restoring a node in a freshly loaded engine vs. decoding its path again."""

    target_tokens: int
    path_tokens: int
    nodes: int
    bytes_read: int
    restore_ms: float  # wall time of ConversationService.restore
    sync_ms: float  # of which: read from SQLite, verify, apply (SyncStats.restore_ms)
    backend_ms: float  # of which: inside llama.cpp
    reprocess_ms: float  # decoding the path's tokens in n_batch batches
    speedup: float  # reprocess_ms / restore_ms
    best_restore_ms: float  # fastest of the repeats: the least disturbed by noise
    best_reprocess_ms: float
    best_speedup: float  # best_reprocess_ms / best_restore_ms
    load_ms: float  # loading the model, which both arms pay first


@dataclass(frozen=True)
class SiblingSwitchRow:
    """Switching between two siblings that share a prefix."""

    prefix_tokens: int
    suffix_tokens: int
    suffix_nodes: int
    switch_ms: float  # wall time of ConversationService.restore, prefix kept
    sync_ms: float  # of which: read from SQLite, verify, apply (SyncStats.restore_ms)
    backend_ms: float  # of which: inside llama.cpp
    bytes_read: int
    suffix_checkpoint_bytes: int  # what the divergent nodes' checkpoints hold
    excess_bytes: int  # most read beyond the target's suffix in any switch
    full_restore_ms: float  # the same node restored with nothing kept in memory
    suffix_reprocess_ms: float  # decoding only the suffix (a prefix-caching app)
    full_reprocess_ms: float  # decoding the whole path (prefix row + suffix)
    vs_full_restore: float
    vs_suffix_reprocess: float
    vs_full_reprocess: float


@dataclass(frozen=True)
class MoveBreakdownRow:
    """The database steps of one move (switch or cold resume), each timed alone."""

    move: str
    kept_tokens: int
    moved_tokens: int
    moved_nodes: int
    get_path_ms: float  # the recursive path query (plus token unpacking)
    per_node_read_ms: float  # the earlier way: one transaction per checkpoint
    batched_read_ms: float  # one read-only query for the move (as shipped)
    verify_ms: float  # checksums of the blobs read
    set_active_ms: float  # remembering the active node (a write transaction)


@dataclass(frozen=True)
class StorageRow:
    """Checkpoint bytes of one conversation shape."""

    shape: str
    nodes: int
    tokens: int  # tokens stored in the tree (each span once)
    checkpoint_bytes: int
    bytes_per_token: float
    kv_bytes_per_token: int  # n_layer x (K + V) x element size
    overhead_pct: float  # bytes_per_token over kv_bytes_per_token
    full_snapshot_bytes: int  # one whole-context snapshot per node instead
    full_over_delta: float


@dataclass(frozen=True)
class CompressionRow:
    """One codec applied to the linear chat's checkpoint blobs."""

    codec: str
    saving_pct: float
    compress_ms_per_mib: float
    decompress_ms_per_mib: float
    reference_restore_ms: float  # cold restore of the reference path, uncompressed
    added_restore_ms: float  # decompressing that path's blobs
    keep: bool


@dataclass(frozen=True)
class OverheadRow:
    """Replies generated with one checkpoint mode, on the same prompts."""

    mode: str
    generated_tokens: int
    generate_tps: float  # tokens/s of the sampling loop alone
    reply_tps: float  # generated tokens / wall time of the whole send()
    reply_ms: float
    checkpoint_ms: float  # capture + write on the generating thread, per reply
    checkpoint_share_pct: float  # checkpoint_ms / reply_ms
    throughput_cost_pct: float  # reply_tps lost against mode "off"


@dataclass(frozen=True)
class NodeWriteRow:
    """Checkpointing one node, by span size."""

    size: str
    samples: int
    tokens: int
    bytes: int
    capture_ms: float
    write_ms: float


@dataclass(frozen=True)
class TargetRow:
    """One target of the issue, with what was measured."""

    name: str
    target: str
    measured: str
    met: bool


@dataclass
class Report:
    """Everything one ``arbor bench`` run measured."""

    machine: dict[str, object]
    model: dict[str, object]
    config: dict[str, object]
    cold_resume: list[ColdResumeRow] = field(default_factory=list)
    sibling_switch: list[SiblingSwitchRow] = field(default_factory=list)
    move_breakdown: list[MoveBreakdownRow] = field(default_factory=list)
    storage: list[StorageRow] = field(default_factory=list)
    sqlite: dict[str, int] = field(default_factory=dict)
    compression: list[CompressionRow] = field(default_factory=list)
    overhead: list[OverheadRow] = field(default_factory=list)
    node_writes: list[NodeWriteRow] = field(default_factory=list)
    targets: list[TargetRow] = field(default_factory=list)
    elapsed_s: float = 0.0
