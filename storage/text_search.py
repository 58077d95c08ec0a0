"""Searching every message's text: the full-text index where SQLite has
FTS5, a scan where it has not, with highlighted snippets."""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import (
    DateTime,
    or_,
    select,
    text,
)
from sqlalchemy.orm import Session

from storage.db import Database
from storage.migrations import SEARCH_TABLE
from storage.tables import (
    Conversation,
    Node,
)
from storage.values import Role

# Snippets mark each matched word with these two characters (STX, ETX), which
# no message contains: a view escapes the text, then turns them into markup.
MATCH_START = "\x02"

MATCH_END = "\x03"

SEARCH_LIMIT = 50

# Terms after the first few add nothing a person would notice, and bound the
# work a pasted paragraph can cause.
_MAX_TERMS = 16

_MAX_TERM_CHARS = 64

# The shortest last term that is also searched as a prefix (see fts_query).
_MIN_PREFIX = 2

# Words in a snippet of an indexed search, and how many come before the first
# match; characters either side of the first match in a scanned one.
_SNIPPET_WORDS = 24

_SNIPPET_WORDS_BEFORE = 4

_SNIPPET_CHARS = 60

# The answer counts more than the reasoning when ranking (bm25 column weights).
_BM25 = f"bm25({SEARCH_TABLE}, 1.0, 0.5)"


@dataclass(frozen=True)
class SearchHit:
    """A message that matches a search.

    ``snippet`` is a short excerpt with each match between ``MATCH_START`` and
    ``MATCH_END``; ``rank`` orders hits, lower first (bm25; 0 when the
    database has no search index and the messages were scanned).
    """

    conversation_id: int
    conversation_title: str
    node_id: int
    role: Role
    snippet: str
    rank: float
    created_at: datetime


def search_terms(query: str) -> list[str]:
    """The words of a search as typed: split on spaces, punctuation-only dropped.

    Nothing the user types is FTS5 syntax: each term is later quoted as a
    literal, so ``"``, ``AND``, ``*`` or ``(`` are only characters.
    """
    terms = [
        term[:_MAX_TERM_CHARS]
        for term in query.split()
        if any(ch.isalnum() for ch in term)
    ]
    return terms[:_MAX_TERMS]


def fts_query(terms: Sequence[str]) -> str:
    """An FTS5 query matching every term, the last one also as a prefix.

    Each term becomes a quoted string (quotes doubled), which FTS5 reads as a
    phrase of the words the tokenizer finds in it, never as an operator.
    The prefix lets results follow the typing: "hel" finds "hello". A
    single character is not a prefix (it would match nearly every message).
    """
    quoted = ['"' + term.replace('"', '""') + '"' for term in terms]
    if quoted and len(terms[-1]) >= _MIN_PREFIX:
        quoted[-1] += "*"
    return " ".join(quoted)


def search(db: Database, query: str, limit: int = SEARCH_LIMIT) -> list[SearchHit]:
    """Messages of every conversation containing every word of ``query``.

    Best matches first (bm25), at most ``limit``. Words match whole words,
    the last one also as a prefix; case and accents are ignored. Any text is
    a valid query: one without a letter or digit finds nothing. A database
    without the search index (a read-only older file, an SQLite without
    FTS5) is scanned instead: same hits for plain words, newest first.
    """
    terms = search_terms(query)
    if not terms or limit <= 0:
        return []
    with db.read() as s:
        if _has_search_index(s):
            return _search_index(s, terms, limit)
        return _scan_messages(s, terms, limit)


def _has_search_index(session: Session) -> bool:
    found = session.execute(
        text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name"),
        {"name": SEARCH_TABLE},
    ).first()
    return found is not None


def _search_index(session: Session, terms: list[str], limit: int) -> list[SearchHit]:
    # Ranking needs a score for every match, but a snippet only for the few
    # shown. FTS5's snippet() would be computed for every match before the
    # LIMIT (130 ms for a word in all of 5,000 messages), and asked per row
    # it runs the whole query again per row; so the index only ranks, and
    # the snippets are cut here from the texts of the rows shown.
    statement = text(
        "WITH top(id, score) AS MATERIALIZED ("
        f"SELECT rowid, {_BM25} FROM {SEARCH_TABLE} WHERE {SEARCH_TABLE} MATCH :query "
        "ORDER BY 2, rowid DESC LIMIT :limit) "
        "SELECT n.id, n.conversation_id, c.title, n.role, n.text, n.thinking, "
        "top.score AS score, n.created_at "
        "FROM top JOIN node n ON n.id = top.id "
        "JOIN conversation c ON c.id = n.conversation_id "
        "ORDER BY top.score, top.id DESC"
    ).columns(created_at=DateTime())
    rows = session.execute(statement, {"query": fts_query(terms), "limit": limit})
    words = _MatchWords(terms)
    return [
        SearchHit(
            r.conversation_id,
            r.title,
            r.id,
            Role(r.role),
            words.snippet(r.text, r.thinking),
            r.score,
            r.created_at,
        )
        for r in rows
    ]


# Letters and digits: where FTS5's unicode61 tokenizer splits words.
_WORD = re.compile(r"[^\W_]+")


def _fold(word: str) -> str:
    # What unicode61 with remove_diacritics compares: no case, no accents.
    if word.isascii():
        return word.lower()
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


class _MatchWords:
    """The words of a search as the index matched them, to mark them in text."""

    def __init__(self, terms: list[str]) -> None:
        self._whole: set[str] = set()
        prefixes: list[str] = []
        for i, term in enumerate(terms):
            words = [_fold(word) for word in _WORD.findall(term)]
            # fts_query makes the last word of the last term a prefix.
            if i == len(terms) - 1 and len(term) >= _MIN_PREFIX and words:
                prefixes.append(words.pop())
            self._whole.update(words)
        self._prefixes = tuple(prefixes)

    def matches(self, word: str) -> bool:
        """Whether ``word`` of a message is one the search matched."""
        folded = _fold(word)
        return folded in self._whole or folded.startswith(self._prefixes)

    def snippet(self, *bodies: str) -> str:
        """A few words of the first of ``bodies`` with a match, marked.

        The excerpt starts a few words before the first match. Only the
        words up to the end of the excerpt are looked at: texts can be long.
        """
        for body in bodies:
            excerpt = self._excerpt(body)
            if excerpt is not None:
                return excerpt
        return bodies[0][: 2 * _SNIPPET_CHARS] if bodies else ""

    def _excerpt(self, body: str) -> str | None:
        before: list[tuple[int, int]] = []  # the words just before the match
        words = _WORD.finditer(body)
        for found in words:
            if self.matches(found.group()):
                first = found.span()
                break
            before = [*before[-(_SNIPPET_WORDS_BEFORE - 1) :], found.span()]
        else:
            return None
        spans = [*before, first]
        rest = itertools.islice(words, _SNIPPET_WORDS - len(spans))
        spans += [m.span() for m in rest]
        more = next(words, None) is not None
        pieces: list[str] = []
        at = spans[0][0]
        for a, b in spans:
            if (a, b) == first or ((a, b) > first and self.matches(body[a:b])):
                pieces += [body[at:a], MATCH_START, body[a:b], MATCH_END]
                at = b
        # The excerpt ends with its last word, or with the text's own ending
        # (the full stop after the last word).
        pieces.append(body[at:] if not more else body[at : spans[-1][1]])
        earlier = _WORD.search(body, 0, spans[0][0]) is not None
        return ("…" if earlier else "") + "".join(pieces) + ("…" if more else "")


def _scan_messages(session: Session, terms: list[str], limit: int) -> list[SearchHit]:
    # Substring matching: looser than the index's whole words, which is the
    # side to err on. LIKE ignores case for ASCII letters only.
    query = (
        select(Node.id, Node.conversation_id, Conversation.title, Node.role)
        .add_columns(Node.text, Node.thinking, Node.created_at)
        .join(Conversation, Conversation.id == Node.conversation_id)
        .order_by(Node.id.desc())
        .limit(limit)
    )
    for term in terms:
        pattern = "%" + _escape_like(term) + "%"
        query = query.where(
            or_(
                Node.text.like(pattern, escape="\\"),
                Node.thinking.like(pattern, escape="\\"),
            )
        )
    return [
        SearchHit(
            r.conversation_id,
            r.title,
            r.id,
            Role(r.role),
            _scanned_snippet(r.text if _contains(r.text, terms) else r.thinking, terms),
            0.0,
            r.created_at,
        )
        for r in session.execute(query)
    ]


def _escape_like(term: str) -> str:
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _contains(body: str, terms: list[str]) -> bool:
    lowered = body.lower()
    return any(term.lower() in lowered for term in terms)


def _scanned_snippet(body: str, terms: list[str]) -> str:
    """An excerpt around the first match, every match in it marked."""
    lowered = body.lower()
    needles = [term.lower() for term in terms]
    found = [i for i in (lowered.find(n) for n in needles) if i >= 0]
    first = min(found, default=0)
    start = max(0, first - _SNIPPET_CHARS)
    end = min(len(body), first + 2 * _SNIPPET_CHARS)
    pieces: list[str] = []
    at = start
    while at < end:
        hits = [(lowered.find(n, at, end), n) for n in needles]
        hits = [(i, n) for i, n in hits if i >= 0]
        if not hits:
            break
        i, needle = min(hits, key=lambda hit: (hit[0], -len(hit[1])))
        pieces += [body[at:i], MATCH_START, body[i : i + len(needle)], MATCH_END]
        at = i + len(needle)
    pieces.append(body[at:end])
    return ("…" if start else "") + "".join(pieces) + ("…" if end < len(body) else "")
