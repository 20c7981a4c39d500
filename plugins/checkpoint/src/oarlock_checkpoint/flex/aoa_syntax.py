"""AoA statement text -> plain statements: the tokenizer, the parser and the macros.

One statement per line (a string of aoa_statements may hold several, one per line):

    STATEMENT ::= NAMES '->' NAMES { ',' ATTRIBUTE }
    NAMES     ::= NAME { ',' NAME }             (on the right, a ',' NAME '=' starts the attributes)
    ATTRIBUTE ::= KEY '=' (NUMBER | STRING)     KEY: axis, permute, dtype, num_heads, num_key_value_groups
                | 'fused_qkv'                   a flag; Paddle writes it as the last right-side name

A NAME is made of letters, digits, '_', '.', '$' and '*', and may end in '^T' (left side only). '_' alone
means "nothing": `a -> _` drops a, `_ -> b` creates b (not loaded). NUMBER is an integer (negative
allowed: axis=-1 is the last axis); STRING is single- or double-quoted.

The macros, applied to each parsed statement in this order (as Paddle's priorities):
  $LAYER_ID  the statement is repeated for every layer id found: the digits standing where $LAYER_ID
             is, in the names defined so far (source keys and names produced by earlier statements)
             that match a left-side name holding $LAYER_ID; when no left-side name holds it, in the
             destination keys that match a right-side name. Ids in numeric order. Unlike Paddle, names
             without $LAYER_ID are left as they are (Paddle appends ".layer.<id>" to them, which also
             breaks `_`, dtype and fused_qkv); write per-layer intermediates as `q.$LAYER_ID`.
  *          in a name, matches a non-empty run of characters (regex `(.+?)` anchored at both ends):
             left-side names against the names defined so far, right-side names against the
             destination keys; the name becomes the comma list of its matches, ordered by the matched
             text: numerically when it is all digits, else lexicographically. No match is an error.
             Extensions beyond Paddle: (1) with exactly one name on each side and the same number of
             '*' in both (`model.* -> *`), it is a pattern rename: one statement per matching left key,
             the right side's '*'s replaced by the matched texts, the attributes copied to each;
             (2) `pattern -> _` and `_ -> pattern` drop / create every match, one statement each.
  fused_qkv  kept as one plain statement (flag fused_qkv=True); aoa.py applies it directly.
  ^T         `a^T` on the left becomes an engine-made name holding `a -> <tmp>, permute="[]"`, put just
             before the statement. On the right it is an error: assign first, then transpose.

Engine-made names start with '%' (which no NAME can hold), so they never collide with keys and are
never matched by $LAYER_ID or '*'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import NamedTuple

from oarlock.dtypes import all_dtypes

LAYER_ID = "$LAYER_ID"
NOTHING = "_"
TRANSPOSE = "^T"
TEMP_PREFIX = "%"
FLAGS = ("fused_qkv",)
# Paddle macros we do not implement: named here so they fail clearly instead of acting as tensor names.
_UNSUPPORTED_FLAGS = ("fused_ffn", "fused_qkv_old")
# attribute key -> the token kind its value must be
ATTRIBUTES = {"axis": "number", "permute": "string", "dtype": "string", "num_heads": "number",
              "num_key_value_groups": "number"}
DTYPE_NAMES = frozenset(d.name for d in all_dtypes)

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<arrow>->)
  | (?P<comma>,)
  | (?P<equal>=)
  | (?P<string>"[^"]*"|'[^']*')
  | (?P<number>-\d+)
  | (?P<name>[A-Za-z0-9_.$*]+(?:\^T)?)
""", re.VERBOSE)
_DIGITS = re.compile(r"\d+")
_PERMUTE = re.compile(r"\[\s*(?:\d+\s*(?:,\s*\d+\s*)*,?\s*)?\]")


class Token(NamedTuple):
    kind: str   # name, number, string, arrow, comma, equal, end
    text: str
    pos: int    # character offset in the statement


@dataclass(frozen=True)
class Statement:
    """One plain statement. attrs: ((key, value), ...) in the order written; permute values are
    tuples of ints, () meaning "reverse all axes". text: the line it came from, for error messages."""

    left: tuple
    right: tuple
    attrs: tuple = ()
    fused_qkv: bool = False
    text: str = ""
    expanded: bool = False  # a macro made it from `text`

    def __str__(self):
        parts = [", ".join(self.left) + " -> " + ", ".join(self.right)]
        parts += ["fused_qkv"] if self.fused_qkv else []
        parts += [f"{key}={_show_value(key, value)}" for key, value in self.attrs]
        return ", ".join(parts)

    def where(self) -> str:
        """`aoa statement '<text>'`, plus the expanded form when a macro changed it."""
        if not self.expanded:
            return f"aoa statement {self.text or str(self)!r}"
        return f"aoa statement {self.text!r} (expanded: {str(self)!r})"


def _show_value(key, value):
    if key == "permute":
        return '"[' + ",".join(map(str, value)) + ']"'
    return repr(value) if isinstance(value, str) else str(value)


# -- tokenizer and parser -----------------------------------------------------------------------------
def tokenize(text: str) -> list[Token]:
    tokens, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            what = "an unterminated string" if text[pos] in "'\"" else f"unexpected character {text[pos]!r}"
            raise ValueError(f"aoa statement {text!r}: {what} at position {pos}; names are made of letters, "
                             f"digits, '_', '.', '$', '*' (with an optional '^T'), values are integers or "
                             f"quoted strings")
        kind = match.lastgroup
        if kind != "space":
            value = match.group()
            if kind == "name" and _DIGITS.fullmatch(value):
                kind = "number"
            tokens.append(Token(kind, value, pos))
        pos = match.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def take(self, kind: str, expected: str) -> Token:
        token = self.peek()
        if token.kind != kind:
            self.fail(token, expected)
        self.i += 1
        return token

    def fail(self, token: Token, expected: str):
        got = "the end of the statement" if token.kind == "end" else f"{token.text!r}"
        raise ValueError(f"aoa statement {self.text!r}: expected {expected}, got {got} at position {token.pos}")

    def statement(self) -> Statement:
        left = self.names(right=False)
        self.take("arrow", "',' or '->'")
        right = self.names(right=True)
        flags, attrs = set(right) & set(FLAGS), []
        right = tuple(name for name in right if name not in FLAGS)
        while self.peek().kind == "comma":
            self.i += 1
            key = self.take("name", "an attribute (key=value) or fused_qkv")
            if key.text in FLAGS and self.peek().kind != "equal":
                flags.add(key.text)
                continue
            self.take("equal", f"'=' after the attribute {key.text!r}")
            attrs.append((key.text, self.value(key)))
        if self.peek().kind != "end":
            self.fail(self.peek(), "',' or the end of the statement")
        for name in left + right:
            if name in _UNSUPPORTED_FLAGS:
                raise ValueError(f"aoa statement {self.text!r}: {name} is not supported; the macros supported are "
                                 f"$LAYER_ID, '*', '^T' and fused_qkv")
        for name in right:
            if name.endswith(TRANSPOSE):
                raise ValueError(
                    f"aoa statement {self.text!r}: cannot assign to a transpose ({name!r} on the right side): "
                    f"{name} is a view, not a variable. Assign first ('a -> {name[:-2]}'), then transpose "
                    f"('{name} -> {name[:-2]}')")
        return Statement(left, right, tuple(attrs), "fused_qkv" in flags, self.text)

    def names(self, right: bool) -> tuple:
        names = [self.take("name", "a tensor name").text]
        while self.peek().kind == "comma" and not (right and self.peek(2).kind == "equal"):
            # a flag written among the names (Paddle's `qkv -> q, k, v, fused_qkv`) is taken out by statement()
            self.i += 1
            names.append(self.take("name", "a tensor name").text)
        return tuple(names)

    def value(self, key: Token):
        token = self.peek()
        if key.text not in ATTRIBUTES:
            raise ValueError(f"aoa statement {self.text!r}: unknown attribute {key.text!r} at position {key.pos}; "
                             f"accepted: {', '.join(ATTRIBUTES)} (and the flag fused_qkv)")
        kind = ATTRIBUTES[key.text]
        if token.kind != kind:
            self.fail(token, f"{'an integer' if kind == 'number' else 'a quoted string'} for {key.text}")
        self.i += 1
        if kind == "number":
            return int(token.text)
        value = token.text[1:-1]
        if key.text == "permute":
            if not _PERMUTE.fullmatch(value):
                raise ValueError(f"aoa statement {self.text!r}: bad permute {token.text} at position {token.pos}; "
                                 f"expected a list of axes such as \"[1,0]\", or \"[]\" to reverse all axes")
            return tuple(int(axis) for axis in _DIGITS.findall(value))
        if value not in DTYPE_NAMES:
            raise ValueError(f"aoa statement {self.text!r}: unknown dtype {value!r} at position {token.pos}; "
                             f"accepted: {', '.join(sorted(DTYPE_NAMES))}")
        return value


def parse(text: str) -> list[Statement]:
    """The statements of one aoa_statements string (one per non-blank line)."""
    return [_Parser(line.strip()).statement() for line in text.splitlines() if line.strip()]


# -- macros -------------------------------------------------------------------------------------------
def expand(statements, source_keys, destination_keys) -> list[Statement]:
    """Apply the macros ($LAYER_ID, '*', '^T'; see the module docstring) to parsed statements, in order.
    The names defined so far (what '*' and $LAYER_ID match on the left) start as the source keys and
    follow the statements: outputs are added, dropped names removed."""
    defined = set(source_keys)
    destination = list(destination_keys)
    temps = iter(range(1, 1 << 62))
    out = []
    for statement in statements:
        for per_layer in _expand_layer_id(statement, defined, destination):
            for plain in _expand_star(per_layer, defined, destination):
                for final in _expand_transpose(plain, temps):
                    out.append(final)
                    _track(final, defined)
    return out


def compile_statements(texts, source_keys, destination_keys) -> list[Statement]:
    """aoa_statements strings -> plain statements (parsed, then expanded)."""
    parsed = [statement for text in texts for statement in parse(text)]
    return expand(parsed, source_keys, destination_keys)


def _track(statement: Statement, defined: set):
    if statement.right == (NOTHING,):
        defined.discard(statement.left[0])
    elif statement.left == (NOTHING,):
        defined.discard(statement.right[0])
    else:
        defined.update(statement.right)


def _split_transpose(name: str) -> tuple:
    return (name[:-2], TRANSPOSE) if name.endswith(TRANSPOSE) else (name, "")


def _pattern(name: str, group: str) -> str:
    """A regex for `name` with each '*' as `group`."""
    return group.join(re.escape(part) for part in name.split("*"))


def _candidates(keys) -> list:
    return [key for key in keys if not key.startswith(TEMP_PREFIX)]


def _expand_layer_id(statement: Statement, defined: set, destination: list) -> list:
    tagged = [name for name in statement.left if LAYER_ID in name]
    where = "source key (or name defined by an earlier statement)"
    keys = defined
    if not tagged:
        tagged = [name for name in statement.right if LAYER_ID in name]
        where, keys = "destination key", destination
        if not tagged:
            return [statement]
    ids = set()
    for name in tagged:
        base = _split_transpose(name)[0]
        # the first $LAYER_ID captures the id, later ones must repeat it
        parts = [_pattern(part, ".+?") for part in base.split(LAYER_ID)]
        regex = re.compile(parts[0] + r"(?P<id>\d+)" + parts[1] + "".join(r"(?P=id)" + part for part in parts[2:]))
        ids.update(match.group("id") for key in _candidates(keys) if (match := regex.fullmatch(key)))
    if not ids:
        raise ValueError(f"{statement.where()}: no {where} matches {' or '.join(map(repr, tagged))}, so no "
                         f"layer id for {LAYER_ID} was found")
    return [replace(statement, expanded=True, left=tuple(n.replace(LAYER_ID, i) for n in statement.left),
                    right=tuple(n.replace(LAYER_ID, i) for n in statement.right))
            for i in sorted(ids, key=lambda i: (int(i), i))]


def _matches(statement: Statement, name: str, keys, where: str) -> list:
    """[(key, matched texts)] for a name holding '*', in the documented order; the '^T' stays on."""
    base, suffix = _split_transpose(name)
    regex = re.compile(_pattern(base, "(.+?)"))
    found = [(key, match.groups()) for key in _candidates(keys) if (match := regex.fullmatch(key))]
    if not found:
        raise ValueError(f"{statement.where()}: no {where} matches the pattern {name!r}")
    order = lambda item: tuple((0, int(g), g) if g.isascii() and g.isdigit() else (1, 0, g) for g in item[1])
    return [(key + suffix, groups) for key, groups in sorted(found, key=order)]


def _expand_star(statement: Statement, defined: set, destination: list) -> list:
    left, right = statement.left, statement.right
    if not any("*" in name for name in left + right):
        return [statement]
    source_where, destination_where = "source key (or name defined by an earlier statement)", "destination key"
    if len(left) == 1 and len(right) == 1:
        stars_left, stars_right = left[0].count("*"), right[0].count("*")
        if right == (NOTHING,):
            return [replace(statement, expanded=True, left=(key,))
                    for key, _ in _matches(statement, left[0], defined, source_where)]
        if left == (NOTHING,):
            return [replace(statement, expanded=True, right=(key,))
                    for key, _ in _matches(statement, right[0], destination, destination_where)]
        if stars_left and stars_left == stars_right:
            renames = []
            for key, groups in _matches(statement, left[0], defined, source_where):
                target = right[0]
                for group in groups:
                    target = target.replace("*", group, 1)
                renames.append(replace(statement, expanded=True, left=(key,), right=(target,)))
            return renames

    def expand_side(names, keys, where):
        out = []
        for name in names:
            out += [key for key, _ in _matches(statement, name, keys, where)] if "*" in name else [name]
        return tuple(out)

    return [replace(statement, expanded=True, left=expand_side(left, defined, source_where),
                    right=expand_side(right, destination, destination_where))]


def _expand_transpose(statement: Statement, temps) -> list:
    if not any(name.endswith(TRANSPOSE) for name in statement.left):
        return [statement]
    before, renamed, left = [], {}, []
    for name in statement.left:
        if name.endswith(TRANSPOSE):
            base = name[:-2]
            if base == NOTHING:
                raise ValueError(f"{statement.where()}: '_^T' means nothing; transpose a tensor name")
            if name not in renamed:
                renamed[name] = f"{TEMP_PREFIX}{next(temps)}.{name}"
                before.append(Statement((base,), (renamed[name],), (("permute", ()),), text=statement.text,
                                    expanded=True))
            name = renamed[name]
        left.append(name)
    return before + [replace(statement, expanded=True, left=tuple(left))]
