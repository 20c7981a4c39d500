"""Point-to-point transfers between pipeline stages (Paddle's pp_utils/p2p_communication.py, SendRecvMeta).

Each boundary between global virtual stages v and v+1 (a "link") has its own two-rank group in every pipeline
line (the ranks that differ only in their pipe coordinate). A group is its own communicator, so the
activations of one link and the gradients coming back on it never match the messages of another link between
the same two ranks (with virtual stages, ranks s and s+1 share several links): within one link and one
direction, messages arrive in the order they were sent, and every schedule runs the micro-batches of a chunk
in increasing order on both ends. The communicators are built when the wrapper is made, every rank going
through the links in the same order, so that no first transfer waits on a communicator being built.

Values are a Tensor or tuples, lists and dicts of them (pipeline_struct). The first forward transfer of a step on
a link carries a small metadata message before the tensors: the nesting, each tensor's shape, dtype and
stop_gradient (two messages: its byte length as one int64, then the JSON bytes as uint8). Later
micro-batches send only the tensors and must have the same metadata (checked on the sending side). Gradients
go back only for the tensors that were sent with stop_gradient=False; the receiver of a value rebuilds it
with fresh tensors that carry the sender's stop_gradient, so its backward yields exactly those gradients.

Sends are non-blocking: their tasks (and the arrays they read) are kept until `wait_sends()`. Receives can be
posted ahead (`post_forward` / `post_backward`, which the executor calls for the next receive of its schedule
before it computes the current action), so the transfer proceeds while this rank computes; a posted receive
needs its link's metadata, so the first receive of a step on each link is posted when it is needed. Posted
receives queue per link and direction in micro-batch order, the order the peer sends in. A receive waits under
the watchdog; when it times out the error names this pipeline stage, the peer stage and what was expected.
"""

from __future__ import annotations

import json

import numpy as np

import oarlock
import oarlock.distributed as dist
from oarlock_parallel.pipeline_struct import describe, flatten, unflatten

_WHAT = "PipelineParallel"


def _meta_of(tensors, spec) -> dict:
    return {"spec": spec, "tensors": [[list(t.shape), t.dtype.name, bool(t.stop_gradient)] for t in tensors]}


class PipelineP2P:
    """The links of this rank's pipeline line for `num_chunks` model chunks per stage (see the module docstring).

    hcg: the HybridCommunicateGroup (its topology's "pipe" axis)."""

    def __init__(self, hcg, num_chunks: int = 1):
        topology = hcg.topology()
        me = hcg.get_global_rank()
        lines = topology.get_comm_list("pipe")
        self.num_stages, self.num_chunks = len(lines[0]), num_chunks
        self.stage = hcg.get_stage_id()
        self.line = next(line for line in lines if me in line)
        num_links = self.num_stages * num_chunks - 1
        self._links = {}
        for line in lines:                      # every rank makes every group, in the same order
            for v in range(num_links):
                ranks = [line[v % self.num_stages], line[(v + 1) % self.num_stages]]
                group = dist.new_group(ranks)
                if line is self.line:
                    self._links[v] = group
        for v in range(num_links):              # build the communicators now (see the module docstring)
            group = self._links[v]
            if me in group.ranks:
                dist.all_reduce(oarlock.zeros([1], dtype="int32"), group=group)
        self.new_step()

    def new_step(self) -> None:
        """Forget the metadata: the next forward transfer on each link negotiates it again."""
        self._sent_meta: dict = {}       # link -> metadata this rank sent on it
        self._recv_meta: dict = {}       # link -> metadata this rank received on it
        self._pending: list = []         # (task, tensors) of sends still in flight
        self._posted: dict = {}          # (direction, link) -> [(micro_batch, buffers, task, ahead)] posted
        self.received_ahead = 0          # receives of this step that were posted before their action needed them
        self.received_on_demand = 0      # and those posted only by the action that needs them

    # -- ranks -----------------------------------------------------------------------------------------------
    def owner(self, virtual_stage: int) -> int:
        """The global rank holding `virtual_stage` in this rank's pipeline line."""
        return self.line[virtual_stage % self.num_stages]

    def _where(self, virtual_stage: int) -> str:
        stage = virtual_stage % self.num_stages
        extra = f" (virtual stage {virtual_stage})" if self.num_chunks > 1 else ""
        return f"pipeline stage {stage}{extra}, rank {self.owner(virtual_stage)}"

    # -- raw transfers ---------------------------------------------------------------------------------------
    def _isend(self, tensors: list, link: int, peer: int) -> None:
        if not tensors:
            return
        group = self._links[link]
        ops = [dist.P2POp(dist.isend, t, peer, group) for t in tensors]
        tasks = dist.batch_isend_irecv(ops)
        self._pending.append((tasks[0], tensors))
        self._pending = [(task, held) for task, held in self._pending if not task.is_completed()]

    def _irecv(self, buffers: list, link: int, peer_stage: int):
        """Post the receive of `buffers` on `link` from the owner of virtual stage `peer_stage`; its task."""
        ops = [dist.P2POp(dist.irecv, b, self.owner(peer_stage), self._links[link]) for b in buffers]
        return dist.batch_isend_irecv(ops)[0]

    def _wait(self, task, peer_stage: int, waiting: str, what: str) -> None:
        try:
            task.wait()
        except dist.CollectiveTimeoutError as error:
            raise dist.CollectiveTimeoutError(f"{_WHAT}: {waiting} waited too long for {what} from "
                                              f"{self._where(peer_stage)}: {error}") from error

    def _recv(self, buffers: list, link: int, peer_stage: int, waiting: str, what: str) -> list:
        """Receive `buffers` on `link` from the owner of virtual stage `peer_stage` (blocking, watchdog)."""
        if buffers:
            self._wait(self._irecv(buffers, link, peer_stage), peer_stage, waiting, what)
        return buffers

    def _post(self, direction: str, link: int, peer_stage: int, micro_batch: int, specs: list, ahead: bool) -> None:
        queue = self._posted.setdefault((direction, link), [])
        if specs and not any(m == micro_batch for m, _, _, _ in queue):
            buffers = [oarlock.empty(shape, dtype=dtype) for shape, dtype in specs]
            queue.append((micro_batch, buffers, self._irecv(buffers, link, peer_stage), ahead))

    def _take(self, direction: str, link: int, peer_stage: int, micro_batch: int, specs: list, waiting: str,
              what: str) -> list:
        """The buffers of `micro_batch`'s receive on `link` (posted now unless it was posted before), once
        arrived."""
        self._post(direction, link, peer_stage, micro_batch, specs, ahead=False)
        queue = self._posted[(direction, link)]
        if not queue:
            return []
        m, buffers, task, ahead = queue.pop(0)
        if m != micro_batch:   # the executor posts in schedule order, which validate() keeps increasing per link
            raise RuntimeError(f"{_WHAT}: {waiting} expected micro-batch {micro_batch} on its link but micro-batch "
                               f"{m} was posted first")
        if ahead:
            self.received_ahead += 1
        else:
            self.received_on_demand += 1
        self._wait(task, peer_stage, waiting, what)
        return buffers

    def post_forward(self, virtual_stage: int, micro_batch: int, ahead: bool = True) -> None:
        """Post the receive of `virtual_stage`'s input for `micro_batch` (no-op until the link's metadata of this
        step has arrived). `ahead`: posted during an earlier action (counted in received_ahead)."""
        meta = self._recv_meta.get(virtual_stage - 1)
        if meta is not None:
            self._post("F", virtual_stage - 1, virtual_stage - 1, micro_batch,
                       [(shape, dtype) for shape, dtype, _ in meta["tensors"]], ahead)

    def post_backward(self, virtual_stage: int, micro_batch: int, ahead: bool = True) -> None:
        """Post the receive of `virtual_stage`'s output gradients for `micro_batch` (no-op until this rank has
        sent that link's forward metadata this step)."""
        meta = self._sent_meta.get(virtual_stage)
        if meta is not None:
            self._post("B", virtual_stage, virtual_stage + 1, micro_batch,
                       [(shape, dtype) for shape, dtype, stop in meta["tensors"] if not stop], ahead)

    def wait_sends(self) -> None:
        """Wait for every send still in flight (at the end of a step)."""
        pending, self._pending = self._pending, []
        for task, _ in pending:
            try:
                task.wait()
            except dist.CollectiveTimeoutError as error:
                raise dist.CollectiveTimeoutError(f"{_WHAT}: {self._where(self.stage)} waited too long for the next "
                                                  f"or previous stage to take what it sent: {error}") from error

    # -- forward -----------------------------------------------------------------------------------------------
    def send_forward(self, value, virtual_stage: int, micro_batch: int) -> None:
        """Send the output of `virtual_stage` to the owner of the next one (non-blocking)."""
        tensors, spec = flatten(value, f"{_WHAT}: the output of {self._where(virtual_stage)}")
        meta = _meta_of(tensors, spec)
        peer = self.owner(virtual_stage + 1)
        sent = self._sent_meta.get(virtual_stage)
        if sent is None:
            self._sent_meta[virtual_stage] = meta
            payload = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
            self._isend([oarlock.to_tensor(np.array([payload.size], dtype=np.int64)),
                         oarlock.to_tensor(payload.copy())], virtual_stage, peer)
        elif sent != meta:
            raise ValueError(f"{_WHAT}: the output of {self._where(virtual_stage)} for micro-batch {micro_batch} is "
                             f"{self._show(meta)}, but micro-batch 0 of this step gave {self._show(sent)}; every "
                             "micro-batch of a step must give outputs of the same structure, shapes and dtypes")
        self._isend([t.detach() for t in tensors], virtual_stage, peer)

    def recv_forward(self, virtual_stage: int, micro_batch: int):
        """The input of `virtual_stage` (> 0) for `micro_batch`: fresh leaf tensors, each with its sender's
        stop_gradient."""
        link = peer = virtual_stage - 1
        waiting = self._where(virtual_stage)
        meta = self._recv_meta.get(link)
        if meta is None:
            size = self._recv([oarlock.zeros([1], dtype="int64")], link, peer, waiting,
                              f"the input metadata of micro-batch {micro_batch}")[0]
            payload = self._recv([oarlock.zeros([int(size)], dtype="uint8")], link, peer, waiting,
                                 f"the input metadata of micro-batch {micro_batch}")[0]
            meta = self._recv_meta[link] = json.loads(payload.numpy().tobytes().decode())
        buffers = self._take("F", link, peer, micro_batch, [(shape, dtype) for shape, dtype, _ in meta["tensors"]],
                             waiting, f"the input of micro-batch {micro_batch}")
        for buffer, (_, _, stop) in zip(buffers, meta["tensors"]):
            buffer.stop_gradient = stop
        return unflatten(meta["spec"], buffers)

    def input_description(self, virtual_stage: int) -> str:
        """What arrived at `virtual_stage` this step (for errors about a stage that cannot take it)."""
        meta = self._recv_meta.get(virtual_stage - 1)
        return "nothing yet" if meta is None else self._show(meta)

    @staticmethod
    def _show(meta) -> str:
        return describe(meta["spec"], [f"Tensor{shape} {dtype}" for shape, dtype, _ in meta["tensors"]])

    # -- backward ----------------------------------------------------------------------------------------------
    def send_backward(self, grads: list, virtual_stage: int) -> None:
        """Send the gradients of the inputs of `virtual_stage` (those received with stop_gradient=False, in
        order) back to the owner of the previous virtual stage (non-blocking)."""
        self._isend([g.detach() for g in grads], virtual_stage - 1, self.owner(virtual_stage - 1))

    def recv_backward(self, virtual_stage: int, micro_batch: int) -> list:
        """The gradients of the outputs of `virtual_stage` that were sent with stop_gradient=False."""
        meta = self._sent_meta[virtual_stage]
        return self._take("B", virtual_stage, virtual_stage + 1, micro_batch,
                          [(shape, dtype) for shape, dtype, stop in meta["tensors"] if not stop],
                          self._where(virtual_stage), f"the output gradient of micro-batch {micro_batch}")
