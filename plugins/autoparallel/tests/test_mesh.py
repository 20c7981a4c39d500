"""ProcessMesh against Paddle's own paddle.distributed.ProcessMesh (which works without a job): shape,
process ids, dim names, get_dim_size, get_mesh_with_dim's reordering (with and without index),
get_submesh_with_dim for every process, indexing, equality and hashing; and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock.distributed as dist

paddle_dist = pytest.importorskip("paddle.distributed")

MESHES = [([0, 1, 2, 3], ["x"]), ([[0, 1], [2, 3]], ["dp", "mp"]), ([[2, 4, 5], [0, 1, 3]], None),
          ([[[0, 1], [2, 3]], [[4, 5], [6, 7]]], ["pp", "dp", "tp"])]


def same(ours, theirs):
    return (ours.shape == list(theirs.shape) and ours.process_ids == list(theirs.process_ids)
            and ours.dim_names == list(theirs.dim_names))


@pytest.mark.parametrize("mesh, names", MESHES)
def test_mesh_matches_paddle(mesh, names, monkeypatch):
    ours, theirs = dist.ProcessMesh(mesh, dim_names=names), paddle_dist.ProcessMesh(mesh, dim_names=names)
    assert same(ours, theirs) and ours.ndim == theirs.ndim and str(ours) == str(theirs)
    np.testing.assert_array_equal(ours.mesh, theirs.mesh)
    for i, name in enumerate(theirs.dim_names):
        assert ours.get_dim_size(name) == ours.get_dim_size(i) == theirs.get_dim_size(name)
        assert same(ours.get_mesh_with_dim(name), theirs.get_mesh_with_dim(name))
        for index in range(theirs.get_dim_size(name)):
            assert same(ours.get_mesh_with_dim(name, index), theirs.get_mesh_with_dim(name, index))
        for rank in theirs.process_ids:
            monkeypatch.setattr(paddle_dist, "get_rank", lambda rank=rank: rank)
            assert same(ours.get_submesh_with_dim(name, rank=rank), theirs.get_submesh_with_dim(name))
    # (Paddle's tuple indexing drops the names of trailing dims on 3-d meshes: compared up to 2-d)
    for index in [0, slice(0, 1), (0,) if len(theirs.shape) == 1 else (slice(None), 0)]:
        if isinstance(index, tuple) and len(theirs.shape) > 2:
            continue
        assert same(ours[index], theirs[index])
    # Paddle's get_rank_by_dim_and_process_id fails under numpy 2; the oracle is numpy's position of the id
    for rank in theirs.process_ids:
        where = np.argwhere(np.asarray(mesh) == rank)[0]
        assert [ours.get_rank_by_dim_and_process_id(i, rank) for i in range(ours.ndim)] == list(where)
    assert ours.get_rank_by_dim_and_process_id(0, 99) == -1 and ours.contains(theirs.process_ids[0])


def test_shape_and_process_ids_form():
    ours = dist.ProcessMesh(shape=[2, 3], process_ids=[5, 4, 3, 2, 1, 0])
    theirs = paddle_dist.ProcessMesh(shape=[2, 3], process_ids=[5, 4, 3, 2, 1, 0])
    assert same(ours, theirs)


def test_equality_and_hash_as_paddle():
    a, b = dist.ProcessMesh([[0, 1], [2, 3]], ["x", "y"]), dist.ProcessMesh([[0, 1], [2, 3]])
    pa, pb = paddle_dist.ProcessMesh([[0, 1], [2, 3]], ["x", "y"]), paddle_dist.ProcessMesh([[0, 1], [2, 3]])
    # equality ignores the dim names; the hash does not (Paddle's behaviour)
    assert (a == b) == (pa == pb) is True
    assert (hash(a) == hash(b)) == (hash(pa) == hash(pb)) is False
    assert hash(a) == hash(dist.ProcessMesh([[0, 1], [2, 3]], ["x", "y"]))
    assert a != dist.ProcessMesh([[0, 2], [1, 3]]) and a != dist.ProcessMesh([0, 1, 2, 3]) and a != "mesh"


@pytest.mark.parametrize("kwargs, message", [
    ({"mesh": [[0, 1], [1, 2]]}, "distinct"),
    ({"mesh": [0, -1]}, ">= 0"),
    ({"mesh": "0,1"}, "list or np.ndarray"),
    ({"mesh": [0, 1], "dim_names": ["x", "y"]}, "one per mesh dimension"),
    ({"mesh": [[0, 1]], "dim_names": ("x", "y")}, "must be a list"),
    ({"shape": [2]}, "both 'shape' and 'process_ids'"),
])
def test_bad_meshes(kwargs, message):
    with pytest.raises(ValueError, match="ProcessMesh()") as info:
        dist.ProcessMesh(**kwargs)
    assert message in str(info.value)


def test_bad_dimension_names():
    mesh = dist.ProcessMesh([[0, 1], [2, 3]], ["x", "y"])
    with pytest.raises(ValueError, match=r"get_mesh_with_dim\(\): 'z' is not a dimension name"):
        mesh.get_mesh_with_dim("z")
    with pytest.raises(ValueError, match=r"get_group\(\): the mesh has 2 dimensions"):
        mesh.get_group()
    assert mesh.get_submesh_with_dim("x", rank=7) is None
