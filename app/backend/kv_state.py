"""Consecutive KV deltas combined into one sequence state, for one set call.

llama.cpp (0.3.36, ``llama-context.cpp`` and ``llama-kv-cache.cpp``,
``state_write``) serializes the cells of one sequence of a unified cache as::

    u32 magic, i32 seq_id, u32 n_stream (1), u32 cell_count
    cell_count x (i32 pos, u32 n_seq_id (1), i32 seq_id)    the cells' metadata
    u32 v_trans, u32 n_layer
    n_layer x (i32 type, u64 row bytes, cell_count rows)    K, one row per cell
    then V: laid out as K when v_trans is 0 (flash attention on), else
    n_layer x (i32 type, u32 element bytes, u32 n_embd_v,
               n_embd_v rows of cell_count elements)        V stored transposed

Deltas of consecutive positions therefore combine into the state of all
their cells: the metadata one after the other, then per layer the K rows of
each delta, then the V rows the same way (for a transposed V, per layer and
per V row, each delta's elements). Applying the combined state puts every
cell in the cache cell that applying the deltas one by one would (each set
call takes the next free cells, and one call takes as many contiguous ones),
so the logits that follow are bit-identical (``tests/backend/test_restore_path.py``).
It saves llama.cpp's cost per call: with V transposed, n_layer x n_embd_v
small copies per delta (30 x 192 for SmolLM2-135M).

Only that exact shape is combined: a delta whose bytes say anything else
(cells with extra fields, several streams, another layer layout, positions
other than its span's) is refused by ``DeltaLayout.parse``, and the caller
applies it on its own, as llama.cpp then checks it itself.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

import numpy as np

# The bytes before the cells' metadata: magic, seq_id, n_stream, cell_count.
_HEADER = struct.Struct("<IiII")
_CELL_BYTES = 12  # i32 pos, u32 n_seq_id, i32 seq_id
_DATA_HEADER = struct.Struct("<II")  # v_trans, n_layer
_ROWS_HEADER = struct.Struct("<iQ")  # type, row bytes
_TRANSPOSED_HEADER = struct.Struct("<iII")  # type, element bytes, n_embd_v


@dataclass(frozen=True)
class DeltaLayout:
    """Where the parts of one serialized delta lie, and the shape they share.

    ``shape`` is everything two deltas must agree on to be combined: the
    magic, V transposition, and per layer the K and V headers (types, row or
    element sizes). Per cell, a delta holds ``meta`` bytes of metadata and,
    per layer, ``k_rows[l]`` bytes of K and ``v_rows[l]`` bytes of V (for a
    transposed V: ``n_embd_v[l]`` elements of ``v_rows[l] // n_embd_v[l]``
    bytes).
    """

    cells: int
    magic: int
    v_trans: bool
    k_headers: tuple[bytes, ...]
    k_rows: tuple[int, ...]
    v_headers: tuple[bytes, ...]
    v_rows: tuple[int, ...]
    n_embd_v: tuple[int, ...]  # per layer, for a transposed V (else 1)

    @property
    def shape(self) -> tuple[object, ...]:
        """What must be equal for two deltas to combine."""
        return (self.magic, self.v_trans, self.k_headers, self.v_headers)

    @property
    def n_layer(self) -> int:
        """Layers with K rows."""
        return len(self.k_rows)

    @functools.cached_property
    def cell_bytes(self) -> int:
        """Bytes per cell: its metadata and its K and V in every layer."""
        return _CELL_BYTES + sum(self.k_rows) + sum(self.v_rows)

    @functools.cached_property
    def _fixed_bytes(self) -> int:
        return (
            _HEADER.size
            + _DATA_HEADER.size
            + sum(len(h) for h in self.k_headers + self.v_headers)
        )

    def size(self, cells: int) -> int:
        """Bytes of a state of this shape holding ``cells`` cells."""
        return self._fixed_bytes + cells * self.cell_bytes

    @staticmethod
    def parse(data: memoryview, start: int, end: int) -> DeltaLayout | None:
        """The layout of a delta of positions ``[start, end)``, or None.

        None for anything but the plain shape described in the module's
        docstring, exactly filled, with one cell per position in order.
        """
        cells = end - start
        try:
            magic, _seq, n_stream, count = _HEADER.unpack_from(data, 0)
            if n_stream != 1 or count != cells or cells <= 0:
                return None
            meta = np.frombuffer(data, np.int32, cells * 3, _HEADER.size)
            meta = meta.reshape(cells, 3)
            if not (
                np.array_equal(meta[:, 0], np.arange(start, end, dtype=np.int32))
                and bool((meta[:, 1] == 1).all())
            ):
                return None
            offset = _HEADER.size + cells * _CELL_BYTES
            v_trans, n_layer = _DATA_HEADER.unpack_from(data, offset)
            offset += _DATA_HEADER.size
            if v_trans not in (0, 1) or n_layer == 0:
                return None
            k_headers, k_rows, _w, offset = _layers(data, offset, n_layer, cells)
            v_headers, v_rows, n_embd_v, offset = _layers(
                data, offset, n_layer, cells, transposed=bool(v_trans)
            )
        except (struct.error, ValueError):
            return None
        if offset != len(data):
            return None
        return DeltaLayout(
            cells, magic, bool(v_trans), k_headers, k_rows, v_headers, v_rows, n_embd_v
        )


def _layers(
    data: memoryview, offset: int, n_layer: int, cells: int, transposed: bool = False
) -> tuple[tuple[bytes, ...], tuple[int, ...], tuple[int, ...], int]:
    """Each layer's header, bytes per cell and V rows (1 unless ``transposed``),
    and the offset past the section."""
    header_struct = _TRANSPOSED_HEADER if transposed else _ROWS_HEADER
    size = header_struct.size
    first = bytes(data[offset : offset + size])
    row, width = _row_bytes(header_struct.unpack(first), transposed)
    stride = size + cells * row
    end = offset + n_layer * stride
    if end <= len(data):
        # Layers alike, as in most models: every header equals the first.
        headers = _view(data, offset, (n_layer, size), (stride, 1))
        if bool((headers == headers[0]).all()):
            return (first,) * n_layer, (row,) * n_layer, (width,) * n_layer, end
    found: list[tuple[bytes, int, int]] = []
    for _ in range(n_layer):
        header = bytes(data[offset : offset + size])
        row, width = _row_bytes(header_struct.unpack(header), transposed)
        found.append((header, row, width))
        offset += size + cells * row
    if offset > len(data):
        raise ValueError("truncated")
    headers_, rows, widths = zip(*found, strict=True)
    return tuple(headers_), tuple(rows), tuple(widths), offset


def _row_bytes(fields: tuple[int, ...], transposed: bool) -> tuple[int, int]:
    """Bytes per cell of a layer, and its V rows, from its header's fields."""
    if transposed:
        _type, element, n_embd_v = fields
        return element * n_embd_v, n_embd_v
    _type, row = fields
    return row, 1


class CombinedState:
    """Builds the state of consecutive deltas in a buffer reused from call to call.

    ``begin(layout, cells)`` lays out a state of ``cells`` cells shaped like
    ``layout``; ``add`` copies each delta's parts to where they go;
    ``state()`` returns the bytes to hand to llama.cpp, cut down to the cells
    added so far if fewer came than announced.
    """

    def __init__(self) -> None:
        self._buffer = np.zeros(0, np.uint8)
        self._layout: DeltaLayout | None = None
        self._cells = 0  # announced
        self._filled = 0  # added so far

    @property
    def filled(self) -> int:
        """Cells added so far."""
        return self._filled

    def accepts(self, layout: DeltaLayout) -> bool:
        """Whether a delta of ``layout`` can be added now."""
        return (
            self._layout is not None
            and layout.shape == self._layout.shape
            and self._filled + layout.cells <= self._cells
        )

    def begin(self, layout: DeltaLayout, cells: int) -> None:
        """Start a state of ``cells`` cells shaped like ``layout``."""
        size = layout.size(cells)
        if self._buffer.size < size:
            # A bytearray, not np.empty: numpy asks the kernel for huge pages
            # for large arrays, and where it defragments memory for them at
            # the first touch, that touch took 250 ms here instead of 25.
            self._buffer = np.frombuffer(bytearray(size), np.uint8)
        self._layout, self._cells, self._filled = layout, cells, 0
        self._write_headers(cells)

    def add(self, data: memoryview, layout: DeltaLayout) -> None:
        """Copy one delta (``accepts(layout)`` must be True) into its place."""
        assert self._layout is not None and self.accepts(layout)
        src = np.frombuffer(data, np.uint8)
        _copy_cells(src, layout.cells, self._buffer, self._cells, self._filled, layout)
        self._filled += layout.cells

    def state(self) -> memoryview:
        """The combined state of the cells added (none added: empty)."""
        layout = self._layout
        if layout is None or not self._filled:
            return memoryview(b"")
        if self._filled < self._cells:
            # Fewer came than announced (a later delta was refused): lay the
            # ones added out again for their own count. Rare, so a copy.
            old = self._buffer[: layout.size(self._cells)].copy()
            announced, self._cells = self._cells, self._filled
            self._write_headers(self._cells)
            _copy_cells(old, announced, self._buffer, self._cells, 0, layout)
        return self._buffer.data[: layout.size(self._cells)]

    def clear(self) -> None:
        """Forget the state (the buffer is kept for the next one)."""
        self._layout, self._cells, self._filled = None, 0, 0

    def _write_headers(self, cells: int) -> None:
        layout = self._layout
        assert layout is not None
        out = self._buffer.data  # a writable memoryview of it
        _HEADER.pack_into(out, 0, layout.magic, 0, 1, cells)
        offset = _HEADER.size + cells * _CELL_BYTES
        _DATA_HEADER.pack_into(out, offset, int(layout.v_trans), layout.n_layer)
        offset += _DATA_HEADER.size
        for headers, rows in (
            (layout.k_headers, layout.k_rows),
            (layout.v_headers, layout.v_rows),
        ):
            for header, row in zip(headers, rows, strict=True):
                out[offset : offset + len(header)] = header
                offset += len(header) + cells * row


def _copy_cells(
    src: np.ndarray,
    src_cells: int,
    out: np.ndarray,
    out_cells: int,
    at: int,
    layout: DeltaLayout,
) -> None:
    """Copy the cells of state ``src`` (``src_cells`` cells; all of them when it
    is a delta, as many as ``out`` lacks when it is a cut-down state) into
    state ``out`` of ``out_cells`` cells, from cell ``at`` on."""
    n = min(src_cells, out_cells - at)
    start = _HEADER.size
    out[start + at * _CELL_BYTES : start + (at + n) * _CELL_BYTES] = src[
        start : start + n * _CELL_BYTES
    ]
    s = start + src_cells * _CELL_BYTES + _DATA_HEADER.size
    d = start + out_cells * _CELL_BYTES + _DATA_HEADER.size
    sections = (
        (layout.k_headers, layout.k_rows, (1,) * layout.n_layer),
        (layout.v_headers, layout.v_rows, layout.n_embd_v),
    )
    for headers, rows, widths in sections:
        # A row of K (or of a V not transposed) is one cell; a transposed V
        # holds ``width`` rows with one element of each cell. Seen as arrays
        # of (layer, row, cells' bytes), one copy moves a whole section.
        # Layers of different sizes (rare) are moved one by one.
        shapes = {(len(h), r, w) for h, r, w in zip(headers, rows, widths, strict=True)}
        uniform = len(shapes) == 1
        groups = [(len(rows), 0)] if uniform else [(1, i) for i in range(len(rows))]
        for count, first in groups:
            header, row, width = len(headers[first]), rows[first], widths[first]
            element = row // width
            shape = (count, width, n * element)
            source = _view(
                src,
                s + header,
                shape,
                (header + src_cells * row, src_cells * element, 1),
            )
            target = _view(
                out,
                d + header + at * element,
                shape,
                (header + out_cells * row, out_cells * element, 1),
            )
            target[...] = source
            s += count * (header + src_cells * row)
            d += count * (header + out_cells * row)


def _view(
    buffer: memoryview | np.ndarray,
    offset: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
) -> np.ndarray:
    """A strided byte view of ``buffer`` from ``offset``; writable if it is.

    numpy checks that the view stays inside the buffer (``as_strided`` does
    not), and builds it several times faster: a sibling switch makes a few
    dozen of them.
    """
    return np.ndarray(shape, np.uint8, buffer=buffer, offset=offset, strides=strides)
