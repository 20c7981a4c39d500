"""The corpus builder: stdlib docstrings read without importing, deterministic, split by document."""

import sys

import numpy as np
import pytest

from oarlock_train import corpus


def _write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def fake_stdlib(tmp_path):
    _write(tmp_path, "json/__init__.py", '"""JSON package."""\n')
    _write(tmp_path, "json/decoder.py", '"""JSON decoder."""\n')
    _write(tmp_path, "json/_private.py", '"""private"""\n')
    _write(tmp_path, "json/tests/__init__.py", '"""tests"""\n')
    _write(tmp_path, "idlelib/__init__.py", '"""idle"""\n')
    _write(tmp_path, "antigravity.py", '"""Flying."""\nraise SystemExit("imported!")\n')
    _write(tmp_path, "abc.py", "x = 1  # no docstring\n")
    _write(tmp_path, "notstdlib.py", '"""not a stdlib name"""\n')
    return str(tmp_path)


def test_reads_docstrings_without_importing_and_skips_private_tests_and_idlelib(fake_stdlib):
    docs = corpus.stdlib_documents(fake_stdlib)
    assert [(d.module, d.text) for d in docs] == [
        ("antigravity", "Flying."), ("json", "JSON package."), ("json.decoder", "JSON decoder.")]


def test_real_stdlib_is_deterministic_and_imports_nothing():
    before = set(sys.modules)
    a = corpus.build_corpus(64)
    corpus._documents.cache_clear()  # a second, independent read of the sources
    b = corpus.build_corpus(64)
    assert not {"antigravity", "this", "idlelib", "turtledemo"} & (set(sys.modules) - before)
    np.testing.assert_array_equal(a.train, b.train)
    np.testing.assert_array_equal(a.valid, b.valid)
    assert a.entropy_nats == b.entropy_nats
    assert a.train.shape[1] == 65 and a.train.dtype == np.int64
    # byte tokens; the unigram entropy is below log(256) and reported in both units
    assert a.train.max() < 256 and 2.0 < a.entropy_nats < np.log(256)
    assert a.entropy_bits == pytest.approx(a.entropy_nats / np.log(2))
    assert "nats/byte" in a.summary() and "bits/byte" in a.summary()


def test_split_is_by_document():
    docs = corpus.stdlib_documents()
    names = [d.module for d in docs]
    assert names == sorted(names) and len(docs) > 100
    assert not any(part.startswith("_") or part in ("test", "tests", "idlelib") for n in names for part in n.split("."))
    train, valid = corpus.split_documents(docs, 20)
    assert valid == list(docs[19::20])
    assert {d.module for d in train}.isdisjoint(d.module for d in valid)
    assert len(train) + len(valid) == len(docs)
    # each document is followed by exactly one separator, so documents stay whole in the token stream
    stream = corpus.encode(valid)
    assert (stream == corpus.SEPARATOR).sum() == len(valid)
    assert corpus.decode(stream[:stream.tolist().index(0)]) == valid[0].text


def test_pack_and_errors():
    rows = corpus.pack(np.arange(10, dtype=np.uint8), 2)
    assert rows.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    with pytest.raises(ValueError, match="--seq-len 20"):
        corpus.pack(np.arange(10, dtype=np.uint8), 20)
    with pytest.raises(ValueError, match="validation_every"):
        corpus.split_documents([], 1)


def test_unigram_entropy():
    assert corpus.unigram_entropy(np.array([1, 1, 1], np.uint8)) == 0.0
    assert corpus.unigram_entropy(np.arange(256, dtype=np.uint8)) == pytest.approx(np.log(256))
