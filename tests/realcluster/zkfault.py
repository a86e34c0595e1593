"""zkfault.py: a ZooKeeper-protocol-aware TCP fault proxy for the real-cluster rig (KAFKA-21062, issue 26).

ZkFaultProxy(target_port) listens on a free 127.0.0.1 port and forwards each client connection to ZooKeeper,
reading both directions as ZooKeeper's frames (a 4-byte big-endian length, then a jute record).  After the
connect handshake (one frame each way, no header) a request starts with its header (xid int32, type int32) and a
reply with its header (xid int32, zxid int64, err int32).

arm() makes it drop exactly one reply: that to the next multi (type 14) whose ops name /migration.  The request
passes, so ZooKeeper applies the write; when the reply with the request's xid comes back, it is not forwarded and
the client's connection is closed.  The client reconnects within its session and retries the multi: the write
landed, the ack is lost.  status() lists what was dropped (xid, zxid, err of the swallowed reply).
"""
import socket
import struct
import threading
import time

MULTI = 14
MIGRATION = b"/migration"


def read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def read_frame(sock):
    head = read_exact(sock, 4)
    if head is None:
        return None
    (length,) = struct.unpack(">i", head)
    body = read_exact(sock, length) if length > 0 else b""
    return None if body is None else head + body


class Link:
    """One client connection and its ZooKeeper connection."""

    def __init__(self, proxy, client):
        self.proxy, self.client = proxy, client
        self.server = socket.create_connection(("127.0.0.1", proxy.target_port))
        self.drop_xid = None  # the armed multi's xid on this link
        self.closed = False

    def close(self):
        self.closed = True
        for s in (self.client, self.server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def pump(self, src, dst, inspect):
        """Forwards src's frames to dst; inspect(frame) of every frame after the handshake's says whether to pass
        it (False: the link closes without it)."""
        first = True
        while not self.closed:
            try:
                frame = read_frame(src)
            except OSError:
                frame = None
            if frame is None or (not first and not inspect(frame)):
                break
            first = False
            try:
                dst.sendall(frame)
            except OSError:
                break
        self.close()

    def request(self, frame):
        if len(frame) >= 12:
            xid, kind = struct.unpack(">ii", frame[4:12])
            if kind == MULTI and MIGRATION in frame[12:] and self.proxy.take_arm():
                self.drop_xid = xid
                self.proxy.note("armed multi xid %d (%d bytes) passes to ZooKeeper" % (xid, len(frame)))
        return True

    def reply(self, frame):
        if len(frame) >= 20 and self.drop_xid is not None:
            xid, zxid, err = struct.unpack(">iqi", frame[4:20])
            if xid == self.drop_xid:
                self.proxy.dropped({"xid": xid, "zxid": zxid, "err": err, "at": time.time()})
                return False  # the reply is never forwarded; the client's connection closes
        return True


class ZkFaultProxy:
    def __init__(self, target_port, log=None):
        self.target_port = target_port
        self.log = log or (lambda msg: None)
        self.lock = threading.Lock()
        self.armed = 0
        self.drops = []
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                link = Link(self, client)
            except OSError as e:
                self.note("cannot reach ZooKeeper: %s" % e)
                client.close()
                continue
            threading.Thread(target=link.pump, args=(client, link.server, link.request), daemon=True).start()
            threading.Thread(target=link.pump, args=(link.server, client, link.reply), daemon=True).start()

    def note(self, msg):
        self.log("zkfault: " + msg)

    def arm(self):
        with self.lock:
            self.armed += 1

    def take_arm(self):
        with self.lock:
            if self.armed <= 0:
                return False
            self.armed -= 1
            return True

    def dropped(self, what):
        with self.lock:
            self.drops.append(what)
        self.note("dropped the reply to multi xid %(xid)d (zxid %(zxid)d, err %(err)d); client connection closed"
                  % what)

    def status(self):
        with self.lock:
            return {"port": self.port, "armed": self.armed, "drops": list(self.drops)}
