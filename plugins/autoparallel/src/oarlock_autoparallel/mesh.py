"""ProcessMesh: the Cartesian topology of the processes a distributed tensor lives on (Paddle's
paddle.distributed.ProcessMesh). Equality looks at the shape and the process ids (as Paddle's __eq__); the
hash adds the dimension names (as Paddle's). Groups of a mesh dimension are made once per (mesh, dimension)
and cached, every group of that dimension at once and in one order on every rank that asks, so repeated
reshards do not create new communicators."""

from __future__ import annotations

import numpy as np

_GROUPS: dict = {}   # (shape, process_ids, dim index) -> {process id: its Group along that dim}


class ProcessMesh:
    """ProcessMesh(mesh=None, dim_names=None, shape=None, process_ids=None): `mesh` a nested list (or array)
    of distinct non-negative process ids; or `shape` and `process_ids`. dim_names default to d0, d1, ..."""

    def __init__(self, mesh=None, dim_names=None, shape=None, process_ids=None):
        if mesh is None:
            if shape is None or process_ids is None:
                raise ValueError("ProcessMesh(): give 'mesh' (a nested list of process ids), or both 'shape' and "
                                 "'process_ids'")
            mesh = np.array(list(process_ids)).reshape(list(shape))
        if not isinstance(mesh, (list, np.ndarray)):
            raise ValueError(f"ProcessMesh(): argument 'mesh' must be a list or np.ndarray of process ids, got "
                             f"{type(mesh).__name__}")
        mesh = np.array(mesh)
        if mesh.dtype.kind not in "iu" or mesh.size == 0:
            raise ValueError(f"ProcessMesh(): argument 'mesh' must hold integer process ids, got {mesh.tolist()!r}")
        ids = [int(i) for i in mesh.flatten()]
        if min(ids) < 0 or len(set(ids)) != len(ids):
            raise ValueError(f"ProcessMesh(): the process ids must be distinct and >= 0, got {ids}")
        if dim_names is not None and not isinstance(dim_names, list):
            raise ValueError(f"ProcessMesh(): argument 'dim_names' must be a list, got {type(dim_names).__name__}")
        names = list(dim_names) if dim_names is not None else [f"d{i}" for i in range(mesh.ndim)]
        if len(names) != mesh.ndim or len(set(names)) != len(names):
            raise ValueError(f"ProcessMesh(): dim_names {names} must be {mesh.ndim} distinct names, one per mesh "
                             f"dimension (shape {list(mesh.shape)})")
        self._mesh, self._shape = mesh.astype(np.int64), list(mesh.shape)
        self._process_ids, self._dim_names = ids, names

    # -- what it is ------------------------------------------------------------------------------
    mesh = property(lambda self: self._mesh)
    shape = property(lambda self: list(self._shape))
    process_ids = property(lambda self: list(self._process_ids))
    dim_names = property(lambda self: list(self._dim_names))
    ndim = property(lambda self: len(self._shape))
    size = property(lambda self: len(self._process_ids))

    @property
    def unique_id(self) -> int:
        return hash((tuple(self._shape), tuple(self._process_ids)))

    def _axis(self, dim, what: str) -> int:
        if isinstance(dim, str):
            if dim not in self._dim_names:
                raise ValueError(f"ProcessMesh.{what}(): {dim!r} is not a dimension name of the mesh "
                                 f"({self._dim_names})")
            return self._dim_names.index(dim)
        if isinstance(dim, int) and not isinstance(dim, bool) and -self.ndim <= dim < self.ndim:
            return dim % self.ndim
        raise ValueError(f"ProcessMesh.{what}(): dim must be a dimension name in {self._dim_names} or an index in "
                         f"[0, {self.ndim}), got {dim!r}")

    def get_dim_size(self, dim) -> int:
        return 1 if dim is None else self._shape[self._axis(dim, "get_dim_size")]

    dim_size = get_dim_size

    def contains(self, process_id: int) -> bool:
        return process_id in self._process_ids

    def empty(self) -> bool:
        return not self._process_ids

    def coordinate(self, process_id: int):
        """The index of `process_id` on each mesh dimension, or None when it is not in the mesh."""
        if process_id not in self._process_ids:
            return None
        return [int(i) for i in np.unravel_index(self._process_ids.index(process_id), self._shape)]

    def get_rank_by_dim_and_process_id(self, dim, process_id: int) -> int:
        coord = self.coordinate(process_id)
        if coord is None:
            return -1
        return 0 if dim is None else coord[self._axis(dim, "get_rank_by_dim_and_process_id")]

    # -- sub-meshes ------------------------------------------------------------------------------
    def get_mesh_with_dim(self, dim_name: str, index=None) -> ProcessMesh:
        """The mesh with `dim_name` moved first (the others keep their order); with `index`, that slice of
        the moved dimension (Paddle's semantics, including its 1-d case)."""
        axis = self._axis(dim_name, "get_mesh_with_dim")
        order = [axis] + [i for i in range(self.ndim) if i != axis]
        names = [self._dim_names[i] for i in order]
        moved = self._mesh.transpose(order)
        if index is None:
            return ProcessMesh(moved, names)
        return ProcessMesh(moved[index], names[1:]) if len(names) > 1 else ProcessMesh([moved[index]], names)

    def _columns(self, axis: int) -> np.ndarray:
        """Every 1-d line of processes along `axis`, one per column: shape [size of axis, lines]."""
        return np.moveaxis(self._mesh, axis, 0).reshape(self._shape[axis], -1)

    def get_submesh_with_dim(self, dim_name: str, rank: int | None = None):
        """The 1-d mesh along `dim_name` that holds this process (or `rank`); None when it is not in the mesh."""
        axis = self._axis(dim_name, "get_submesh_with_dim")
        rank = _current_rank() if rank is None else rank
        if rank not in self._process_ids:
            return None
        columns = self._columns(axis)
        col = int(np.argwhere(columns == rank)[0][1])
        return ProcessMesh(columns[:, col], [self._dim_names[axis]])

    def __getitem__(self, index):
        if isinstance(index, str):
            return self.get_submesh_with_dim(index)
        if isinstance(index, tuple):
            names = [self._dim_names[i] for i, item in enumerate(index) if isinstance(item, slice)]
            names += self._dim_names[len(index):]
        elif isinstance(index, slice):
            names = self._dim_names
        else:
            names = self._dim_names[1:]
        sub = self._mesh[index]
        return ProcessMesh(sub, names) if sub.shape else ProcessMesh([int(sub)])

    # -- groups ------------------------------------------------------------------------------------
    def get_group(self, dim_name=None):
        """The communication group of this process along `dim_name` (may be omitted for a 1-d mesh). Every
        group of that mesh dimension is created on first use and cached per (mesh, dimension)."""
        if dim_name is None:
            if self.ndim > 1:
                raise ValueError(f"ProcessMesh.get_group(): the mesh has {self.ndim} dimensions {self._dim_names}; "
                                 f"give dim_name")
            axis = 0
        else:
            axis = self._axis(dim_name, "get_group")
        return self.group_of(axis, _current_rank())

    def group_of(self, axis: int, rank: int):
        """The group along mesh dimension `axis` holding process `rank` (reshard calls this for every
        collective: after the first call it is one dict lookup)."""
        key = (tuple(self._shape), tuple(self._process_ids), axis)
        groups = _GROUPS.get(key)
        if groups is None:
            import oarlock.distributed as dist
            columns = self._columns(axis)
            lines = [dist.new_group([int(r) for r in columns[:, c]]) for c in range(columns.shape[1])]
            groups = _GROUPS[key] = {int(r): lines[c] for c in range(columns.shape[1]) for r in columns[:, c]}
        group = groups.get(rank)
        if group is None:
            raise ValueError(f"ProcessMesh.get_group(): process {rank} is not in the mesh {self}")
        return group

    # -- identity ----------------------------------------------------------------------------------
    def __eq__(self, other):
        return isinstance(other, ProcessMesh) and self._shape == other._shape and \
            self._process_ids == other._process_ids

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash((tuple(self._shape), tuple(self._process_ids), tuple(self._dim_names)))

    def __str__(self):
        return f"shape {self._shape}, process_ids {self._process_ids}, dim_names {self._dim_names}"

    def __repr__(self):
        return f"ProcessMesh({self._mesh.tolist()}, dim_names={self._dim_names})"

    def __deepcopy__(self, memo):
        return ProcessMesh(self._mesh.copy(), list(self._dim_names))


def _current_rank() -> int:
    import oarlock.distributed as dist
    return dist.get_rank()
