"""The Loom lexer (LANGUAGE.md section 2 and section 17 items 1-4).

One compiled regular expression splits the whole text; the token stream is
kept as three parallel lists (kinds, texts, offsets), which is much cheaper in
Python than a token object per token. Comments are collected apart, with their
offsets, for the parser to attach to ops.
"""

from __future__ import annotations

import bisect
import re

# Token kinds.
COMMENT, SHAPE, SSA, SYM, HASH, FLOAT, INT, IDENT, NEGIDENT, STRING, PUNCT, LABEL, INVALID, EOF = range(1, 15)

KIND_NAMES = {
    SHAPE: "type", SSA: "value", SYM: "symbol", HASH: "hash name", FLOAT: "float", INT: "integer",
    IDENT: "identifier", NEGIDENT: "identifier", STRING: "string", PUNCT: "punctuation", LABEL: "block label",
    INVALID: "invalid token", EOF: "end of file",
}

# Name tails are possessive (`*+`): a name never gives characters back, so
# the engine keeps no backtracking state per character (a fifth of the
# lexer's time on typical sources).
_NAME_TAIL = r"[A-Za-z0-9_$]*+(?:-(?!>)[A-Za-z0-9_$]*+)*+"      # `-` joins, but `->` ends a name
_SYMBOL_TAIL = r"[A-Za-z0-9_$.]*+(?:-(?!>)[A-Za-z0-9_$.]*+)*+"
_WORD_TAIL = r"[A-Za-z0-9_.]*+(?:-(?!>)[A-Za-z0-9_.]*+)*+"
_TOKEN_RE = re.compile(
    r"[ \t\n]*+(?:"
    r"(//[^\n]*+)"                                                  # 1 comment
    r"|((?:view|tensor|vector)<(?:[^<>\n]|<[^<>\n]*>)*>?)"            # 2 shaped type (one line; legacy `#x<…>` nests)
    r"|(%(?:[A-Za-z_$]" + _NAME_TAIL + r"|[0-9]+))"                 # 3 SSA name
    r"|(@[A-Za-z_$]" + _SYMBOL_TAIL + r")"                          # 4 symbol
    r"|(\#[A-Za-z_]" + _WORD_TAIL + r")"                            # 5 hash name
    r"|(-?(?:[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+))"  # 6 float
    r"|(-?(?:0[xX][0-9A-Fa-f]+|[0-9]+))"                            # 7 integer
    r"|([A-Za-z_]" + _WORD_TAIL + r")"                              # 8 identifier
    r"|(-[A-Za-z_]" + _WORD_TAIL + r")"                             # 9 `-inf`, `-nan`
    r"|(\"(?:[^\"\\\x00-\x1f\x7f]|\\.)*\")"                         # 10 string
    r"|(->|[()\[\]{}<>=:,|])"                                       # 11 punctuation
    r"|(\^[A-Za-z0-9_$.-]+)"                                        # 12 block label: not v1, PARSE/003
    r"|([^ \t\n])"                                                  # 13 anything else
    r")",
    re.S,
)


class Tokens:
    """The token stream of one source text."""

    __slots__ = (
        "_line",
        "_line_hi",
        "_line_lo",
        "_line_starts",
        "comment_starts",
        "comments",
        "kinds",
        "starts",
        "text",
        "texts",
    )

    def __init__(self, text: str) -> None:
        self.text = text
        self.kinds: list[int] = []
        self.texts: list[str] = []
        self.starts: list[int] = []
        self.comments: list[str] = []
        self.comment_starts: list[int] = []
        self._line_starts: list[int] | None = None
        self._line, self._line_lo, self._line_hi = 0, 0, -1

    def loc(self, offset: int) -> tuple[int, int]:
        """1-based (line, column in code points) of a text offset.

        Parsing asks in mostly increasing order, so the last line found is
        tried first before a binary search.
        """
        if self._line_lo <= offset < self._line_hi:
            return self._line, offset - self._line_lo + 1
        starts = self._line_starts
        if starts is None:
            starts = [0]
            find = self.text.find
            i = find("\n")
            while i >= 0:
                starts.append(i + 1)
                i = find("\n", i + 1)
            self._line_starts = starts
        line = bisect.bisect_right(starts, offset)
        self._line = line
        self._line_lo = starts[line - 1]
        self._line_hi = starts[line] if line < len(starts) else 1 << 62
        return line, offset - self._line_lo + 1


def tokenize(text: str) -> Tokens:
    """Split `text` (CR already removed) into tokens; never raises.

    Invalid characters become INVALID tokens: the parser reports PARSE/004
    when it reaches one, which keeps "the first syntax error stops" simple.
    """
    toks = Tokens(text)
    kinds, texts, starts = toks.kinds, toks.texts, toks.starts
    end = len(text.rstrip(" \t\n"))
    for m in _TOKEN_RE.finditer(text, 0, end):
        k = m.lastindex
        if k is None:
            break
        s = m.group(k)
        if k == COMMENT:
            toks.comments.append(s[2:].removeprefix(" ").rstrip(" \t"))
            toks.comment_starts.append(m.start(k))
            continue
        kinds.append(k)
        texts.append(s)
        starts.append(m.start(k))
    # End of file sits just after the last non-blank character, so a message
    # about it quotes a line that has text.
    kinds.append(EOF)
    texts.append("")
    starts.append(end)
    return toks


def token_end(line: str, column: int) -> int:
    """The 1-based column just past the token that starts at `column` of
    `line` (a diagnostic's end position); `column` itself where no token
    starts there (past the end, on a blank)."""
    start = column - 1
    if not 0 <= start < len(line) or line[start] in " \t":
        return column
    m = _TOKEN_RE.match(line, start)
    if m is None or m.lastindex is None:
        return column
    return m.end(m.lastindex) + 1
