"""llama.cpp's reference chat templates and expected renders, read from its sdist.

llama-cpp-python's source distribution vendors llama.cpp, which carries two
things our template tests compare against:

- ``models/templates/*.jinja``: the chat templates of some 70 real models;
- ``tests/test-chat-template.cpp``: a list of templates, each with the text
  llama.cpp must produce for one fixed conversation.

Both are read straight from the tarball (``make test`` downloads it and sets
``ARBOR_LLAMA_SDIST``); nothing is extracted or copied into the repository.
The C++ test list is parsed with a small tokenizer for the subset of C++ it
uses: string literals (escapes, ``u8``/raw prefixes, adjacent literals that
concatenate), the ``U8C(...)`` macro, booleans, and nested brace lists.
"""

from __future__ import annotations

import os
import re
import tarfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

SDIST_ENV = "ARBOR_LLAMA_SDIST"
DEFAULT_SDIST = Path.home() / ".cache/arbor/llama-sdist/llama_cpp_python-0.3.36.tar.gz"
_TEMPLATES_DIR = "vendor/llama.cpp/models/templates/"
_TEST_FILE = "vendor/llama.cpp/tests/test-chat-template.cpp"


@dataclass(frozen=True)
class RefCase:
    """One entry of llama.cpp's ``main_automated_tests`` template list.

    ``conversation`` is the fixed conversation of the test followed by the
    case's ``extra_conversation``, as ``(role, content)`` pairs.
    """

    name: str
    template_str: str
    expected_output: str
    expected_output_jinja: str
    bos_token: str = ""
    eos_token: str = ""
    supported_with_jinja: bool = True
    conversation: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @property
    def expected(self) -> str:
        """What the Jinja path must produce (llama.cpp's own fallback rule)."""
        return self.expected_output_jinja or self.expected_output

    def messages(self) -> list[dict[str, Any]]:
        """Return the conversation as chat-template messages."""
        return [
            {"role": role, "content": content} for role, content in self.conversation
        ]


def sdist_path() -> Path:
    """Locate the sdist tarball, or skip/fail the calling test.

    Without ``ARBOR_LLAMA_SDIST`` a missing tarball skips the test (a plain
    ``pytest`` run before ``make test`` ever ran); when the variable is set,
    the caller promised the file, so its absence is a failure.
    """
    configured = os.environ.get(SDIST_ENV)
    path = Path(configured) if configured else DEFAULT_SDIST
    if path.is_file():
        return path
    if configured:
        pytest.fail(f"{SDIST_ENV}={configured} does not exist")
    pytest.skip(f"llama.cpp sdist not found at {path}; run `make test` to fetch it")


@cache
def _read_members(path: Path) -> tuple[dict[str, str], str]:
    templates: dict[str, str] = {}
    test_source = ""
    with tarfile.open(path) as tar:
        for member in tar:
            if not member.isfile():
                continue
            # Members sit under a versioned top folder; match on what follows it.
            inner = member.name.split("/", 1)[-1]
            is_template = inner.startswith(_TEMPLATES_DIR) and inner.endswith(".jinja")
            if not (is_template or inner == _TEST_FILE):
                continue
            handle = tar.extractfile(member)
            assert handle is not None
            text = handle.read().decode("utf-8")
            if is_template:
                templates[Path(inner).stem] = text
            else:
                test_source = text
    if not templates or not test_source:
        raise AssertionError(f"{path} lacks llama.cpp's template test data")
    return templates, test_source


def reference_templates() -> dict[str, str]:
    """Return name (file stem) → source of every ``models/templates/*.jinja``."""
    return dict(_read_members(sdist_path())[0])


def reference_cases() -> list[RefCase]:
    """Return the template cases of ``test-chat-template.cpp``, in file order."""
    return parse_test_cases(_read_members(sdist_path())[1])


# --- A tokenizer and reader for the C++ initializer lists -------------------

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^(\s]*)\()
  | (?P<string>(?:u8|u|U|L)?"(?:[^"\\\n]|\\.)*")
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<number>\d+)
  | (?P<char>'(?:[^'\\\n]|\\.)*')
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_SIMPLE_ESCAPES = {
    "n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'",
    "a": "\a", "b": "\b", "f": "\f", "v": "\v", "?": "?",
}  # fmt: skip


@dataclass(frozen=True)
class _Str:
    value: bytes


def _unescape(body: str) -> bytes:
    # Escapes produce bytes (\x41) or code points (\u00e9); build UTF-8 bytes
    # and decode once, as a C++ compiler would for a UTF-8 execution charset.
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode("utf-8")
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "x":
            digits = re.match(r"[0-9A-Fa-f]+", body[i + 2 :])
            assert digits, body[i : i + 6]
            out.append(int(digits.group(), 16) & 0xFF)
            i += 2 + len(digits.group())
        elif nxt in "uU":
            width = 4 if nxt == "u" else 8
            out += chr(int(body[i + 2 : i + 2 + width], 16)).encode("utf-8")
            i += 2 + width
        elif nxt in "01234567":
            digits = re.match(r"[0-7]{1,3}", body[i + 1 :])
            assert digits
            out.append(int(digits.group(), 8) & 0xFF)
            i += 1 + len(digits.group())
        else:
            out += _SIMPLE_ESCAPES[nxt].encode("utf-8")
            i += 2
    return bytes(out)


def _tokenize(source: str) -> list[Any]:
    tokens: list[Any] = []
    pos = 0
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        if m is None:
            raise ValueError(f"cannot tokenize C++ at {source[pos : pos + 40]!r}")
        kind = m.lastgroup
        if m.group("raw"):
            end = source.index(f'){m.group("delim")}"', m.end())
            tokens.append(_Str(source[m.end() : end].encode("utf-8")))
            pos = end + len(m.group("delim")) + 2
            continue
        pos = m.end()
        if kind == "string":
            literal = m.group()
            tokens.append(_Str(_unescape(literal[literal.index('"') + 1 : -1])))
        elif kind in ("ident", "number", "punct"):
            tokens.append(m.group())
    return tokens


class _Reader:
    """Reads values of the brace-initializer subset the test file uses."""

    def __init__(self, tokens: list[Any]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self) -> Any:
        return self.tokens[self.pos]

    def take(self, expected: str | None = None) -> Any:
        token = self.tokens[self.pos]
        if expected is not None and token != expected:
            raise ValueError(f"expected {expected!r}, got {token!r}")
        self.pos += 1
        return token

    def value(self) -> Any:
        token = self.peek()
        if isinstance(token, _Str):
            # Adjacent literals are one string, as in C++.
            data = b""
            while isinstance(self.peek(), _Str):
                data += self.take().value
            return data.decode("utf-8")
        if token == "U8C":
            self.take()
            self.take("(")
            inner = self.value()
            self.take(")")
            return inner
        if token in ("true", "false"):
            self.take()
            return token == "true"
        if token == "{":
            self.take()
            items = []
            while self.peek() != "}":
                items.append(self.value())
                if self.peek() == ",":
                    self.take()
            self.take("}")
            return items
        raise ValueError(f"unexpected token {token!r}")


def _initializer(tokens: list[Any], declaration: list[str]) -> list[Any]:
    # Find e.g. `std :: vector < TestCase > test_cases {` and read its list.
    n = len(declaration)
    for i in range(len(tokens) - n):
        if tokens[i : i + n] == declaration:
            reader = _Reader(tokens)
            reader.pos = i + n
            value = reader.value()
            if not isinstance(value, list):
                raise ValueError(f"{declaration[-1]} is not a brace list")
            return value
    raise ValueError(f"declaration {' '.join(declaration)} not found")


def parse_test_cases(source: str) -> list[RefCase]:
    """Parse ``main_automated_tests``'s conversation and test cases."""
    body = source[source.index("int main_automated_tests(void)") :]
    tokens = _tokenize(body)
    conversation = [
        (role, content)
        for role, content in _initializer(
            tokens, ["std", ":", ":", "vector", "<", "llama_chat_message", ">",
                     "conversation"]
        )
    ]  # fmt: skip
    raw_cases = _initializer(
        tokens, ["std", ":", ":", "vector", "<", "TestCase", ">", "test_cases"]
    )
    cases = []
    for raw in raw_cases:
        # Positional fields, in TestCase's declaration order; later ones default.
        name, template, expected, expected_jinja, *rest = raw
        bos = rest[0] if len(rest) > 0 else ""
        eos = rest[1] if len(rest) > 1 else ""
        supported = rest[2] if len(rest) > 2 else True
        extra = rest[3] if len(rest) > 3 else []
        cases.append(
            RefCase(
                name=name,
                template_str=template,
                expected_output=expected,
                expected_output_jinja=expected_jinja,
                bos_token=bos,
                eos_token=eos,
                supported_with_jinja=supported,
                conversation=tuple(
                    (role, content) for role, content in [*conversation, *extra]
                ),
            )
        )
    return cases
