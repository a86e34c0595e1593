#!/usr/bin/env python3
"""rig.py: a real Kafka 3.9 cluster in ZooKeeper-to-KRaft migration on 127.0.0.1, for the real-cluster tests.

    rig.py up --dir DIR [--controllers N] [--brokers N | --broker-ids ID,...] [--cache CACHE] [--before-kafka CMD]
               [--controller-prop KEY=VALUE ...]

One ZooKeeper, N ZK-mode brokers (migration enabled) and N KRaft controllers in migration mode, all of Apache
Kafka's released jars (tests/realcluster/fetch-kafka), on free ports.  It waits until the active controller's
KRaftMigrationDriver reaches DUAL_WRITE and /migration holds the initial migration, then prints one line
`ready {json}` (ports, ids, pids, the start time and the processes' RSS) and serves commands, one a line on stdin
(below).  --before-kafka CMD: a shell command run once ZooKeeper serves and /cluster/id is written, before any
broker or controller starts ($KM_RIG_ZK: ZooKeeper's host:port, $KM_RIG_CLUSTER_ID: the cluster id, $KM_RIG_CP:
the java/ tools' classes and Kafka's jars); what it leaves in ZooKeeper is what the cluster starts on
(test_roundtrip_controller: what `kmproxy zk sync` wrote, for the controller to migrate).  --controller-prop
KEY=VALUE (repeatable) adds a key to the controllers' server.properties; --broker-ids 1,2 names the brokers.

    kill KIND ID      SIGKILL one broker or controller (KIND: broker, controller)
    start KIND ID     start it again on the same ports and data, wait until it serves
    stop KIND ID      SIGTERM and wait (a clean shutdown)
    zk PATH           the znode's data
    kraft broker ID   restart a ZK-mode broker as a KRaft broker (process.roles=broker, same node.id, the quorum's
                      keys, no zookeeper.connect): Kafka's "migrating brokers to KRaft" step
    zkfault arm       (--zk-fault, --zk-fault-idle) drop the reply to the next multi writing /migration (zkfault.py)
    zkfault status    (--zk-fault, --zk-fault-idle) the fault proxy's port and what it dropped, JSON
    rss               the processes' resident memory, KiB
    down              tear everything down (also on stdin's end: the test that started the rig is gone)

Each answer is one line, `ok ...` or `err ...`.  Every process runs in its own process group, dies with the rig
(PR_SET_PDEATHSIG) and is killed with its group at the end.  Logs stay under DIR/<node>/server.log.
"""
import argparse
import base64
import ctypes
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import zkfault

HERE = os.path.dirname(os.path.abspath(__file__))
JVM = ["-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
       "-XX:MaxMetaspaceSize=192m", "-Djava.awt.headless=true"]
WAIT_S = float(os.environ.get("KM_RIG_WAIT_S", "300"))
LOG4J = """log4j.rootLogger=INFO, F
log4j.appender.F=org.apache.log4j.FileAppender
log4j.appender.F.File={log}
log4j.appender.F.layout=org.apache.log4j.PatternLayout
log4j.appender.F.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.metadata.migration=DEBUG
log4j.logger.kafka.zk.migration=DEBUG
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=INFO
log4j.logger.org.apache.kafka.controller.ReplicationControlManager=DEBUG
"""


def log(msg):
    print("rig: " + msg, file=sys.stderr, flush=True)


def ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


_handed_out = set()


def free_port():
    """A port Kafka or ZooKeeper will bind a moment later.  Not one of the kernel's ephemeral ports: there any
    outgoing connection on the machine (the tests run two at a time, each with clients) may take it between this
    check and the JVM's bind, which CI saw as a broker dying with 'Address already in use'.  Drawn at random below
    the ephemeral range, bindable now, never twice in one rig."""
    lo, hi = ephemeral_range()
    top = lo - 1 if lo > 12000 else 65535
    bottom = 10000 if lo > 12000 else hi + 1
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randint(bottom, top)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free port between %d and %d after 200 tries" % (bottom, top))


def die_with_parent():
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def props(d):
    return "".join("%s=%s\n" % kv for kv in d.items())


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


TOKEN_SECRET = "kmproxy-rig-delegation-token-key"  # --secure: brokers and controllers share it (tokens' HMAC)


class Node:
    def __init__(self, rig, kind, nid, port):
        self.rig, self.kind, self.nid, self.port = rig, kind, nid, port
        self.dir = os.path.join(rig.dir, "%s-%d" % (kind, nid))
        self.log = os.path.join(self.dir, "server.log")
        self.proc = None
        os.makedirs(self.dir, exist_ok=True)

    def name(self):
        return "%s %d" % (self.kind, self.nid)

    def spawn(self, main, args):
        out = open(os.path.join(self.dir, "stdout.log"), "ab")
        cmd = ["java"] + JVM + ["-Dlog4j.configuration=file:" + os.path.join(self.dir, "log4j.properties"),
                                "-cp", self.rig.classpath, main] + args
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     preexec_fn=die_with_parent, cwd=self.dir)
        out.close()

    def start(self):
        self.log_mark = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        self.spawn(*self.command())

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def log_since_start(self):
        try:
            with open(self.log, errors="replace") as f:
                f.seek(self.log_mark)
                return f.read()
        except OSError:
            return ""

    def wait_log(self, needle, what):
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if needle in self.log_since_start():
                return
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %s before %s" % (self.name(), self.proc.returncode, what))
            time.sleep(0.2)
        raise RuntimeError("%s: no %s within %.0f s" % (self.name(), what, WAIT_S))


class ZooKeeper(Node):
    def command(self):
        write(os.path.join(self.dir, "zoo.cfg"), props({
            "dataDir": os.path.join(self.dir, "data"), "clientPort": self.port, "clientPortAddress": "127.0.0.1",
            "tickTime": 2000, "maxSessionTimeout": 60000, "4lw.commands.whitelist": "*",
            "admin.enableServer": "false"}))
        write(os.path.join(self.dir, "log4j.properties"), LOG4J.format(log=self.log))
        return "org.apache.zookeeper.server.ZooKeeperServerMain", [os.path.join(self.dir, "zoo.cfg")]

    def wait_ready(self):
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                    s.sendall(b"ruok")
                    if s.recv(16) == b"imok":
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("ZooKeeper exited with %s" % self.proc.returncode)
            time.sleep(0.2)
        raise RuntimeError("ZooKeeper not serving within %.0f s" % WAIT_S)


class KafkaNode(Node):
    """A broker or a controller: kafka.Kafka with its server.properties."""

    def server_config(self):
        return self.config()  # a broker restarted in KRaft mode says otherwise

    def command(self):
        write(os.path.join(self.dir, "server.properties"), props(self.server_config()))
        write(os.path.join(self.dir, "log4j.properties"), LOG4J.format(log=self.log))
        return "kafka.Kafka", [os.path.join(self.dir, "server.properties")]


class Broker(KafkaNode):
    def config(self):
        r = self.rig
        c = {
            "broker.id": self.nid,
            "listeners": "PLAINTEXT://127.0.0.1:%d" % self.port,
            "advertised.listeners": "PLAINTEXT://127.0.0.1:%d" % self.port,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "zookeeper.connect": r.zk_connect(),
            "zookeeper.session.timeout.ms": 30000,
            "inter.broker.protocol.version": "3.9",
            # KIP-866: a ZK-mode broker in migration registers with the KRaft quorum too
            "zookeeper.metadata.migration.enable": "true",
            "controller.quorum.voters": r.voters(),
            "controller.listener.names": "CONTROLLER",
            "log.dirs": os.path.join(self.dir, "logs"),
            "num.partitions": 1, "default.replication.factor": 3, "min.insync.replicas": 2,
            "offsets.topic.replication.factor": min(3, len(r.brokers)),
            "offsets.topic.num.partitions": 3,
            "transaction.state.log.replication.factor": min(3, len(r.brokers)),
            "transaction.state.log.min.isr": min(2, len(r.brokers)),
            "transaction.state.log.num.partitions": 3,
            "group.initial.rebalance.delay.ms": 0,
            "num.network.threads": 2, "num.io.threads": 2, "num.recovery.threads.per.data.dir": 1,
            "background.threads": 2, "log.cleaner.enable": "false",
            "auto.create.topics.enable": "false", "delete.topic.enable": "true",
            "auto.leader.rebalance.enable": "false", "unclean.leader.election.enable": "false",
            "replica.lag.time.max.ms": 30000,
            "file.delete.delay.ms": 1000,  # a deleted topic's logs go soon after its StopReplica
            # ACLs, kept in ZooKeeper by ZK-mode brokers; the tests' clients are ANONYMOUS, a super user
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS", "allow.everyone.if.no.acl.found": "true",
        }
        if r.secure:
            c.update(self.secure_config())
        return c

    def secure_config(self):
        """--secure: two more listeners, SASL_PLAINTEXT and SASL_SSL, each with SCRAM-SHA-256 (credentials from
        ZooKeeper, which the tests create through the Admin API; delegation tokens too, tokenauth=true) and PLAIN (user alice, password plain-secret, from
        the JAAS line); the certificate is the rig's self-signed one for 127.0.0.1 (DIR/tls/cert.pem, PEM keystore).
        alice is a super user, as ANONYMOUS is on the PLAINTEXT listener."""
        r, scram = self.rig, "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        plain = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="plain-secret";'
        ends = "PLAINTEXT://127.0.0.1:%d,SASL_PLAINTEXT://127.0.0.1:%d,SASL_SSL://127.0.0.1:%d" % (
            self.port, self.sasl_port, self.ssl_port)
        c = {"listeners": ends, "advertised.listeners": ends,
             "listener.security.protocol.map":
                 "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
             "sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN",
             "ssl.keystore.type": "PEM", "ssl.keystore.location": r.tls_keystore,
             "super.users": "User:ANONYMOUS;User:alice",
             "delegation.token.secret.key": TOKEN_SECRET}
        for listener in ("sasl_plaintext", "sasl_ssl"):
            c["listener.name.%s.scram-sha-256.sasl.jaas.config" % listener] = scram
            c["listener.name.%s.plain.sasl.jaas.config" % listener] = plain
        return c

    def kraft_config(self):
        c = self.config()
        for key in ("broker.id", "zookeeper.connect", "zookeeper.session.timeout.ms", "inter.broker.protocol.version",
                    "zookeeper.metadata.migration.enable"):
            del c[key]
        # AclAuthorizer reads ZooKeeper: a KRaft broker takes its ACLs from the metadata log
        c.update({"process.roles": "broker", "node.id": self.nid,
                  "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
        return c

    def server_config(self):
        return self.kraft_config() if getattr(self, "kraft", False) else self.config()

    def wait_ready(self):
        if getattr(self, "kraft", False):
            self.wait_log("Kafka Server started", "start in KRaft mode")
        else:
            self.wait_log("[KafkaServer id=%d] started" % self.nid, "start")


class Controller(KafkaNode):
    def config(self):
        r = self.rig
        c = {
            "process.roles": "controller",
            "node.id": self.nid,
            "listeners": "CONTROLLER://127.0.0.1:%d" % self.port,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": r.voters(),
            "log.dirs": os.path.join(self.dir, "metadata"),
            # KIP-866: the controllers migrate ZooKeeper's metadata and dual-write it
            "zookeeper.metadata.migration.enable": "true",
            "zookeeper.connect": r.controller_zk_connect(),
            "zookeeper.session.timeout.ms": 30000,
            "num.io.threads": 2, "num.network.threads": 2, "background.threads": 2,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS", "allow.everyone.if.no.acl.found": "true",
            **r.controller_props,
        }
        if r.secure:  # the KRaft controller creates the tokens the brokers forward it; both sign them with this key
            c["delegation.token.secret.key"] = TOKEN_SECRET
        return c

    def format(self):
        self.command()
        out = subprocess.run(["java"] + JVM + ["-Dlog4j.configuration=file:" + os.path.join(self.dir, "log4j.properties"),
                                               "-cp", self.rig.classpath, "kafka.tools.StorageTool", "format",
                                               "-t", self.rig.cluster_id, "-c",
                                               os.path.join(self.dir, "server.properties"), "--ignore-formatted"],
                             capture_output=True, text=True, preexec_fn=die_with_parent)
        if out.returncode:
            raise RuntimeError("formatting controller %d: %s %s" % (self.nid, out.stdout, out.stderr))

    def wait_ready(self):
        self.wait_log("Kafka Server started", "start")


class Rig:
    def __init__(self, args):
        self.dir = os.path.abspath(args.dir)
        os.makedirs(self.dir, exist_ok=True)
        lib = os.path.join(args.cache, "lib")
        jars = sorted(os.path.join(lib, j) for j in os.listdir(lib) if j.endswith(".jar"))
        self.classpath = ":".join(jars)
        self.tool_classes = self.compile_tools(args.cache)
        self.cluster_id = "-"
        while self.cluster_id.startswith("-"):  # as Kafka's Uuid.randomUuid: a leading '-' reads as an option
            self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.zk = ZooKeeper(self, "zookeeper", 0, free_port())
        ids = [int(i) for i in args.broker_ids.split(",")] if args.broker_ids else range(args.brokers)
        self.brokers = [Broker(self, "broker", i, free_port()) for i in ids]
        self.secure = args.secure
        if self.secure:
            self.make_certificate()
            for b in self.brokers:
                b.sasl_port, b.ssl_port = free_port(), free_port()
        self.controllers = [Controller(self, "controller", 3000 + i, free_port()) for i in range(args.controllers)]
        self.lock = threading.Lock()
        self.fault = zkfault.ZkFaultProxy(self.zk.port, log) if args.zk_fault or args.zk_fault_idle else None
        self.controllers_faulty = args.zk_fault
        self.before_kafka = args.before_kafka
        self.controller_props = dict(kv.split("=", 1) for kv in args.controller_prop)

    def make_certificate(self):
        """A self-signed certificate for 127.0.0.1 (the brokers' SASL_SSL listener and the clients' trust), valid
        for a day; the key unencrypted in the PEM keystore Kafka reads."""
        d = os.path.join(self.dir, "tls")
        os.makedirs(d, exist_ok=True)
        self.tls_cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key,
                        "-out", self.tls_cert], check=True, capture_output=True)
        self.tls_keystore = os.path.join(d, "keystore.pem")
        with open(self.tls_keystore, "w") as out:
            for path in (key, self.tls_cert):
                with open(path) as f:
                    out.write(f.read())

    def compile_tools(self, cache):
        """javac of java/*.java into a classes dir named after the sources' hash: checkouts that share the cache
        (worktrees, branches) each get their own classes."""
        src = os.path.join(HERE, "java")
        sources = sorted(os.path.join(src, f) for f in os.listdir(src) if f.endswith(".java"))
        digest = hashlib.sha256()
        for path in sources:
            with open(path, "rb") as f:
                digest.update(os.path.basename(path).encode() + b"\0" + f.read())
        out = os.path.join(cache, "classes-" + digest.hexdigest()[:16])
        stamp = os.path.join(out, ".complete")
        if not os.path.exists(stamp):
            tmp = out + ".tmp.%d" % os.getpid()
            os.makedirs(tmp, exist_ok=True)
            subprocess.run(["javac", "-nowarn", "-d", tmp, "-cp", self.classpath] + sources, check=True)
            write(os.path.join(tmp, ".complete"), "")
            try:
                os.rename(tmp, out)
            except OSError:  # another rig compiled the same sources first
                shutil.rmtree(tmp, ignore_errors=True)
        return out

    def zk_connect(self):
        return "127.0.0.1:%d" % self.zk.port

    def controller_zk_connect(self):
        """The controllers' ZooKeeper: through the fault proxy under --zk-fault."""
        return "127.0.0.1:%d" % self.fault.port if self.fault and self.controllers_faulty else self.zk_connect()

    def voters(self):
        return ",".join("%d@127.0.0.1:%d" % (c.nid, c.port) for c in self.controllers)

    def nodes(self):
        return [self.zk] + self.brokers + self.controllers

    def node(self, kind, nid):
        for n in self.brokers + self.controllers + [self.zk]:
            if n.kind == kind and n.nid == nid:
                return n
        raise KeyError("no %s %s" % (kind, nid))

    def rigzk(self, what, *args):
        out = subprocess.run(["java", "-Xmx64m", "-XX:TieredStopAtLevel=1", "-Dlog4j.configuration=file:/dev/null",
                              "-cp", self.tool_classes + ":" + self.classpath, "RigZk", args[0], self.zk_connect()]
                             + list(args[1:]), capture_output=True, text=True, preexec_fn=die_with_parent)
        if out.returncode:
            raise RuntimeError("%s: %s" % (what, out.stderr.strip()[-500:]))
        return out.stdout.strip()

    def zk_get(self, path):
        return self.rigzk("reading " + path, "get", path)

    def parallel(self, fns):
        errors = []

        def run(fn):
            try:
                fn()
            except Exception as e:  # reported below, with every other failure
                errors.append(str(e))
        threads = [threading.Thread(target=run, args=(fn,)) for fn in fns]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError("; ".join(errors))

    def up(self):
        t0 = time.monotonic()
        self.zk.start()
        self.zk.wait_ready()
        log("zookeeper serving on %d after %.1f s" % (self.zk.port, time.monotonic() - t0))
        # The cluster id the brokers will adopt from /cluster/id is the one the controllers are formatted with:
        # written first, so that brokers and controllers start together.
        self.parallel([self.write_cluster_id] + [c.format for c in self.controllers])
        if self.before_kafka:
            self.run_before_kafka()
        for n in self.brokers + self.controllers:
            n.start()
        self.parallel([n.wait_ready for n in self.brokers + self.controllers])
        log("brokers and controllers started after %.1f s" % (time.monotonic() - t0))
        self.wait_dual_write()
        self.start_s = time.monotonic() - t0
        log("dual-write after %.1f s" % self.start_s)

    def run_before_kafka(self):
        env = dict(os.environ, KM_RIG_ZK=self.zk_connect(), KM_RIG_CLUSTER_ID=self.cluster_id,
                   KM_RIG_CP=self.tool_classes + ":" + self.classpath)
        out = subprocess.run(["/bin/sh", "-c", self.before_kafka], env=env, capture_output=True, text=True,
                             preexec_fn=die_with_parent)
        if out.returncode:
            raise RuntimeError("--before-kafka exited %d: %s" % (out.returncode, (out.stdout + out.stderr)[-1500:]))
        log("--before-kafka: %s" % (out.stdout + out.stderr).strip()[-500:])

    def write_cluster_id(self):
        held = self.rigzk("writing /cluster/id", "cluster-id", self.cluster_id)
        if self.cluster_id not in held:
            raise RuntimeError("/cluster/id holds %s, not %s" % (held, self.cluster_id))

    def wait_dual_write(self):
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            for c in self.controllers:
                if "to DUAL_WRITE" in c.log_since_start():
                    migration = self.zk_get("/migration")
                    if migration != "absent":
                        self.migration = json.loads(migration)
                        return
            for n in self.nodes():
                if n.proc.poll() is not None:
                    raise RuntimeError("%s exited with %s" % (n.name(), n.proc.returncode))
            time.sleep(0.5)
        raise RuntimeError("no controller reached DUAL_WRITE within %.0f s" % WAIT_S)

    def rss(self):
        return {n.name().replace(" ", "-"): rss_kib(n.proc.pid) for n in self.nodes() if n.proc}

    def describe(self):
        rss = self.rss()
        d = {
            "dir": self.dir, "cluster_id": self.cluster_id, "zookeeper": self.zk_connect(),
            "brokers": [{"id": b.nid, "port": b.port, "pid": b.proc.pid, "dir": b.dir} for b in self.brokers],
            "controllers": [{"id": c.nid, "port": c.port, "pid": c.proc.pid, "dir": c.dir} for c in self.controllers],
            "bootstrap": ",".join("127.0.0.1:%d" % b.port for b in self.brokers),
            "voters": self.voters(), "classpath": self.classpath, "tool_classes": self.tool_classes,
            "start_s": round(self.start_s, 1), "rss_kib": rss, "rss_total_kib": sum(rss.values()),
            "migration": self.migration,
            "zk_fault_port": self.fault.port if self.fault else None,
        }
        if self.secure:
            d["sasl_bootstrap"] = ",".join("127.0.0.1:%d" % b.sasl_port for b in self.brokers)
            d["ssl_bootstrap"] = ",".join("127.0.0.1:%d" % b.ssl_port for b in self.brokers)
            d["tls_cert"] = self.tls_cert
        return d

    def command(self, line):
        words = line.split()
        if not words:
            return "err empty command"
        if words[0] == "rss":
            return "ok " + json.dumps(self.rss())
        if words[0] == "zk" and len(words) == 2:
            return "ok " + self.zk_get(words[1])
        if words[0] == "zkfault" and self.fault and words[1:] in (["arm"], ["status"]):
            if words[1] == "arm":
                self.fault.arm()
            return "ok " + json.dumps(self.fault.status())
        if words[0] == "kraft" and len(words) == 3 and words[1] == "broker":
            node = self.node("broker", int(words[2]))
            node.kill(signal.SIGTERM)
            node.kraft = True
            node.start()
            node.wait_ready()
            return "ok kraft broker %d pid %d" % (node.nid, node.proc.pid)
        if words[0] in ("kill", "start", "stop") and len(words) == 3:
            node = self.node(words[1], int(words[2]))
            if words[0] == "kill":
                node.kill()
            elif words[0] == "stop":
                node.kill(signal.SIGTERM)
            else:
                node.start()
                node.wait_ready()
            return "ok %s %s pid %d" % (words[0], node.name(), node.proc.pid)
        return "err unknown command: " + line

    def down(self):
        for n in reversed(self.nodes()):
            n.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("verb", choices=["up"])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--controllers", type=int, default=1)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--zk-fault", action="store_true", default=os.environ.get("KM_RIG_ZK_FAULT") == "1", help="the controllers reach ZooKeeper through zkfault.py")
    ap.add_argument("--zk-fault-idle", action="store_true", default=os.environ.get("KM_RIG_ZK_FAULT") == "kmproxy",
                    help="zkfault.py runs but the controllers reach ZooKeeper directly: its port (zkfault status) is "
                    "for another client, e.g. kmproxy")
    ap.add_argument("--secure", action="store_true", default=os.environ.get("KM_RIG_SECURE") == "1",
                    help="brokers also listen on SASL_PLAINTEXT and SASL_SSL (SCRAM-SHA-256 and PLAIN)")
    ap.add_argument("--broker-ids", help="the brokers' ids, comma-separated (instead of --brokers: 0..N-1)")
    ap.add_argument("--controller-prop", action="append", default=[], help="KEY=VALUE for the controllers")
    ap.add_argument("--before-kafka", help="a shell command run after ZooKeeper and /cluster/id, before Kafka")
    ap.add_argument("--cache", default=os.environ.get("KM_REALKAFKA_CACHE",
                                                      os.path.expanduser("~/.cache/kmproxy/realkafka")))
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rig = Rig(args)
    try:
        rig.up()
        print("ready " + json.dumps(rig.describe()), flush=True)
        for line in sys.stdin:
            if line.strip() == "down":
                break
            try:
                answer = rig.command(line)
            except Exception as e:  # a failed command is the test's to judge, the rig carries on
                answer = "err %s" % e
            print(answer, flush=True)
    except Exception as e:
        print("failed %s" % e, flush=True)
        log("failed: %s" % e)
        return 1
    finally:
        rig.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
