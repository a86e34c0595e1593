#!/usr/bin/env python3
"""demo.py: `make demo` -- kmproxy beside a real Apache Kafka 3.9.2 cluster in ZooKeeper-to-KRaft migration.

    demo.py --kmproxy BIN [--cache DIR] [--keep DIR]
    demo.py --kafka21062 --tests-dir DIR

The default run fetches (or reuses) Kafka's jars (fetch-kafka, Maven Central into ~/.cache/kmproxy/realkafka),
starts rig.py (one ZooKeeper, 3 real ZK-mode brokers, a KRaft controller in migration mode, 127.0.0.1, free ports),
deploys `kmproxy run` beside the controller as docs/runbook.md says, creates a topic through Kafka's Admin API,
waits until every real broker's own Metadata answer and ZooKeeper equal the controller's log (RcAdmin verify,
`kmproxy zk diff`), runs `kmproxy verify` and prints its verdict, then tears everything down.

--kafka21062 replays KAFKA-21062 (docs/kafka21062.md) without and with kmproxy by running the two scenarios of
test_kafka21062 and prints the acknowledged and lost records each measured.

Exit 0 only when every step passed; 1 a step failed (it says which), 69 Java/Maven/python missing,
130 interrupted.  Everything started is stopped on every exit, Ctrl-C included.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JAVA = ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Dlog4j.configuration=file:/dev/null"]
TOPIC = "demo"


class StepFailed(Exception):
    pass


def say(msg):
    print("demo: " + msg, flush=True)


def interrupted(*_):
    raise KeyboardInterrupt


class Demo:
    def __init__(self, args):
        self.args = args
        self.kmproxy = os.path.abspath(args.kmproxy)
        self.dir = args.keep or tempfile.mkdtemp(prefix="kmproxy-demo-")
        os.makedirs(self.dir, exist_ok=True)
        self.rig = None
        self.daemon = None
        self.ready = None

    # ---- steps ----
    def fetch(self):
        cmd = [os.path.join(HERE, "fetch-kafka")] + ([self.args.cache] if self.args.cache else [])
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode == 69:
            raise SystemExit("demo: %s\ndemo: install them with deploy/install-deps.sh (or run `make demo-embedded`, "
                             "which needs no Java)" % p.stderr.strip()) from None
        if p.returncode != 0:
            raise StepFailed("fetch-kafka exit %d: %s" % (p.returncode, p.stderr.strip()))
        return p.stdout.strip()

    def start_rig(self, cache):
        log = open(os.path.join(self.dir, "rig.log"), "a")
        self.rig = subprocess.Popen([sys.executable, os.path.join(HERE, "rig.py"), "up", "--dir", self.dir,
                                     "--cache", cache], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=log, text=True, start_new_session=True)
        line = self.rig.stdout.readline()
        if not line.startswith("ready "):
            raise StepFailed("the cluster did not start (%s); see %s/rig.log" % (line.strip() or "rig exited",
                                                                                 self.dir))
        self.ready = json.loads(line[6:])

    def env(self):
        r = self.ready
        return dict(os.environ, CP=r["classpath"], TOOLS=r["tool_classes"], BS=r["bootstrap"], ZK=r["zookeeper"])

    def metadata_log(self):
        return os.path.join(self.dir, "controller-%d" % self.ready["controllers"][0]["id"], "metadata",
                            "__cluster_metadata-0")

    def deploy_kmproxy(self):
        config = os.path.join(self.dir, "kmproxy.properties")
        with open(config, "w") as f:  # docs/runbook.md: beside the controllers, brokers.enabled
            f.write("metadata.source=quorum\ncontroller.quorum.voters=%s\ncontroller.listener.names=CONTROLLER\n"
                    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n"
                    "zookeeper.connect=%s\nbrokers.enabled=true\nmetrics.listen=127.0.0.1:0\n"
                    % (self.ready["voters"], self.ready["zookeeper"]))
        log = os.path.join(self.dir, "kmproxy.log")
        self.daemon = subprocess.Popen([self.kmproxy, "run", "--config", config], stdout=open(log, "a"),
                                       stderr=subprocess.STDOUT, start_new_session=True)
        self.wait("kmproxy ready (active, ZooKeeper in sync)", self.args.wait,
                  lambda: "ready: active, ZooKeeper in sync" in open(log).read(), log)

    def wait(self, what, timeout, check, log):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.daemon and self.daemon.poll() is not None:
                raise StepFailed("kmproxy exited %d while waiting for %s; see %s" % (self.daemon.returncode, what, log))
            if check():
                return
            time.sleep(2)
        raise StepFailed("no %s within %d s; see %s" % (what, timeout, log))

    def sh(self, line):
        return subprocess.run(["/bin/bash", "-c", line], env=self.env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)

    def create_topic(self):
        p = self.sh("%s -cp \"$CP:$TOOLS\" RcAdmin $BS create-topic %s 3 3 2>&1 | grep -v log4j; "
                    "exit ${PIPESTATUS[0]}" % (" ".join(JAVA), TOPIC))
        if p.returncode != 0:
            raise StepFailed("Admin API create-topic %s: exit %d: %s" % (TOPIC, p.returncode, p.stdout.strip()))

    def converged(self):
        image = os.path.join(self.dir, "image.json")
        last = {}

        def check():
            p = self.sh("%s metadata image %s > %s && %s -cp \"$CP:$TOOLS\" RcAdmin verify %s $BS 2>&1 | "
                        "grep -v log4j; exit ${PIPESTATUS[0]}" % (self.kmproxy, self.metadata_log(), image,
                                                                   " ".join(JAVA), image))
            last["brokers"] = p
            if p.returncode != 0:
                return False
            with open(image) as f:
                if TOPIC not in f.read():
                    return False
            d = self.sh("%s zk diff --zookeeper $ZK --metadata %s" % (self.kmproxy, self.metadata_log()))
            last["zk"] = d
            return d.returncode == 0

        try:
            self.wait("convergence", self.args.wait, check, self.dir)
        except StepFailed as e:
            detail = "".join(p.stdout[-2000:] for p in last.values())
            raise StepFailed("%s\n%s" % (e, detail)) from None
        verdict = [l for l in last["zk"].stdout.splitlines() if l.startswith("zk diff:")]
        return verdict[-1] if verdict else last["zk"].stdout.strip()

    def verify(self):
        p = self.sh("%s verify --timeout 20 --metadata %s" % (self.kmproxy, self.metadata_log()))
        if p.returncode != 0:
            raise StepFailed("kmproxy verify exit %d:\n%s" % (p.returncode, p.stdout.strip()))
        return p.stdout.strip()

    def run(self):
        say("fetching (or reusing) Apache Kafka 3.9.2's jars (tests/realcluster/fetch-kafka)")
        cache = self.fetch()
        say("starting ZooKeeper, 3 ZK-mode brokers and a KRaft controller in migration mode (rig.py, %s)" % self.dir)
        t0 = time.monotonic()
        self.start_rig(cache)
        brokers = ", ".join("%d@127.0.0.1:%d" % (b["id"], b["port"]) for b in self.ready["brokers"])
        say("cluster %s in dual-write after %.0f s; ZK-mode brokers %s" % (self.ready["cluster_id"],
                                                                            time.monotonic() - t0, brokers))
        say("deploying kmproxy beside the controller (docs/runbook.md): %s run --config %s/kmproxy.properties"
            % (self.kmproxy, self.dir))
        self.deploy_kmproxy()
        say("kmproxy: ready, active, ZooKeeper in sync")
        say("creating topic %r (3 partitions, RF 3) through Kafka's Admin API" % TOPIC)
        self.create_topic()
        zk = self.converged()
        say("converged: every real ZK-mode broker's Metadata answer equals the controller's log (RcAdmin verify)")
        say("converged: ZooKeeper equals the controller's log (kmproxy zk diff): %s" % (zk or "no differences"))
        out = self.verify()
        for line in out.splitlines():
            print("  " + line, flush=True)
        if "verdict: consistent" not in out:
            raise StepFailed("kmproxy verify exited 0 without a consistent verdict")
        say("all clear: kmproxy verify found every broker consistent with the controller's log")

    def down(self, failed):
        for proc in (self.daemon, self.rig):
            if proc and proc.poll() is None:
                try:
                    if proc is self.rig and self.ready:
                        proc.stdin.write("down\n")
                        proc.stdin.flush()
                        proc.wait(60)
                    elif proc is self.rig:  # still starting, not reading commands: rig.py stops all on SIGTERM
                        proc.terminate()
                        proc.wait(60)
                    else:
                        proc.terminate()
                        proc.wait(20)
                except (OSError, subprocess.TimeoutExpired, ValueError):
                    pass
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        if failed:
            say("logs kept in %s" % self.dir)
        elif not self.args.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def kafka21062(tests_dir):
    """Runs test_kafka21062's without/with scenarios and prints the LOSS figures they measured."""
    binary = os.path.join(tests_dir, "test_kafka21062")
    if not os.access(binary, os.X_OK):
        raise StepFailed("%s not built (make builds it)" % binary)
    scenarios = [("without kmproxy", "kafka21062/leader_moved_while_wedged_loses_acknowledged_records"),
                 ("with kmproxy", "kafka21062/kmproxy_deployed_the_leader_move_reaches_zk_brokers_and_acks_all_"
                                  "loses_nothing")]
    figures = []
    for what, test in scenarios:
        say("replaying KAFKA-21062 %s (%s; a few minutes)" % (what, test))
        p = subprocess.run([binary, "--filter", test, "-j1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=dict(os.environ, KM_REQUIRE_REALKAFKA="1"))
        m = re.search(r"kafka21062: LOSS %s: (acks=all acknowledged -?\d+ lost -?\d+; acks=1 acknowledged -?\d+ "
                      r"lost -?\d+)" % re.escape(what), p.stdout)
        if not m or "-1" in m.group(1).split():
            raise StepFailed("the %s replay measured no figures (exit %d):\n%s" % (what, p.returncode,
                                                                                    p.stdout[-3000:]))
        say("%s: %s" % (what, m.group(1)))
        if p.returncode != 0:
            raise StepFailed("the %s replay failed its checks (exit %d):\n%s" % (what, p.returncode,
                                                                                  p.stdout[-3000:]))
        figures.append((what, m.group(1)))
    say("KAFKA-21062, measured on real Kafka 3.9.2:")
    for what, fig in figures:
        print("  %-16s %s" % (what, fig), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kmproxy", help="the kmproxy binary")
    ap.add_argument("--cache", help="the jar cache (default $KM_REALKAFKA_CACHE, else ~/.cache/kmproxy/realkafka)")
    ap.add_argument("--keep", metavar="DIR", help="run in DIR and keep its logs")
    ap.add_argument("--wait", type=int, default=os.environ.get("KM_DEMO_WAIT_S", "300"),  # argparse checks it
                    help="seconds each step may take (default 300)")
    ap.add_argument("--kafka21062", action="store_true", help="replay KAFKA-21062 without and with kmproxy")
    ap.add_argument("--tests-dir", help="--kafka21062: the build's tests directory")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    demo = None
    failed = True
    try:
        if args.kafka21062:
            kafka21062(args.tests_dir or "build/tests")
        else:
            if not args.kmproxy or not os.access(args.kmproxy, os.X_OK):
                raise StepFailed("no kmproxy binary at %s (--kmproxy)" % args.kmproxy)
            demo = Demo(args)
            demo.run()
        failed = False
    except StepFailed as e:
        print("demo: FAILED: %s" % e, file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("demo: INTERRUPTED: stopped before finishing; no result", file=sys.stderr, flush=True)
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave the cluster behind
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if demo:
            say("tearing down")
            demo.down(failed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
