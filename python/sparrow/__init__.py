"""sparrow: sparse, bit-exact weight broadcast for RL post-training, from Python.

    import sparrow
    uid = sparrow.get_unique_id()                    # on one rank; share the bytes out of band
    comm = sparrow.Communicator(nranks, uid, rank)   # or sparrow.Communicator.from_env()
    comm.sparse_broadcast(tensor, root=0)            # in place; only the changed elements travel
    sync = sparrow.WeightSync(comm, model.named_parameters(), root=0)
    sync.step()                                      # trainer: push this step; worker: receive it

Buffers are torch tensors or numpy arrays, used in place (no copies): they must be contiguous, and a
receiver's must be writable. The GIL is released during every call, so ranks can be Python threads.
Failures raise a subclass of `sparrow.Error` named after sparrow's result code, carrying the
library's message. See docs/python.md.
"""

from __future__ import annotations

import json
import contextlib
import os
import socket
import time
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from . import _sparrow
from . import rendezvous

__all__ = [
    "get_unique_id", "version", "setting", "Communicator", "WeightSync", "Piece", "Error", "UnhandledCudaError", "SystemError",
    "InternalError", "InvalidArgument", "InvalidUsage", "RemoteError", "InProgress", "Timeout", "PeerLost",
    "VersionMismatch", "CorruptData", "AuthError", "UNIQUE_ID_BYTES", "DTYPES",
]

UNIQUE_ID_BYTES: int = _sparrow.UNIQUE_ID_BYTES
_v = _sparrow.version()
__version__: str = f"{_v // 10000}.{_v // 100 % 100}.{_v % 100}"  # the loaded library's
del _v


# ---- errors ----------------------------------------------------------------------------------------

class Error(RuntimeError):
    """A sparrow call failed. `code` is the sparrowResult_t value, `message` the library's text."""

    code: int = -1

    def __init__(self, message: str, code: Optional[int] = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class UnhandledCudaError(Error):
    code = 1


class SystemError(Error):  # noqa: A001 - named after sparrowSystemError
    code = 2


class InternalError(Error):
    code = 3


class InvalidArgument(Error, ValueError):
    code = 4


class InvalidUsage(Error):
    code = 5


class RemoteError(Error):
    code = 6


class InProgress(Error):
    code = 7


class Timeout(Error, TimeoutError):
    code = 8


class PeerLost(Error, ConnectionError):
    code = 9


class VersionMismatch(Error):
    code = 10


class CorruptData(Error):
    code = 11


class AuthError(Error, PermissionError):
    code = 12


_ERRORS = {cls.code: cls for cls in (UnhandledCudaError, SystemError, InternalError, InvalidArgument, InvalidUsage,
                                     RemoteError, InProgress, Timeout, PeerLost, VersionMismatch, CorruptData,
                                     AuthError)}


def _raise(code: int, message: str) -> None:
    cls = _ERRORS.get(code, Error)
    name = _sparrow.error_string(code)
    if not message:
        message = name
    elif not message.startswith(name):  # the library's messages already start with the code's name
        message = f"{name}: {message}"
    raise cls(message, code)


def _check(code: int, message_fn) -> None:
    if code != 0:
        _raise(code, message_fn())


# ---- buffers ---------------------------------------------------------------------------------------

# sparrowDataType_t values (== ncclDataType_t).
DTYPES: Dict[str, int] = {
    "int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5,
    "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9,
}


def _torch():
    try:
        import torch  # noqa: F401
        return torch
    except ImportError:
        return None


class _Buffer:
    """Address, element count and sparrow dtype of a tensor or array, and the CUDA stream to order on."""

    __slots__ = ("obj", "ptr", "count", "dtype", "stream", "what")

    def __init__(self, obj: Any, writable: bool, what: str):
        self.obj = obj  # keeps the memory alive while a group is open
        self.what = what
        self.stream = 0
        torch = _torch()
        if torch is not None and isinstance(obj, torch.Tensor):
            name = str(obj.dtype).replace("torch.", "")
            if name not in DTYPES:
                raise InvalidArgument(f"{what}: torch dtype {obj.dtype} is not supported "
                                      f"(supported: {', '.join(DTYPES)})", 4)
            if not obj.is_contiguous():
                raise InvalidArgument(f"{what}: tensor is not contiguous; sparrow works in place on the tensor's own "
                                      "memory (pass a contiguous tensor, e.g. one made with .contiguous())", 4)
            if obj.is_cuda:
                self.stream = torch.cuda.current_stream(obj.device).cuda_stream
            elif obj.device.type != "cpu":
                raise InvalidArgument(f"{what}: tensors on {obj.device.type} are not supported (cpu or cuda)", 4)
            self.ptr = obj.data_ptr()
            self.count = obj.numel()
            self.dtype = DTYPES[name]
            return
        ai = getattr(obj, "__array_interface__", None)
        if ai is None:
            raise InvalidArgument(f"{what}: expected a torch.Tensor or a numpy array, got {type(obj).__name__}", 4)
        import numpy as np
        arr = obj
        if not isinstance(arr, np.ndarray):
            arr = np.asarray(obj)
        name = arr.dtype.name
        if name not in DTYPES or arr.dtype.byteorder not in ("=", "|", "<"):
            raise InvalidArgument(f"{what}: numpy dtype {arr.dtype} is not supported (supported: "
                                  f"{', '.join(n for n in DTYPES if n != 'bfloat16')})", 4)
        if not arr.flags["C_CONTIGUOUS"]:
            raise InvalidArgument(f"{what}: array is not C-contiguous (use numpy.ascontiguousarray first)", 4)
        if writable and not arr.flags["WRITEABLE"]:
            raise InvalidArgument(f"{what}: array is read-only, but this rank receives into it", 4)
        self.ptr = arr.__array_interface__["data"][0]
        self.count = arr.size
        self.dtype = DTYPES[name]


# ---- communicator ----------------------------------------------------------------------------------

def get_unique_id() -> bytes:
    """A new communicator id (128 bytes). Call it on one rank and share the bytes with the others
    (it is a credential: it carries the secret every connection proves it knows). This process serves
    the rendezvous until every rank has joined."""
    rc, data = _sparrow.get_unique_id()
    if rc != 0:
        _raise(rc, data.decode(errors="replace"))
    return data


def version() -> int:
    """The loaded library's version code (major * 10000 + minor * 100 + patch)."""
    return _sparrow.version()


def setting(name: str) -> str:
    """The value of setting SPARROW_<name> (e.g. "TIMEOUT_S") as the library resolves it (environment,
    config file, default), in canonical form: integers in decimal with K/M/G applied, booleans as
    "0"/"1". Raises InvalidArgument for an unknown name or a value the library rejects."""
    rc, value = _sparrow.setting(name)
    if rc != 0:
        _raise(rc, value)
    return value


def _env_int(names: Tuple[str, ...], what: str) -> int:
    for n in names:
        v = os.environ.get(n)
        if v is not None:
            try:
                return int(v)
            except ValueError:
                raise InvalidArgument(f"{n}={v!r} is not an integer ({what})", 4) from None
    raise InvalidArgument(f"{what}: none of {', '.join(names)} is set", 4)


_PORT_HINT = ("initialise torch.distributed first (sparrow then shares the id through its store), pass "
              "from_env(store=...) a torch.distributed Store, or set SPARROW_MASTER_PORT to a port nothing else uses")
_RV_CODES = {"usage": InvalidUsage.code, "auth": AuthError.code, "timeout": Timeout.code}


def _rendezvous_key(addr: str) -> Optional[bytes]:
    """The key that authenticates the id exchange (SPARROW_SECRET_FILE), or None on a loopback
    MASTER_ADDR, where only processes of this user are served. Off the host without the file, refused."""
    path = setting("SECRET_FILE")
    if path:
        return rendezvous.read_key(path)
    if not rendezvous.is_loopback(addr):
        raise rendezvous.RendezvousError(
            f"MASTER_ADDR={addr} is not this host: the communicator id travels over MASTER_PORT, and without "
            f"SPARROW_SECRET_FILE nothing proves who fetches it. Set SPARROW_SECRET_FILE to a file (mode 600) "
            f"with the same secret on every rank, or share the id through torch.distributed: {_PORT_HINT}", "usage")
    return None


def _share_id(rank: int, addr: str, port: int, timeout: float) -> Tuple[bytes, Any]:
    """Rank 0 makes the id and serves it on one TCP port (like torch.distributed's MASTER_ADDR/MASTER_PORT
    store) from a thread, while it goes on to the rendezvous (where a rank that disagrees on the size
    is named at once); every other rank fetches it. Each connection proves itself first
    (sparrow/rendezvous.py). (uid, server): close the server once the communicator exists (None on
    other ranks)."""
    try:
        key = _rendezvous_key(addr)
        if rank != 0:
            return rendezvous.fetch(rank, addr, port, timeout, key, UNIQUE_ID_BYTES, _PORT_HINT), None
    except rendezvous.RendezvousError as e:
        code = _RV_CODES[e.kind]
        raise _ERRORS[code](str(e), code) from None
    uid = get_unique_id()
    import sys
    try:
        srv, _thread = rendezvous.start_server(addr, port, uid, timeout, key,
                                               lambda m: print(m, file=sys.stderr, flush=True))
    except OSError as e:
        raise InvalidUsage(f"rank 0 cannot serve the communicator id on {addr}:{port} ({e.strerror}; another "
                           f"service, e.g. torch.distributed's store, may hold it): {_PORT_HINT}", 5) from None
    return uid, srv


_store_ids = 0  # communicators made through a torch.distributed store by this process (the key's number)


def _share_id_by_store(store: Any, rank: int, timeout: float) -> bytes:
    """The id through a torch.distributed Store (set by rank 0, read by the others): no second port.
    Every rank must make its communicators through the store in the same order."""
    global _store_ids
    _store_ids += 1
    key = f"sparrow/unique_id/{_store_ids}"
    if rank == 0:
        uid = get_unique_id()
        store.set(key, uid)
        return uid
    try:
        import datetime
        store.set_timeout(datetime.timedelta(seconds=timeout))
    except (AttributeError, RuntimeError):
        pass
    try:
        uid = bytes(store.get(key))
    except RuntimeError as e:  # the store's own timeout or a closed store
        raise Timeout(f"rank {rank}: the communicator id did not appear in the torch.distributed store under "
                      f"{key!r} within {timeout:g} s ({e})", 8) from None
    if len(uid) != UNIQUE_ID_BYTES:
        raise InvalidUsage(f"rank {rank}: the torch.distributed store's {key!r} holds {len(uid)} bytes, not a "
                           f"sparrow id", 5)
    return uid


def _default_torch_store() -> Any:
    """The default process group's store when torch.distributed is initialised, else None."""
    import sys
    torch = sys.modules.get("torch")  # only if the program imported it: no import cost otherwise
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    try:
        from torch.distributed import distributed_c10d
        return distributed_c10d._get_default_store()
    except (ImportError, AttributeError, RuntimeError):
        return None


def _master_port() -> int:
    name = "SPARROW_MASTER_PORT" if "SPARROW_MASTER_PORT" in os.environ else "MASTER_PORT"
    port_s = os.environ.get(name, "29500")
    try:
        port = int(port_s)
    except ValueError:
        raise InvalidArgument(f"{name}={port_s!r} is not a port number", 4) from None
    if not 0 < port < 65536:
        raise InvalidArgument(f"{name}={port} is not in 1..65535", 4)
    return port


def _check_lease_and_region(lease_ms: Any, region: Any) -> None:
    if not isinstance(lease_ms, int) or isinstance(lease_ms, bool) or not (lease_ms == 0 or 100 <= lease_ms <= 86400000):
        raise InvalidArgument(f"lease_ms must be 0 (SPARROW_LEASE_MS) or 100..86400000, got {lease_ms!r}", 4)
    if region is not None and (not isinstance(region, str) or not region):
        raise InvalidArgument(f"region must be a non-empty string or None, got {region!r}", 4)


class Communicator:
    """One rank of a sparrow communicator (sparrowCommInitRankConfig). Collective: every rank constructs
    it with the same nranks and id (and the same elastic and lease_ms). Use from one thread at a time;
    a context manager that destroys it.

    elastic=True: a receiver that dies or stays silent past the lease (lease_ms; 0 = SPARROW_LEASE_MS)
    is dropped and sparse_broadcast and broadcast complete for the others (see members()). region: this rank's
    region label (None: SPARROW_REGION or inferred)."""

    def __init__(self, nranks: int, uid: bytes, rank: int, elastic: bool = False, lease_ms: int = 0,
                 region: Optional[str] = None):
        if not isinstance(nranks, int) or isinstance(nranks, bool) or nranks < 1:
            raise InvalidArgument(f"nranks must be a positive integer, got {nranks!r}", 4)
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < nranks:
            raise InvalidArgument(f"rank must be an integer in [0, {nranks}), got {rank!r}", 4)
        if not isinstance(uid, (bytes, bytearray)) or len(uid) != UNIQUE_ID_BYTES:
            raise InvalidArgument(f"uid must be the {UNIQUE_ID_BYTES} bytes of sparrow.get_unique_id()", 4)
        if not isinstance(elastic, bool):
            raise InvalidArgument(f"elastic must be True or False, got {elastic!r}", 4)
        _check_lease_and_region(lease_ms, region)
        self._adopt(_sparrow.Comm(nranks, bytes(uid), rank, elastic, lease_ms, region or ""))

    @classmethod
    def join(cls, uid: bytes, rank: Optional[int] = None, lease_ms: int = 0,
             region: Optional[str] = None) -> "Communicator":
        """A new process joins a running elastic communicator (sparrowCommJoin) into the slot of a
        dropped member, or a vacant one (the ranks set SPARROW_MAX_RANKS): `rank` names it (e.g. the
        rank a restarted worker had), None takes any free one. Returns once rank 0 admitted it, at rank 0's next sparse_broadcast or broadcast; make
        that same call right after: the first brings every buffer whole, later sparse ones deltas.
        lease_ms: 0 or the communicator's. The slot taken is .rank. Raises PeerLost if the slot is
        still held by a live member (after twice the lease), InvalidUsage if the communicator is not
        elastic or no slot freed in time, Timeout if rank 0 made no broadcast meanwhile."""
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 1):
            raise InvalidArgument(f"rank must be None (any free slot) or a slot >= 1, got {rank!r}", 4)
        if not isinstance(uid, (bytes, bytearray)) or len(uid) != UNIQUE_ID_BYTES:
            raise InvalidArgument(f"uid must be the {UNIQUE_ID_BYTES} bytes of sparrow.get_unique_id()", 4)
        _check_lease_and_region(lease_ms, region)
        self = cls.__new__(cls)
        self._adopt(_sparrow.Comm.join(bytes(uid), -1 if rank is None else rank, lease_ms, region or ""))
        return self

    def _adopt(self, c: Any) -> None:
        self._c = c
        if not self._c.alive:
            _raise(self._c.init_result, self._c.init_error)
        self._group_depth = 0
        self._group_keep: List[_Buffer] = []
        self._group_ops: List[Any] = []  # the calls of an open group(), run when it ends
        self._staged_keep: List[_Buffer] = []  # tensors a staged step reads until commit()

    @classmethod
    def from_env(cls, timeout: Optional[float] = None, store: Any = None, **options: Any) -> "Communicator":
        """Rank and size from RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK/SIZE (mpirun) or
        PMI_RANK/PMI_SIZE. The id travels from rank 0 through `store` (a torch.distributed Store),
        else through torch.distributed's default store when it is initialised, else over
        MASTER_ADDR:SPARROW_MASTER_PORT (MASTER_PORT when unset; default 127.0.0.1:29500), as with
        torch.distributed's env:// init. `timeout`: seconds (default SPARROW_TIMEOUT_S). `options`:
        elastic, lease_ms, region, as for the constructor."""
        rank = _env_int(("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"), "this process's rank")
        size = _env_int(("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"), "the number of ranks")
        if not 0 <= rank < size:
            raise InvalidArgument(f"rank {rank} is not in [0, {size})", 4)
        if timeout is None:
            timeout = float(setting("TIMEOUT_S"))
        if store is None:
            store = _default_torch_store()
        server = None
        if store is not None:
            if not (hasattr(store, "set") and hasattr(store, "get")):
                raise InvalidArgument(f"store must be a torch.distributed Store, got {type(store).__name__}", 4)
            uid = _share_id_by_store(store, rank, timeout)
        else:
            addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
            uid, server = _share_id(rank, addr, _master_port(), timeout)
        try:
            return cls(size, uid, rank, **options)
        finally:
            if server is not None:
                server.close()  # every rank fetched the id (or the rendezvous failed)

    # -- identity

    @property
    def rank(self) -> int:
        return self._alive().rank

    @property
    def size(self) -> int:
        return self._alive().size

    def members(self) -> List[int]:
        """The live ranks as this rank last saw them, increasing (every rank unless elastic=True)."""
        rc, live = self._alive().members()
        self._check(rc)
        return live

    def _alive(self):
        if not self._c.alive:
            raise InvalidUsage("the communicator was destroyed or aborted", 5)
        return self._c

    def _check(self, code: int) -> None:
        if code != 0:
            _raise(code, self._c.last_error() if self._c.alive else _sparrow.last_error())

    # -- collectives

    def _buffers(self, tensor: Any, out: Any, root: int, what: str) -> Tuple[_Buffer, _Buffer, int, int]:
        """The buffers of one call and the addresses the C call takes: (src, dst, sendbuff, recvbuff)."""
        c = self._alive()
        if not isinstance(root, int) or isinstance(root, bool) or not 0 <= root < c.size:
            raise InvalidArgument(f"{what}: root must be an integer in [0, {c.size}), got {root!r}", 4)
        me = c.rank
        src = _Buffer(tensor, writable=(me != root and out is None), what=f"{what}: tensor")
        dst = src if out is None else _Buffer(out, writable=True, what=f"{what}: out")
        if dst.count != src.count or dst.dtype != src.dtype:
            raise InvalidArgument(f"{what}: out has {dst.count} elements of dtype {dst.dtype}, tensor "
                                  f"{src.count} of dtype {src.dtype}", 4)
        if self._group_depth:
            self._group_keep += [src, dst]
        send = src.ptr if me == root else 0
        recv = dst.ptr if (me != root or out is not None) else src.ptr
        return src, dst, send, recv

    def sparse_broadcast(self, tensor: Any, root: int = 0, out: Any = None) -> Any:
        """Sparse, bit-exact broadcast (sparrowSparseBcast) of `tensor` from `root`. On the root
        `tensor` is sent (and copied into `out` if given); on the others the result lands in `out`,
        or in `tensor` itself (in place). The first call for a buffer sends it whole, later ones only
        the elements whose bits changed. A receiver's buffer must still hold the previous version: if
        it was modified, VersionMismatch is raised with the buffer untouched, and the next call
        repairs it. Returns the receiving tensor."""
        src, dst, send, recv = self._buffers(tensor, out, root, "sparse_broadcast")
        self._call(_sparrow.OP_SPARSE, send, recv, src, dst, root)
        return dst.obj

    def broadcast(self, tensor: Any, root: int = 0, out: Any = None) -> Any:
        """Dense broadcast (sparrowBroadcast) of `tensor` from `root`, into `out` or in place."""
        src, dst, send, recv = self._buffers(tensor, out, root, "broadcast")
        self._call(_sparrow.OP_DENSE, send, recv, src, dst, root)
        return dst.obj

    def stage(self, tensor: Any, root: int = 0, out: Any = None) -> None:
        """Stage a sparse_broadcast (sparrowSparseBcastStage): on a receiver it returns at once and the
        step is received, verified and decoded in the background, while `tensor` (or `out`) keeps the
        previous version: keep reading it (generating), do not write it. commit() switches it to the
        new version. On the root it is sparse_broadcast. Inside group(), the group is one staged step."""
        src, dst, send, recv = self._buffers(tensor, out, root, "stage")
        self._staged_keep += [src, dst]
        self._call(_sparrow.OP_STAGE, send, recv, src, dst, root)

    def ready(self) -> bool:
        """True once the staged step has been received and verified (or has failed), or when nothing
        is staged. Does not block."""
        code, ready = self._alive().stage_query()
        self._check(code)
        return ready

    def commit(self) -> None:
        """Wait until the staged step is ready, then write it into the staged tensors (time
        proportional to the changes). Raises what sparse_broadcast would (the tensors are then
        unchanged). Nothing staged: returns at once."""
        try:
            self._check(self._alive().stage_commit())
        finally:
            self._staged_keep = []

    def reset(self, tensor: Any) -> None:
        """Forget the sparse state of `tensor` on this rank: its next sparse_broadcast is dense."""
        b = _Buffer(tensor, writable=False, what="reset")
        self._check(self._alive().reset(b.ptr))

    def _call(self, kind: int, send: int, recv: int, src: _Buffer, dst: _Buffer, root: int) -> None:
        """One collective now, or queued for the group's end. The binding runs it interruptibly:
        Ctrl-C (KeyboardInterrupt) aborts the communicator and is raised within about 0.1 s."""
        op = _sparrow.Op(kind, send, recv, src.count, src.dtype, root, src.stream or dst.stream)
        if self._group_depth:
            self._group_ops.append(op)
            return
        self._check(self._c.run([op]))

    @contextlib.contextmanager
    def group(self) -> Iterator["Communicator"]:
        """Calls inside travel as one operation (sparrowGroupStart/End): the sparse broadcasts become
        one checkpoint, one version step for the whole set. Errors surface when the block ends."""
        self._alive()
        self._group_depth += 1
        ok = False
        try:
            yield self
            ok = True
        finally:
            # Always balanced, as in NCCL: the calls queued so far run even if the block raised (the
            # other ranks' calls are collective with them).
            self._group_depth -= 1
            code = 0
            if self._group_depth == 0:
                ops, self._group_ops = self._group_ops, []
                try:
                    if ops:
                        code = self._c.run(ops)
                finally:
                    self._group_keep = []
        if ok:
            self._check(code)

    def stats(self) -> Dict[str, Any]:
        """What the last collective did on this rank: dense_bytes, wire_bytes, changed, density,
        encode_s, apply_s, time_s, full, resyncs (cumulative), ops (count); and for a staged step
        stage_pending, stage_ready, stage_bytes_received, staged_bytes; catch_ups and catch_up_bytes
        (cumulative: resyncs by the deltas a rank missed instead of a snapshot)."""
        return self._alive().stats()

    def peer_stats(self) -> List[Dict[str, Any]]:
        """Per peer this rank exchanged data with in the last operation: rank, bytes_sent,
        bytes_received, first_byte_s and last_byte_s (seconds after the call began; -1: none),
        receive_Bps, rtt_s (from the start-up probe; -1: not measured)."""
        return self._alive().peer_stats()

    def progress(self) -> Dict[str, Any]:
        """bytes_received and bytes_sent since the running (or last) collective began, and in_call.
        Callable from another thread while a collective runs (the binding releases the GIL in it)."""
        return self._alive().progress()

    def stage_times(self) -> Dict[str, Any]:
        """The last operation stage by stage, as sparrowCommGetStatsJson gives it: role, bytes and
        seconds for extract, encode, first_byte, last_byte, verify, decode, commit, total (None where
        a stage is not this rank's), and the peers."""
        return json.loads(self._alive().stats_json())

    def async_error(self) -> Optional[Error]:
        """The first asynchronous error (lost peer, timeout, abort) as an exception object, or None."""
        code = self._alive().async_error()
        return None if code == 0 else _ERRORS.get(code, Error)(self._c.last_error(), code)

    def destroy(self) -> None:
        """Free the communicator (waits, bounded by SPARROW_TIMEOUT_S, for broadcasts this rank rooted
        to be acknowledged). Idempotent; later calls on it raise InvalidUsage."""
        if self._c.alive:
            code = self._c.destroy()
            if code != 0:
                _raise(code, _sparrow.last_error())

    def abort(self) -> None:
        """Fail every pending and future operation and free the communicator; may be called from
        another thread to unblock one that waits."""
        if self._c.alive:
            self._c.abort()

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def __repr__(self) -> str:
        if not self._c.alive:
            return "<sparrow.Communicator (destroyed)>"
        return f"<sparrow.Communicator rank {self._c.rank} of {self._c.size}>"


# ---- a model's tensors as one versioned step -------------------------------------------------------

class Piece:
    """Part of a local tensor that holds a range of a logical (trainer) tensor:
    local[..., offset : offset + (stop - start), ...] along `dim` holds logical[..., start:stop, ...];
    every other dimension is the same in both."""

    __slots__ = ("logical", "dim", "start", "stop", "offset")

    def __init__(self, logical: str, dim: int, start: int, stop: int, offset: int = 0):
        if not isinstance(logical, str) or not logical:
            raise InvalidArgument(f"Piece: logical must be a non-empty name, got {logical!r}", 4)
        for what, v in (("dim", dim), ("start", start), ("stop", stop), ("offset", offset)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise InvalidArgument(f"Piece({logical!r}): {what} must be a non-negative int, got {v!r}", 4)
        if stop <= start:
            raise InvalidArgument(f"Piece({logical!r}): stop ({stop}) must be greater than start ({start})", 4)
        self.logical, self.dim, self.start, self.stop, self.offset = logical, dim, start, stop, offset

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Piece) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, k) for k in self.__slots__))

    def __repr__(self) -> str:
        return f"Piece({self.logical!r}, dim={self.dim}, start={self.start}, stop={self.stop}, offset={self.offset})"


def _shape(t: Any) -> List[int]:
    return [int(d) for d in t.shape]


class WeightSync:
    """A model's tensors, synchronised as one versioned step per call to step() (sparrowModel*).

    The root (trainer) holds the logical model: its named tensors, whole. Every other rank (rollout
    workers) receives in place into its own tensors, matched by name (order-free): a tensor whose
    name is not in `layout` is the whole logical tensor of that name (same shape and dtype); a tensor
    in `layout` holds the listed pieces of logical tensors (fused and/or tensor-parallel; elements
    no piece covers, e.g. vocabulary padding, are never written). The first step agrees on the model:
    a tensor or piece that does not fit the root's raises InvalidUsage on every rank, naming it.
    `sources`: the ranks holding the trainer's weights (default [root]; the same list on every rank,
    the root among them). With several (sharded trainers, FSDP or tensor-parallel), each source passes
    its own tensors: whole logical tensors, tensors holding Pieces along dim 0 (row ranges, fused and
    padded allowed), or one Piece along another dim that fills the tensor (a row-parallel shard);
    together they hold every element exactly once (a replicated tensor, such as a norm, is passed by
    one source). Each source sends its own part; receivers write a version only once
    every source's part of it verified. Staging works with several sources too: a source's stage()
    sends its part, a worker's stages every part and commit() writes them at once. On an elastic
    communicator workers may die or stall and are dropped by every source; a source that is lost
    fails every rank's step (PeerLost naming it), workers keeping the last version. A restarted
    worker that joins (Communicator.join) creates its WeightSync as the first one did; its first
    step() receives the step it was admitted into (the root is rank 0; in a split step it holds its
    slot's layout).
    """

    def __init__(self, comm: Communicator, named_tensors: Iterable[Tuple[str, Any]] | Iterable[Any], root: int = 0,
                 layout: Optional[Dict[str, List[Piece]]] = None, sources: Optional[List[int]] = None):
        self.comm = comm
        self.root = root
        sources = [root] if sources is None else list(sources)
        if not sources or not all(isinstance(s, int) and not isinstance(s, bool) for s in sources):
            raise InvalidArgument(f"WeightSync: sources must be a non-empty list of ranks, got {sources!r}", 4)
        self.sources = sources
        layout = dict(layout or {})
        self.names: List[str] = []
        self.tensors: List[Any] = []
        descs = []
        for i, item in enumerate(named_tensors):
            name, t = item if isinstance(item, tuple) else (f"tensor{i}", item)
            data = getattr(t, "data", t)  # torch.nn.Parameter -> its tensor (same memory)
            buf = _Buffer(data, writable=comm.rank not in sources, what=f"WeightSync: {name}")
            if name in layout and not layout[name]:
                layout.pop(name)  # covered by no piece on this rank (all padding): receives nothing
                continue
            pieces = layout.pop(name, [])
            for p in pieces:
                if not isinstance(p, Piece):
                    raise InvalidArgument(f"WeightSync: layout[{name!r}] must list sparrow.Piece values, got {p!r}", 4)
            descs.append((name, buf.ptr, buf.dtype, _shape(data),
                          [(p.logical, p.dim, p.start, p.stop, p.offset) for p in pieces]))
            self.names.append(name)
            self.tensors.append(data)
        if not self.tensors:
            raise InvalidArgument("WeightSync: no tensors", 4)
        if layout:
            raise InvalidArgument(f"WeightSync: layout names {sorted(layout)!r}, which are not among the tensors", 4)
        self._model = _sparrow.Model(comm._alive(), descs, root, [] if sources == [root] else sources)
        if self._model.init_result != 0:
            _raise(self._model.init_result, self._model.init_error)
        self.steps = 0

    def _check(self, code: int) -> None:
        self.comm._check(code)

    def _info(self) -> Dict[str, Any]:
        info = self.comm.stats()
        info["version"] = self.version
        return info

    def step(self) -> Dict[str, Any]:
        """Push (root) or receive (others) the current version of every tensor as one step; returns
        this rank's stats for it, with "version": the version now held."""
        self._check(self._model.step())
        self.steps += 1
        return self._info()

    def stage(self) -> None:
        """The trainer pushes as in step(); a worker starts receiving the next version in the
        background and keeps generating with the current one until commit()."""
        self._check(self._model.stage())

    def ready(self) -> bool:
        """True once the staged version has been received and verified (does not block)."""
        return self.comm.ready()

    def commit(self) -> Dict[str, Any]:
        """Switch to the staged version (at a safe point, e.g. between generation batches); returns
        this rank's stats for the step, with "version"."""
        self._check(self._model.commit())
        self.steps += 1
        return self._info()

    @property
    def version(self) -> int:
        """The version this rank holds (the root: the last one sent); the same on every rank that
        holds it; 0 before the first step."""
        rc, v = self._model.version()
        self._check(rc)
        return v

    def digest(self, name: str, rows: Optional[Tuple[int, int]] = None) -> int:
        """Content digest of logical tensor `name` as this rank holds it: equal on two ranks exactly
        when they hold the same bits, whatever their layouts or memory (device rows are read back to
        the host for it). `rows=(start, stop)`:
        of those rows (dim 0) only, on any rank that holds them (a tensor-parallel shard receives only
        its own rows; a source holds its own); the digests of rows that tile a tensor add up, mod 2**64,
        to the tensor's. InvalidUsage where this rank does not hold the rows asked for (or, for a
        tensor that tensor-parallel sources split into columns, not every column)."""
        if rows is None:
            rc, d = self._model.digest(name)
        else:
            start, stop = rows
            if not (0 <= int(start) < int(stop)):
                raise ValueError(f"digest rows: (start, stop) with 0 <= start < stop, got {rows!r}")
            rc, d = self._model.digest_rows(name, int(start), int(stop))
        self._check(rc)
        return d

    def close(self) -> None:
        """Frees the model's state (also when the object is collected)."""
        self._model.destroy()

    @property
    def numel(self) -> int:
        return sum(int(t.numel()) if hasattr(t, "numel") and callable(t.numel) else int(t.size) for t in self.tensors)


from . import layouts  # noqa: E402  (sparrow.layouts: engines' tensor layouts as pieces)
