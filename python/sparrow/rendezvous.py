"""How Communicator.from_env shares rank 0's unique id over MASTER_ADDR:SPARROW_MASTER_PORT without
handing it to whoever connects first.

A rank proves itself before rank 0 sends it anything of value, and a connection that does not prove
itself is closed without taking a rank's place:
- with SPARROW_SECRET_FILE (the same secret on every rank; the id then carries no credential), a
  mutual HMAC-SHA256 challenge-response over fresh nonces, on any address;
- without it, only on a loopback MASTER_ADDR: the connecting process must run as rank 0's user
  (the kernel's socket table says who owns the other end of a loopback connection).
A MASTER_ADDR off this host without SPARROW_SECRET_FILE is refused: nothing could authenticate the
exchange (use a torch.distributed store or set the file). See docs/security.md.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import socket
import struct
import threading
import time
from typing import Any, Callable, Optional, Tuple

from . import _sparrow

MAGIC = b"SPRWID02"  # rank 0's first bytes: a rank that reached another service says so
_FILE_AUTH, _SAME_USER = 1, 0
_NONCE = 16
_HANDSHAKE_S = 5.0  # how long one connection may take to prove itself


class RendezvousError(Exception):
    """Raised with (message, kind): kind 'usage' (a setting), 'auth' (a peer failed to prove itself),
    'timeout'. The package turns it into its own exception classes."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def read_key(path: str) -> bytes:
    """The rendezvous key from SPARROW_SECRET_FILE's contents: the library derives it
    (sparrowSecretFileKey, label "sparrow rendezvous v1") after its own checks of the file (a
    regular file, not a link, no access for group or others, 16 bytes to 64 KiB), so the Python
    rendezvous refuses exactly the files the communicator refuses, with the same reasons."""
    rc, out = _sparrow.secret_file_key(path, "sparrow rendezvous v1")
    if rc != 0:
        raise RendezvousError(out.decode(errors="replace"), "usage")
    return out


def is_loopback(addr: str) -> bool:
    """Whether every address `addr` resolves to is this host's loopback."""
    try:
        infos = socket.getaddrinfo(addr, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback for i in infos)


def _proc_hex(ip: str, port: int) -> str:
    """An address as /proc/net/tcp{,6} writes it (each 32-bit word in host order, little-endian here)."""
    packed = socket.inet_pton(socket.AF_INET6 if ":" in ip else socket.AF_INET, ip)
    words = [packed[i:i + 4][::-1].hex().upper() for i in range(0, len(packed), 4)]
    return "".join(words) + f":{port:04X}"


def loopback_peer_uid(conn: socket.socket) -> Optional[int]:
    """The uid owning the other end of a loopback TCP connection, from the kernel's socket table."""
    peer, local = conn.getpeername(), conn.getsockname()
    want_local, want_remote = _proc_hex(peer[0], peer[1]), _proc_hex(local[0], local[1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[1] == want_local and cols[2] == want_remote:
                        return int(cols[7])
        except OSError:
            continue
    return None


def _mac(key: bytes, label: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, label + b"".join(parts), hashlib.sha256).digest()


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def _hand_out(conn: socket.socket, uid: bytes, key: Optional[bytes]) -> Optional[str]:
    """One connection to rank 0's port: the id if the peer proves itself (None), else why not."""
    conn.settimeout(_HANDSHAKE_S)
    if key is None:
        if loopback_peer_uid(conn) != os.getuid():
            return "the connecting process does not run as this user"
        conn.sendall(MAGIC + bytes([_SAME_USER]) + uid)
        return None
    nonce_s = os.urandom(_NONCE)
    conn.sendall(MAGIC + bytes([_FILE_AUTH]) + nonce_s)
    msg = _recv_exact(conn, 4 + _NONCE + 32)
    if len(msg) != 4 + _NONCE + 32:
        return "it sent no proof"
    rank_b, nonce_c, proof = msg[:4], msg[4:4 + _NONCE], msg[4 + _NONCE:]
    if not hmac.compare_digest(proof, _mac(key, b"client", nonce_s, nonce_c, rank_b)):
        return "wrong proof: it does not hold the SPARROW_SECRET_FILE secret"
    conn.sendall(_mac(key, b"server", nonce_s, nonce_c, rank_b) + uid)
    return None


def serve(srv: socket.socket, uid: bytes, timeout: float, key: Optional[bytes], warn: Callable[[str], None]) -> None:
    """Hands the id to every connection that proves itself, until `timeout` or until `srv` is closed
    (from_env closes it once the communicator exists, i.e. once every rank fetched the id). Nothing
    is counted, so no connection, proven or not, can take a rank's place."""
    deadline = time.monotonic() + timeout
    with srv:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                srv.settimeout(left)
                conn, peer = srv.accept()
            except OSError:  # timed out, or closed by from_env once the communicator exists
                return
            with conn:
                try:
                    why = _hand_out(conn, uid, key)
                except OSError as e:
                    why = f"the connection failed ({e})"
            if why is not None:
                warn(f"sparrow: refused a connection to the id port from {peer[0]}:{peer[1]}: {why}")


def _fetch_once(s: socket.socket, rank: int, key: Optional[bytes], id_bytes: int,
                where: str, hint: str) -> Optional[bytes]:
    head = _recv_exact(s, len(MAGIC) + 1)
    if not MAGIC.startswith(head[:len(MAGIC)]):
        raise RendezvousError(f"rank {rank}: {where} is not sparrow's rank 0 serving the communicator id "
                              f"(another service answered): {hint}", "usage")
    if len(head) < len(MAGIC) + 1:
        return None
    mode = head[-1]
    if mode == _SAME_USER:
        if key is not None:
            raise RendezvousError(f"rank {rank}: rank 0 at {where} has no SPARROW_SECRET_FILE, this rank has one: "
                                  f"set the same file on every rank", "usage")
        uid = _recv_exact(s, id_bytes)
        return uid if len(uid) == id_bytes else None
    if key is None:
        raise RendezvousError(f"rank {rank}: rank 0 at {where} authenticates the id exchange with "
                              f"SPARROW_SECRET_FILE: set the same file on this rank", "usage")
    nonce_s = _recv_exact(s, _NONCE)
    nonce_c, rank_b = os.urandom(_NONCE), struct.pack("<I", rank)
    s.sendall(rank_b + nonce_c + _mac(key, b"client", nonce_s, nonce_c, rank_b))
    reply = _recv_exact(s, 32 + id_bytes)
    if len(reply) == 0:
        raise RendezvousError(f"rank {rank}: rank 0 at {where} refused this rank's proof: its "
                              f"SPARROW_SECRET_FILE holds another secret", "auth")
    if len(reply) != 32 + id_bytes:
        return None
    if not hmac.compare_digest(reply[:32], _mac(key, b"server", nonce_s, nonce_c, rank_b)):
        raise RendezvousError(f"rank {rank}: the process at {where} does not hold the SPARROW_SECRET_FILE "
                              f"secret: it is not this job's rank 0", "auth")
    return reply[32:]


def fetch(rank: int, addr: str, port: int, timeout: float, key: Optional[bytes], id_bytes: int,
          hint: str) -> bytes:
    """Rank `rank` (> 0) fetches the id from rank 0, retrying until rank 0 listens or `timeout`."""
    deadline = time.monotonic() + timeout
    where = f"{addr}:{port}"
    last = None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((addr, port), timeout=max(0.1, deadline - time.monotonic())) as s:
                uid = _fetch_once(s, rank, key, id_bytes, where, hint)
                if uid is not None:
                    return uid
                last = "the connection ended early"
        except OSError as e:  # rank 0 not listening yet
            last = str(e)
        time.sleep(0.05)
    raise RendezvousError(f"rank {rank}: could not fetch the communicator id from {where} within {timeout:g} s "
                          f"({last}); if torch.distributed uses that port: {hint}", "timeout")


def start_server(addr: str, port: int, uid: bytes, timeout: float, key: Optional[bytes],
                 warn: Callable[[str], None]) -> Tuple[socket.socket, Any]:
    """Rank 0's id port, served from a daemon thread. Raises OSError when the port is taken."""
    srv = socket.create_server((addr, port), reuse_port=False)
    th = threading.Thread(target=serve, args=(srv, uid, timeout, key, warn), daemon=True,
                          name="sparrow-id-server")
    th.start()
    return srv, th
