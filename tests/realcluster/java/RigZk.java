// RigZk: the real-cluster rig's ZooKeeper steps (tests/realcluster/rig.py), through ZooKeeper's own Java client
// (the one Kafka uses).  Commands:
//   cluster-id ZK ID      create /cluster/id as Kafka writes it, unless present; print the id ZooKeeper holds
//   get ZK PATH           print the znode's data, or "absent"
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;

public final class RigZk {
    private static ZooKeeper open(String hosts) throws Exception {
        CountDownLatch up = new CountDownLatch(1);
        ZooKeeper zk = new ZooKeeper(hosts, 30000, ev -> {
            if (ev.getState() == Watcher.Event.KeeperState.SyncConnected) up.countDown();
        });
        if (!up.await(60, TimeUnit.SECONDS)) throw new IllegalStateException("no ZooKeeper session with " + hosts);
        return zk;
    }

    private static String get(ZooKeeper zk, String path) throws Exception {
        try {
            return new String(zk.getData(path, false, null), StandardCharsets.UTF_8);
        } catch (KeeperException.NoNodeException e) {
            return null;
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: RigZk cluster-id ZK ID | get ZK PATH");
            System.exit(2);
        }
        try (ZooKeeper zk = open(args[1])) {
            if (args[0].equals("cluster-id")) {
                String json = "{\"version\":\"1\",\"id\":\"" + args[2] + "\"}";
                try {
                    zk.create("/cluster", new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
                } catch (KeeperException.NodeExistsException ignored) {
                    // a broker got there first: its id stands
                }
                try {
                    zk.create("/cluster/id", json.getBytes(StandardCharsets.UTF_8), ZooDefs.Ids.OPEN_ACL_UNSAFE,
                              CreateMode.PERSISTENT);
                } catch (KeeperException.NodeExistsException ignored) {
                    // as above
                }
                System.out.println(get(zk, "/cluster/id"));
            } else if (args[0].equals("get")) {
                String data = get(zk, args[2]);
                System.out.println(data == null ? "absent" : data);
            } else {
                System.err.println("RigZk: unknown command " + args[0]);
                System.exit(2);
            }
        }
    }
}
