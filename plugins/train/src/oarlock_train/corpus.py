"""The training corpus: the module docstrings of the Python standard library, as bytes.

Every public stdlib module whose source is a ``.py`` file is one document: its
docstring, read with ``ast.get_docstring`` from the source file, so nothing is
imported (``import this`` or ``import antigravity`` would have side effects).
Modules written in C (``math``, ``sys``) have no source file and are left out.
Test packages, idlelib, the tkinter/turtle demos and private modules (any
dotted component starting with ``_``) are skipped. Documents are sorted by
module name, so the corpus depends only on the Python version.

Tokens are bytes (vocab 256) of the UTF-8 text; documents are joined by
``SEPARATOR`` (byte 0, which no docstring contains). Every ``validation_every``-th
document goes to validation, so no document is split across the two sets.
Each split is packed into non-overlapping rows of ``seq_len + 1`` tokens:
inputs are a row's first ``seq_len`` tokens, targets the last ``seq_len``.
"""

from __future__ import annotations

import ast
import functools
import math
import os
import sys
import sysconfig
from dataclasses import dataclass

import numpy as np

VOCAB_SIZE = 256
SEPARATOR = 0  # the document-separator byte token
SKIP_PACKAGES = frozenset({"test", "tests", "idle_test", "idlelib", "turtledemo"})


@dataclass(frozen=True)
class Document:
    module: str  # dotted module name, e.g. "json.decoder"
    text: str


def stdlib_dir() -> str:
    return sysconfig.get_paths()["stdlib"]


def _module_files(root: str):
    """(dotted name, path) of every public .py module under `root`, for stdlib top-level names only."""
    for top in sorted(sys.stdlib_module_names):
        if top.startswith("_") or top in SKIP_PACKAGES:
            continue
        single = os.path.join(root, top + ".py")
        package = os.path.join(root, top)
        if os.path.isfile(single):
            yield top, single
        elif os.path.isfile(os.path.join(package, "__init__.py")):
            yield from _package_files(top, package)


def _package_files(name: str, path: str):
    yield name, os.path.join(path, "__init__.py")
    for entry in sorted(os.listdir(path)):
        stem, ext = os.path.splitext(entry)
        if entry.startswith("_") or stem in SKIP_PACKAGES or stem.startswith("test"):
            continue
        full = os.path.join(path, entry)
        if ext == ".py" and os.path.isfile(full):
            yield f"{name}.{stem}", full
        elif not ext and os.path.isfile(os.path.join(full, "__init__.py")):
            yield from _package_files(f"{name}.{entry}", full)


def read_docstring(path: str) -> str | None:
    """The module docstring of a source file, without importing it; None if it has none or does not parse."""
    try:
        with open(path, "rb") as fh:
            tree = ast.parse(fh.read(), filename=path)
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return None
    return ast.get_docstring(tree, clean=True)


def stdlib_documents(root: str | None = None) -> tuple[Document, ...]:
    """One Document per public stdlib module that has a docstring, sorted by module name."""
    return _documents(os.path.abspath(root or stdlib_dir()))


@functools.lru_cache(maxsize=4)  # parsing ~600 source files takes seconds; a process needs it once
def _documents(root: str) -> tuple[Document, ...]:
    docs = []
    for name, path in _module_files(root):
        text = read_docstring(path)
        if text and text.strip():
            docs.append(Document(name, text.strip()))
    return tuple(sorted(docs, key=lambda d: d.module))


def encode(documents) -> np.ndarray:
    """Bytes of the documents, each followed by SEPARATOR, as a uint8 token stream."""
    parts = []
    for doc in documents:
        parts.append(doc.text.encode("utf-8"))
        parts.append(bytes([SEPARATOR]))
    return np.frombuffer(b"".join(parts), dtype=np.uint8).copy()


def decode(tokens) -> str:
    """Text of byte tokens; separators become blank lines and broken UTF-8 is replaced, not fatal."""
    data = bytes(int(t) for t in tokens)
    return data.replace(bytes([SEPARATOR]), b"\n\n").decode("utf-8", errors="replace")


def split_documents(documents, validation_every: int = 20):
    """(train, validation): every `validation_every`-th document (1-based) is validation."""
    if validation_every < 2:
        raise ValueError(f"validation_every must be >= 2 (one document in that many is held out), "
                         f"got {validation_every}")
    train = [d for i, d in enumerate(documents, 1) if i % validation_every]
    valid = [d for i, d in enumerate(documents, 1) if not i % validation_every]
    return train, valid


def pack(tokens: np.ndarray, seq_len: int) -> np.ndarray:
    """Non-overlapping rows of seq_len + 1 tokens (int64); the ragged tail is dropped."""
    row = seq_len + 1
    count = len(tokens) // row
    if count == 0:
        raise ValueError(f"--seq-len {seq_len} is too long: a split of {len(tokens)} tokens does not fill one "
                         f"sequence of {row} tokens")
    return tokens[:count * row].astype(np.int64).reshape(count, row)


def unigram_entropy(tokens: np.ndarray) -> float:
    """Entropy of the byte distribution in nats per byte (the loss of the best context-free predictor)."""
    counts = np.bincount(tokens, minlength=VOCAB_SIZE).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


@dataclass
class Corpus:
    """The packed train and validation splits and the figures reported about them."""

    train: np.ndarray  # [n_train, seq_len + 1] int64
    valid: np.ndarray  # [n_valid, seq_len + 1] int64
    train_docs: int
    valid_docs: int
    train_bytes: int
    valid_bytes: int
    entropy_nats: float  # unigram entropy of the training bytes, nats per byte

    @property
    def entropy_bits(self) -> float:
        return self.entropy_nats / math.log(2)

    def summary(self) -> str:
        return (f"corpus: stdlib module docstrings (Python {sys.version_info.major}.{sys.version_info.minor}), "
                f"{self.train_docs + self.valid_docs} documents, {self.train_bytes + self.valid_bytes:,} bytes; "
                f"train {self.train_docs} docs / {self.train_bytes:,} bytes / {len(self.train)} sequences, "
                f"validation {self.valid_docs} docs / {self.valid_bytes:,} bytes / {len(self.valid)} sequences; "
                f"unigram entropy of the training bytes {self.entropy_nats:.3f} nats/byte "
                f"({self.entropy_bits:.3f} bits/byte)")


def build_corpus(seq_len: int, validation_every: int = 20, root: str | None = None) -> Corpus:
    documents = stdlib_documents(root)
    if len(documents) < validation_every:
        raise RuntimeError(f"found only {len(documents)} stdlib docstrings under {root or stdlib_dir()!r}; "
                           f"need at least {validation_every} to hold one out for validation")
    train_docs, valid_docs = split_documents(documents, validation_every)
    train_tokens, valid_tokens = encode(train_docs), encode(valid_docs)
    return Corpus(train=pack(train_tokens, seq_len), valid=pack(valid_tokens, seq_len),
                  train_docs=len(train_docs), valid_docs=len(valid_docs),
                  train_bytes=len(train_tokens), valid_bytes=len(valid_tokens),
                  entropy_nats=unigram_entropy(train_tokens))


def save_corpus(corpus: Corpus, path) -> None:
    """Write the corpus to `path` (.npz): `oarlock train --nproc N` builds it once and its ranks load it,
    instead of each parsing the standard library again."""
    np.savez(path, train=corpus.train, valid=corpus.valid,
             figures=np.array([corpus.train_docs, corpus.valid_docs, corpus.train_bytes, corpus.valid_bytes]),
             entropy_nats=np.array(corpus.entropy_nats))


def load_corpus(path) -> Corpus:
    with np.load(path) as data:
        train_docs, valid_docs, train_bytes, valid_bytes = (int(v) for v in data["figures"])
        return Corpus(train=data["train"], valid=data["valid"], train_docs=train_docs, valid_docs=valid_docs,
                      train_bytes=train_bytes, valid_bytes=valid_bytes, entropy_nats=float(data["entropy_nats"]))
