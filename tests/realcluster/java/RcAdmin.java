// RcAdmin: the real-cluster tests' Admin API client (kafka-clients) and per-broker check.
//   RcAdmin BOOTSTRAP CMD ARGS [; CMD ARGS ...]   Admin API calls, one JVM for the lot:
//     create-topic NAME PARTITIONS RF | delete-topic NAME | add-partitions NAME TOTAL
//     topic-config NAME KEY VALUE | broker-config ID KEY VALUE | quota USER KEY VALUE | scram USER PASSWORD
//     reassign NAME PARTITION R1,R2,... | elect-preferred NAME PARTITION | acl PRINCIPAL TOPIC (ALLOW READ)
//     rotate NAME B1,B2,... (every replica to the next broker of the ring, one reassignment)
//     create-token FILE (writes "ID HMAC-base64") | renew-token FILE | expire-token FILE | list-topics
//   BOOTSTRAP may carry a SASL_PLAINTEXT login (SCRAM-SHA-256): scram:USER:PASSWORD@HOST:PORT,... or, with a
//   delegation token (tokenauth=true), token:FILE@HOST:PORT,...
//   RcAdmin verify IMAGE.json HOST:PORT[,HOST:PORT...]
//     asks each broker for its own Metadata (v12, all topics) and compares leader, leader epoch, replicas and ISR
//     of every partition, and the set of topics, with the image (`kmproxy metadata image`); prints each
//     difference; exit 0 when every broker equals the image, 1 otherwise.
//   RcAdmin logdirs IMAGE.json BOOTSTRAP
//     asks every broker of the cluster for its log dirs (DescribeLogDirs) and compares the replicas each holds
//     with those the image places on it (partitions whose replicas name the broker); prints each difference;
//     exit 0 when no reassignment is under way in the image and every broker holds exactly its replicas, else 1.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.File;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.message.MetadataRequestData;
import org.apache.kafka.common.message.MetadataResponseData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.requests.AbstractResponse;
import org.apache.kafka.common.requests.MetadataRequest;
import org.apache.kafka.common.requests.MetadataResponse;
import org.apache.kafka.common.requests.RequestHeader;

public final class RcAdmin {
    public static void main(String[] args) throws Exception {
        if (args.length >= 3 && args[0].equals("verify")) {
            System.exit(verify(args[1], args[2]) ? 0 : 1);
        }
        if (args.length >= 3 && args[0].equals("logdirs")) {
            System.exit(logDirs(args[1], args[2]) ? 0 : 1);
        }
        if (args.length < 2) {
            System.err.println("usage: RcAdmin BOOTSTRAP CMD ARGS [; CMD ARGS ...] | RcAdmin verify IMAGE BROKERS");
            System.exit(2);
        }
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, login(p, args[0]));
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "120000");
        try (Admin admin = Admin.create(p)) {
            List<String> cmd = new ArrayList<>();
            for (int i = 1; i <= args.length; i++) {
                if (i == args.length || args[i].equals(";")) {
                    if (!cmd.isEmpty()) run(admin, cmd);
                    cmd.clear();
                } else {
                    cmd.add(args[i]);
                }
            }
        }
    }

    /** scram:USER:PASSWORD@SERVERS or token:FILE@SERVERS: the SASL_PLAINTEXT login into p; the servers. */
    private static String login(Properties p, String bootstrap) throws Exception {
        int at = bootstrap.indexOf('@');
        if (at < 0) return bootstrap;
        String[] how = bootstrap.substring(0, at).split(":", 3);
        String user = how[1], password = how.length > 2 ? how[2] : "", extra = "";
        if (how[0].equals("token")) {
            String[] idHmac = java.nio.file.Files.readString(java.nio.file.Path.of(how[1])).trim().split(" ");
            user = idHmac[0];
            password = idHmac[1];
            extra = " tokenauth=\"true\"";
        }
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "SCRAM-SHA-256");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
              + user + "\" password=\"" + password + "\"" + extra + ";");
        return bootstrap.substring(at + 1);
    }

    private static byte[] hmac(String file) throws Exception {
        String[] idHmac = java.nio.file.Files.readString(java.nio.file.Path.of(file)).trim().split(" ");
        return Base64.getDecoder().decode(idHmac[1]);
    }

    private static void tokens(Admin admin, List<String> c) throws Exception {
        switch (c.get(0)) {
            case "create-token": {
                org.apache.kafka.common.security.token.delegation.DelegationToken t =
                    admin.createDelegationToken().delegationToken().get();
                java.nio.file.Files.writeString(java.nio.file.Path.of(c.get(1)),
                    t.tokenInfo().tokenId() + " " + Base64.getEncoder().encodeToString(t.hmac()) + "\n");
                System.out.println("rcadmin: token " + t.tokenInfo().tokenId() + " owner " + t.tokenInfo().owner()
                                   + " expires " + t.tokenInfo().expiryTimestamp());
                break;
            }
            case "renew-token":
                System.out.println("rcadmin: renewed, expires " + admin.renewDelegationToken(hmac(c.get(1)))
                                   .expiryTimestamp().get());
                break;
            case "expire-token":
                System.out.println("rcadmin: expired at " + admin.expireDelegationToken(hmac(c.get(1)),
                    new ExpireDelegationTokenOptions().expiryTimePeriodMs(-1)).expiryTimestamp().get());
                break;
            default: // list-topics: any request will do, it needs the login first
                System.out.println("rcadmin: topics " + new TreeSet<>(admin.listTopics().names().get()));
        }
    }

    private static void run(Admin admin, List<String> c) throws Exception {
        System.out.println("rcadmin: " + String.join(" ", c));
        switch (c.get(0)) {
            case "create-topic":
                admin.createTopics(List.of(new NewTopic(c.get(1), Integer.parseInt(c.get(2)),
                                                        Short.parseShort(c.get(3))))).all().get();
                break;
            case "delete-topic":
                admin.deleteTopics(List.of(c.get(1))).all().get();
                break;
            case "add-partitions":
                admin.createPartitions(Map.of(c.get(1), NewPartitions.increaseTo(Integer.parseInt(c.get(2)))))
                     .all().get();
                break;
            case "topic-config":
                alter(admin, new ConfigResource(ConfigResource.Type.TOPIC, c.get(1)), c.get(2), c.get(3));
                break;
            case "broker-config":
                alter(admin, new ConfigResource(ConfigResource.Type.BROKER, c.get(1)), c.get(2), c.get(3));
                break;
            case "quota":
                admin.alterClientQuotas(List.of(new ClientQuotaAlteration(
                    new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, c.get(1))),
                    List.of(new ClientQuotaAlteration.Op(c.get(2), Double.parseDouble(c.get(3))))))).all().get();
                break;
            case "scram":
                admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(c.get(1),
                    new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), c.get(2)))).all().get();
                break;
            case "acl":
                admin.createAcls(List.of(new org.apache.kafka.common.acl.AclBinding(
                    new org.apache.kafka.common.resource.ResourcePattern(
                        org.apache.kafka.common.resource.ResourceType.TOPIC, c.get(2),
                        org.apache.kafka.common.resource.PatternType.LITERAL),
                    new org.apache.kafka.common.acl.AccessControlEntry(c.get(1), "*",
                        org.apache.kafka.common.acl.AclOperation.READ,
                        org.apache.kafka.common.acl.AclPermissionType.ALLOW)))).all().get();
                break;
            case "reassign": {
                List<Integer> replicas = new ArrayList<>();
                for (String r : c.get(3).split(",")) replicas.add(Integer.parseInt(r));
                admin.alterPartitionReassignments(Map.of(new TopicPartition(c.get(1), Integer.parseInt(c.get(2))),
                    Optional.of(new NewPartitionReassignment(replicas)))).all().get();
                break;
            }
            case "rotate":
                rotate(admin, c.get(1), c.get(2));
                break;
            case "elect-preferred":
                electPreferred(admin, new TopicPartition(c.get(1), Integer.parseInt(c.get(2))));
                break;
            case "create-token": case "renew-token": case "expire-token": case "list-topics":
                tokens(admin, c);
                break;
            default:
                throw new IllegalArgumentException("unknown command " + c.get(0));
        }
    }

    /* Every replica of TOPIC moves to the broker after its own in RING (ids, comma-separated, the last followed by
     * the first), all partitions in one reassignment: with one replica a partition on each of brokers 0, 1, 2 and
     * 2 in KRaft mode, one replica moves ZK-mode to ZK-mode, one ZK-mode to KRaft-mode, one KRaft-mode to ZK-mode. */
    private static void rotate(Admin admin, String topic, String ring) throws Exception {
        List<Integer> ids = new ArrayList<>();
        for (String id : ring.split(",")) ids.add(Integer.parseInt(id));
        Map<TopicPartition, Optional<NewPartitionReassignment>> moves = new TreeMap<>(
            Comparator.comparing(TopicPartition::toString));
        for (org.apache.kafka.common.TopicPartitionInfo p :
                 admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions()) {
            List<Integer> from = new ArrayList<>(), to = new ArrayList<>();
            for (org.apache.kafka.common.Node n : p.replicas()) {
                from.add(n.id());
                to.add(ids.get((ids.indexOf(n.id()) + 1) % ids.size()));
            }
            moves.put(new TopicPartition(topic, p.partition()), Optional.of(new NewPartitionReassignment(to)));
            System.out.println("rcadmin: " + topic + "-" + p.partition() + " " + from + " -> " + to);
        }
        admin.alterPartitionReassignments(moves).all().get();
    }

    /* A preferred replica not in the ISR yet (a broker just restarted, still catching up) is asked again, for up
     * to two minutes, as an operator would. */
    private static void electPreferred(Admin admin, TopicPartition tp) throws Exception {
        for (int attempt = 1; ; attempt++) {
            try {
                admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).all().get();
                return;
            } catch (java.util.concurrent.ExecutionException e) {
                // the reassignment's own leader change may have got there first: the same end state
                if (e.getCause() instanceof org.apache.kafka.common.errors.ElectionNotNeededException) {
                    System.out.println("rcadmin: already led by its preferred replica");
                    return;
                }
                if (!(e.getCause() instanceof org.apache.kafka.common.errors.PreferredLeaderNotAvailableException)
                    || attempt == 60) throw e;
                System.out.println("rcadmin: preferred replica of " + tp + " not available yet, asking again");
                Thread.sleep(2000);
            }
        }
    }

    private static void alter(Admin admin, ConfigResource r, String key, String value) throws Exception {
        admin.incrementalAlterConfigs(Map.of(r, List.of(new AlterConfigOp(new ConfigEntry(key, value),
                                                                           AlterConfigOp.OpType.SET)))).all().get();
    }

    private static MetadataResponseData metadata(String hostPort) throws Exception {
        String[] hp = hostPort.split(":");
        try (Socket s = new Socket(hp[0], Integer.parseInt(hp[1]))) {
            s.setSoTimeout(30000);
            short v = 12;
            MetadataRequest req = new MetadataRequest.Builder(
                new MetadataRequestData().setTopics(null).setAllowAutoTopicCreation(false)).build(v);
            RequestHeader h = new RequestHeader(ApiKeys.METADATA, v, "rc-verify", 1);
            ByteBuffer body = req.serializeWithHeader(h);
            DataOutputStream out = new DataOutputStream(s.getOutputStream());
            byte[] bytes = new byte[body.remaining()];
            body.get(bytes);
            out.writeInt(bytes.length);
            out.write(bytes);
            out.flush();
            DataInputStream in = new DataInputStream(s.getInputStream());
            byte[] buf = new byte[in.readInt()];
            in.readFully(buf);
            return ((MetadataResponse) AbstractResponse.parseResponse(ByteBuffer.wrap(buf), h)).data();
        }
    }

    private static List<Integer> ints(JsonNode arr) {
        List<Integer> out = new ArrayList<>();
        arr.forEach(n -> out.add(n.asInt()));
        return out;
    }

    private static boolean verify(String imagePath, String brokers) throws Exception {
        JsonNode image = new ObjectMapper().readTree(new File(imagePath));
        Map<String, String> want = new TreeMap<>();
        for (JsonNode t : image.get("topics")) {
            for (JsonNode p : t.get("partitions")) {
                want.put(t.get("name").asText() + "-" + p.get("partitionId").asInt(),
                         "leader " + p.get("leader").asInt() + " epoch " + p.get("leaderEpoch").asInt()
                         + " replicas " + ints(p.get("replicas")) + " isr " + ints(p.get("isr")));
            }
        }
        boolean equal = true;
        for (String broker : brokers.split(",")) {
            Map<String, String> got = new TreeMap<>();
            for (MetadataResponseData.MetadataResponseTopic t : metadata(broker).topics()) {
                for (MetadataResponseData.MetadataResponsePartition p : t.partitions()) {
                    got.put(t.name() + "-" + p.partitionIndex(),
                            "leader " + p.leaderId() + " epoch " + p.leaderEpoch() + " replicas "
                            + p.replicaNodes() + " isr " + p.isrNodes());
                }
            }
            Set<String> keys = new TreeSet<>(want.keySet());
            keys.addAll(got.keySet());
            int diffs = 0;
            for (String k : keys) {
                if (!Objects.equals(want.get(k), got.get(k))) {
                    System.out.println("broker " + broker + " " + k + ": has " + got.get(k) + ", image "
                                       + want.get(k));
                    diffs++;
                }
            }
            System.out.println("broker " + broker + ": " + got.size() + " partitions, " + diffs + " differ");
            equal &= diffs == 0;
        }
        return equal;
    }

    /* Broker id -> the partitions the image places on it ("topic-partition"). */
    private static Map<Integer, Set<String>> placed(JsonNode image, Collection<Integer> brokers) {
        Map<Integer, Set<String>> want = new TreeMap<>();
        for (int b : brokers) want.put(b, new TreeSet<>());
        for (JsonNode t : image.get("topics")) {
            for (JsonNode p : t.get("partitions")) {
                for (int b : ints(p.get("replicas"))) {
                    want.computeIfAbsent(b, k -> new TreeSet<>())
                        .add(t.get("name").asText() + "-" + p.get("partitionId").asInt());
                }
            }
        }
        return want;
    }

    private static boolean logDirs(String imagePath, String bootstrap) throws Exception {
        JsonNode image = new ObjectMapper().readTree(new File(imagePath));
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
        boolean equal = true;
        try (Admin admin = Admin.create(p)) {
            List<Integer> ids = new ArrayList<>();
            for (org.apache.kafka.common.Node n : admin.describeCluster().nodes().get()) ids.add(n.id());
            Map<Integer, Set<String>> want = placed(image, ids);
            for (JsonNode t : image.get("topics")) {
                for (JsonNode q : t.get("partitions")) {
                    if (q.get("addingReplicas").size() + q.get("removingReplicas").size() > 0) {
                        System.out.println(t.get("name").asText() + "-" + q.get("partitionId").asInt()
                                           + ": a reassignment is still under way in the image");
                        equal = false;
                    }
                }
            }
            Map<Integer, Map<String, LogDirDescription>> all = admin.describeLogDirs(ids).allDescriptions().get();
            for (int b : want.keySet()) {
                Set<String> got = new TreeSet<>();
                for (Map.Entry<String, LogDirDescription> d : all.getOrDefault(b, Map.of()).entrySet()) {
                    if (d.getValue().error() != null) {
                        System.out.println("broker " + b + " log dir " + d.getKey() + ": " + d.getValue().error());
                        equal = false;
                    }
                    d.getValue().replicaInfos().forEach((tp, info) ->
                        got.add(tp.topic() + "-" + tp.partition() + (info.isFuture() ? " (future)" : "")));
                }
                if (!all.containsKey(b)) System.out.println("broker " + b + ": no log dirs described");
                Set<String> missing = new TreeSet<>(want.get(b)), extra = new TreeSet<>(got);
                missing.removeAll(got);
                extra.removeAll(want.get(b));
                System.out.println("broker " + b + ": " + got.size() + " replicas in its log dirs, missing " + missing
                                   + ", not placed there " + extra);
                equal &= all.containsKey(b) && missing.isEmpty() && extra.isEmpty();
            }
        }
        return equal;
    }
}
