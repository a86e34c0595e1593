/* RoundTrip: the round trip of a KRaft image through ZooKeeper (docs/realcluster.md, "Round trip").
 *
 *   RoundTrip SECRET_FILE ZK_HOSTS FILE CHROOT [FILE CHROOT ...]
 *   RoundTrip --write-password-log OUT.log [BROKER]
 *   RoundTrip --as-zk-cluster ZK_HOSTS
 *   RoundTrip --compare-log FILE CONTROLLER_LOG_DIR
 *
 * The second form writes, with Kafka's own record classes, a one-batch log segment with password-type broker
 * configs (per broker and cluster default) beside a topic, plain configs, producer ids and one client quota, SCRAM
 * credential, ACL and delegation token: neither gen-coverage nor the corpus holds a password config, and without
 * them (a fresh clone) this log alone covers every kind. Its partition is on brokers 1 and 2, or with BROKER on that one alone
 * (a real controller migrating it waits for every broker a partition names to register).
 *
 * --as-zk-cluster turns the claim `kmproxy zk sync` leaves into one a fresh KRaft quorum migrates: it removes
 * /migration (a controller finding an initial migration recorded there does not read ZooKeeper) and replaces
 * /controller (sync's claim holds the log's epoch, which a fresh quorum's first leader cannot supersede) with a
 * KRaft claim of epoch 0. --compare-log compares FILE's image with the image of a real KRaft controller's own
 * __cluster_metadata-0 directory (every segment, in order) after it migrated the ZooKeeper `zk sync` wrote from
 * FILE (test_roundtrip_controller), with the same comparison, and requires that log's ZkMigrationState MIGRATION.
 *
 * For each pair: FILE (a metadata log segment or .checkpoint) is read with Kafka's own classes (FileRecords,
 * MetadataRecordSerde, MetadataBatchLoader: aborted transactions drop out as they do in the broker) into a
 * MetadataImage; ZK_HOSTS+CHROOT, which `kmproxy zk sync` wrote from FILE, is read by Kafka's own ZooKeeper reader
 * (ZkMigrationClient.readAllMetadata over a KafkaZkClient, password configs decoded with SECRET_FILE's secret and
 * the brokers' default encoder settings) into a second image. The two are compared component by component; every
 * difference is printed with its path. Only what Kafka's ZooKeeper layout cannot carry is normalised, and each
 * normalisation is counted and printed. Exit 0 all equal, 1 some difference, 2 could not compare. */
import kafka.zk.KafkaZkClient;
import kafka.zk.ZkMigrationClient;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.metadata.AccessControlEntryRecord;
import org.apache.kafka.common.metadata.AbortTransactionRecord;
import org.apache.kafka.common.metadata.BeginTransactionRecord;
import org.apache.kafka.common.metadata.ClientQuotaRecord;
import org.apache.kafka.common.metadata.EndTransactionRecord;
import org.apache.kafka.common.metadata.PartitionChangeRecord;
import org.apache.kafka.common.metadata.ConfigRecord;
import org.apache.kafka.common.metadata.DelegationTokenRecord;
import org.apache.kafka.common.metadata.UserScramCredentialRecord;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.common.metadata.FeatureLevelRecord;
import org.apache.kafka.common.metadata.PartitionRecord;
import org.apache.kafka.common.metadata.ProducerIdsRecord;
import org.apache.kafka.common.metadata.TopicRecord;
import org.apache.kafka.common.metadata.ZkMigrationStateRecord;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.SimpleRecord;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.metadata.migration.ZkMigrationState;
import org.apache.kafka.server.common.MetadataVersion;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.config.types.Password;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.record.FileRecords;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.utils.LogContext;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.image.ConfigurationImage;
import org.apache.kafka.image.MetadataDelta;
import org.apache.kafka.image.MetadataImage;
import org.apache.kafka.image.MetadataProvenance;
import org.apache.kafka.image.TopicImage;
import org.apache.kafka.image.loader.MetadataBatchLoader;
import org.apache.kafka.metadata.MetadataRecordSerde;
import org.apache.kafka.metadata.PartitionRegistration;
import org.apache.kafka.metadata.authorizer.StandardAcl;
import org.apache.kafka.raft.Batch;
import org.apache.kafka.raft.LeaderAndEpoch;
import org.apache.kafka.security.PasswordEncoder;
import org.apache.kafka.server.common.ApiMessageAndVersion;
import org.apache.kafka.server.fault.FaultHandlerException;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.client.ZKClientConfig;

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.OptionalInt;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

public class RoundTrip {
    /* What was compared, what was normalised, and the differences, over all files. */
    final Map<String, Long> counts = new TreeMap<>();
    final Map<String, Long> normalised = new TreeMap<>();
    final List<String> diffs = new ArrayList<>();
    String file = "";
    String other = "zookeeper";  /* what the source is compared with, in DIFF lines */

    public static void main(String[] args) throws Exception {
        if ((args.length == 2 || args.length == 3) && args[0].equals("--write-password-log")) {
            writePasswordLog(new File(args[1]), args.length == 3 ? Integer.parseInt(args[2]) : -1);
            return;
        }
        if (args.length == 2 && args[0].equals("--as-zk-cluster")) {
            asZkCluster(args[1]);
            return;
        }
        if (args.length == 2 && args[0].equals("--check-migration-cut")) {
            checkMigrationCut(new File(args[1]));
            return;
        }
        if (args.length == 3 && args[0].equals("--compare-log")) {
            compareLog(args[1], new File(args[2]));
            return;
        }
        if (args.length < 4 || args.length % 2 != 0) {
            System.err.println("usage: RoundTrip SECRET_FILE ZK_HOSTS FILE CHROOT [FILE CHROOT ...]");
            System.exit(2);
        }
        String secret = Files.readAllLines(new File(args[0]).toPath()).get(0).trim();
        PasswordEncoder encoder = PasswordEncoder.encrypting(new Password(secret), null, "AES/CBC/PKCS5Padding",
            128, 4096);
        RoundTrip rt = new RoundTrip();
        int files = 0;
        for (int i = 2; i < args.length; i += 2) {
            rt.file = args[i];
            MetadataImage source, zk;
            try {
                source = readFile(new File(args[i]));
                zk = readZk(args[1] + args[i + 1], encoder);
            } catch (Throwable e) {
                System.out.println("RoundTrip: " + args[i] + ": could not compare: " + e);
                e.printStackTrace();
                System.exit(2);
                return;
            }
            rt.compare(source, zk);
            files++;
        }
        rt.finish(files);
    }

    /* The summary and the differences on stdout; exits 0 equal, 1 different. */
    void finish(int files) {
        StringBuilder sum = new StringBuilder("files=" + files);
        counts.forEach((k, v) -> sum.append(' ').append(k).append('=').append(v));
        sum.append(" differences=").append(diffs.size());
        for (String d : diffs) System.out.println("DIFF " + d);
        normalised.forEach((k, v) -> System.out.println("NORMALISED " + k + " (" + v + ")"));
        System.out.println(sum);
        System.out.flush();
        System.exit(diffs.isEmpty() ? 0 : 1);
    }

    static void asZkCluster(String connect) throws Exception {
        CountDownLatch up = new CountDownLatch(1);
        ZooKeeper zk = new ZooKeeper(connect, 30000, ev -> {
            if (ev.getState() == Watcher.Event.KeeperState.SyncConnected) up.countDown();
        });
        try {
            if (!up.await(60, TimeUnit.SECONDS)) throw new IllegalStateException("no ZooKeeper session with " + connect);
            try {
                zk.delete("/migration", -1);
                System.out.println("removed /migration");
            } catch (KeeperException.NoNodeException e) {
                System.out.println("/migration absent");
            }
            // A KRaft claim of epoch 0, older than any a real quorum makes (its first leader has epoch 1): the real
            // controller takes it over; ZK-mode brokers see a KRaft controller and elect no ZK controller, which
            // would act on the partitions before the migration reads them.
            try {
                zk.delete("/controller", -1);
            } catch (KeeperException.NoNodeException e) {
                // absent: created below
            }
            zk.create("/controller", "{\"version\":2,\"brokerid\":-1,\"timestamp\":\"0\",\"kraftControllerEpoch\":0}"
                .getBytes(StandardCharsets.UTF_8), ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
            System.out.println("/controller: a KRaft claim of epoch 0");
        } finally {
            zk.close();
        }
    }

    static void compareLog(String source, File dir) throws Exception {
        RoundTrip rt = new RoundTrip();
        rt.file = source;
        rt.other = "controller";
        long[] migrated = {-1, 0, 0};
        MetadataImage s, c;
        try {
            s = readFile(new File(source));
            File[] segments = dir.listFiles((d, name) -> name.endsWith(".log"));
            if (segments == null || segments.length == 0) throw new IllegalStateException(dir + ": no log segment");
            Arrays.sort(segments);
            c = readFiles(Arrays.asList(segments), migrated);
        } catch (Throwable e) {
            System.out.println("RoundTrip: " + source + ": could not compare: " + e);
            e.printStackTrace();
            System.exit(2);
            return;
        }
        // The controller's own log says the migration finished (a ZkMigrationState MIGRATION record). What the live
        // cluster does after it (ISR expansions, a reassignment completing, an offline partition's election) is
        // Kafka's own work in dual-write, not what ZooKeeper held: the image ends at the migration's end.
        if (migrated[0] < 0)
            rt.diff("features/zk_migration_state (the controller's migration)", ZkMigrationState.MIGRATION,
                c.features().zkMigrationState());
        else if (migrated[1] > 0)
            rt.normalised.put("controller log read to the end of the migration (offset " + migrated[0] + "); "
                + migrated[1] + " later records are the live cluster's own changes in dual-write", 1L);
        if (migrated[2] > 0)
            rt.normalised.put("partition changes inside the migration transaction left out (the controller's own "
                + "elections: a broker unfenced while the driver was writing; the migration writes whole PartitionRecords)",
                migrated[2]);
        rt.count("controller_brokers", c.cluster().brokers().size());
        rt.compare(s, c);
        rt.finish(1);
    }

    static void writePasswordLog(File out, int broker) throws Exception {
        Uuid topic = Uuid.fromString("cm91bmQtdHJpcC10b3BpYw");
        List<Integer> replicas = broker < 0 ? Arrays.asList(1, 2) : Arrays.asList(broker);
        List<ApiMessage> records = Arrays.asList(
            new FeatureLevelRecord().setName(MetadataVersion.FEATURE_NAME)
                .setFeatureLevel(MetadataVersion.IBP_3_9_IV0.featureLevel()),
            new ZkMigrationStateRecord().setZkMigrationState(ZkMigrationState.MIGRATION.value()),
            new TopicRecord().setName("pw-topic").setTopicId(topic),
            new PartitionRecord().setTopicId(topic).setPartitionId(0).setReplicas(replicas)
                .setIsr(replicas).setLeader(replicas.get(replicas.size() - 1)).setLeaderEpoch(7).setPartitionEpoch(9),
            config(ConfigResource.Type.BROKER, String.valueOf(replicas.get(0)), "listener.name.internal.ssl.keystore.password", "broker-one-secret"),
            config(ConfigResource.Type.BROKER, String.valueOf(replicas.get(0)), "ssl.key.password", "key-secret"),
            config(ConfigResource.Type.BROKER, "", "ssl.truststore.password", "default-secret"),
            config(ConfigResource.Type.BROKER, "", "log.cleaner.threads", "2"),
            config(ConfigResource.Type.TOPIC, "pw-topic", "retention.ms", "86400000"),
            new ProducerIdsRecord().setBrokerId(1).setBrokerEpoch(5).setNextProducerId(3000),
            // One of each other kind ZooKeeper holds, so that this log alone (no gen-coverage) covers them all.
            new ClientQuotaRecord().setEntity(Arrays.asList(new ClientQuotaRecord.EntityData().setEntityType("user")
                .setEntityName("pw-user"))).setKey("producer_byte_rate").setValue(1048576.0),
            new UserScramCredentialRecord().setName("pw-user").setMechanism(ScramMechanism.SCRAM_SHA_256.type())
                .setSalt(bytes(16, 1)).setStoredKey(bytes(32, 2)).setServerKey(bytes(32, 3)).setIterations(4096),
            new AccessControlEntryRecord().setId(Uuid.fromString("cm91bmQtdHJpcC1hY2wtMQ"))
                .setResourceType(ResourceType.TOPIC.code()).setResourceName("pw-topic")
                .setPatternType(PatternType.LITERAL.code()).setPrincipal("User:pw-user").setHost("*")
                .setOperation(AclOperation.READ.code()).setPermissionType(AclPermissionType.ALLOW.code()),
            new DelegationTokenRecord().setOwner("User:pw-user").setRequester("User:pw-user")
                .setRenewers(Arrays.asList("User:pw-renewer")).setIssueTimestamp(1700000000000L)
                .setMaxTimestamp(4102444800000L).setExpirationTimestamp(4102444800000L).setTokenId("pw-token"));
        writeLog(out, Arrays.asList(records));
    }

    /* A log of one batch per list, base offsets following on, written with Kafka's own record writer. */
    static void writeLog(File out, List<List<ApiMessage>> batches) throws Exception {
        MetadataRecordSerde serde = new MetadataRecordSerde();
        Files.createDirectories(out.getParentFile().toPath());
        long base = 0;
        try (FileRecords f = FileRecords.open(out)) {
            for (List<ApiMessage> records : batches) {
                List<SimpleRecord> simple = new ArrayList<>();
                for (ApiMessage m : records) {
                    ApiMessageAndVersion mv = new ApiMessageAndVersion(m, (short) 0);
                    ObjectSerializationCache cache = new ObjectSerializationCache();
                    ByteBuffer buf = ByteBuffer.allocate(serde.recordSize(mv, cache));
                    serde.write(mv, cache, new ByteBufferAccessor(buf));
                    buf.flip();
                    simple.add(new SimpleRecord(1700000000000L, null, buf));
                }
                f.append(MemoryRecords.withRecords(RecordBatch.CURRENT_MAGIC_VALUE, base, Compression.NONE,
                    TimestampType.CREATE_TIME, -1L, (short) -1, -1, 1, false, simple.toArray(new SimpleRecord[0])));
                base += records.size();
            }
            f.flush();
        }
    }

    /* --compare-log's cut, on a log shaped as the controllers of two CI runs wrote it: an offline partition
     * migrated, then (a broker unfenced mid-transaction) the controller's own election of it between the driver's
     * batches, and the migration's end sharing its batch with the election's record (the raft client's linger).
     * Compared with the source image (the offline partition): equal, the election inside the transaction left out
     * and counted, the one after the end counted as a later record (exit 0); a DIFF otherwise. */
    static void checkMigrationCut(File dir) throws Exception {
        Uuid topic = Uuid.fromString("bWlncmF0aW9uLWN1dC10bw");
        ApiMessage level = new FeatureLevelRecord().setName(MetadataVersion.FEATURE_NAME)
            .setFeatureLevel(MetadataVersion.IBP_3_9_IV0.featureLevel());
        ApiMessage name = new TopicRecord().setName("cut-topic").setTopicId(topic);
        ApiMessage offline = new PartitionRecord().setTopicId(topic).setPartitionId(0).setReplicas(Arrays.asList(1))
            .setIsr(Arrays.asList(1)).setLeader(-1).setLeaderEpoch(1).setPartitionEpoch(0);
        ApiMessage elected = new PartitionChangeRecord().setTopicId(topic).setPartitionId(0).setLeader(1);
        ApiMessage migration = new ZkMigrationStateRecord().setZkMigrationState(ZkMigrationState.MIGRATION.value());
        File source = new File(dir, "source/" + "00000000000000000000.log");
        writeLog(source, Arrays.asList(Arrays.asList(level, migration, name, offline)));
        writeLog(new File(dir, "controller/00000000000000000000.log"), Arrays.asList(
            Arrays.asList(level),
            Arrays.asList(new BeginTransactionRecord().setName("ZK Migration")),
            Arrays.asList(name, offline),
            Arrays.asList(elected),
            Arrays.asList(migration, new EndTransactionRecord(), elected)));
        compareLog(source.getPath(), new File(dir, "controller"));
    }

    static byte[] bytes(int n, int fill) {
        byte[] b = new byte[n];
        Arrays.fill(b, (byte) fill);
        return b;
    }

    static ConfigRecord config(ConfigResource.Type type, String name, String key, String value) {
        return new ConfigRecord().setResourceType(type.id()).setResourceName(name).setName(key).setValue(value);
    }

    /* The image at the file's end, as a broker's MetadataLoader would have it (control batches skipped; a
     * checkpoint's header and footer are control batches too). */
    static MetadataImage readFile(File f) throws Exception {
        return readFiles(Arrays.asList(f), null);
    }

    /* Segments of one log, in offset order, through one loader. With `migrated` ({-1, 0, 0} on entry) the image
     * stops at the migration's end (MigrationCut): its offset goes to migrated[0], the count of records after it to
     * migrated[1], the controller's own partition changes inside the migration to migrated[2]. */
    static MetadataImage readFiles(List<File> files, long[] migrated) throws Exception {
        MetadataImage[] image = {MetadataImage.EMPTY};
        List<String> faults = new ArrayList<>();
        MetadataBatchLoader loader = new MetadataBatchLoader(new LogContext("[RoundTrip] "), Time.SYSTEM,
            (msg, cause) -> {
                faults.add(msg + (cause == null ? "" : ": " + cause));
                return new FaultHandlerException(msg, cause);
            }, (delta, img, manifest) -> image[0] = img);
        MetadataRecordSerde serde = new MetadataRecordSerde();
        LeaderAndEpoch leader = new LeaderAndEpoch(OptionalInt.empty(), 0);
        MigrationCut cut = migrated == null ? null : new MigrationCut(migrated);
        for (File f : files) try (FileRecords records = FileRecords.open(f, false)) {
            for (RecordBatch batch : records.batches()) {
                batch.ensureValid();
                if (batch.isControlBatch()) continue;
                List<ApiMessageAndVersion> list = new ArrayList<>();
                for (Record r : batch) {
                    ApiMessageAndVersion m = serde.read(new ByteBufferAccessor(r.value()), r.valueSize());
                    if (cut == null || cut.keep(m.message(), r.offset())) list.add(m);
                }
                if (!list.isEmpty())
                    loader.loadBatch(Batch.data(batch.baseOffset(), batch.partitionLeaderEpoch(),
                        batch.maxTimestamp(), batch.sizeInBytes(), list), leader);
            }
        }
        loader.maybeFlushBatches(leader);
        if (!faults.isEmpty()) throw new IllegalStateException("replaying " + files + ": " + faults);
        return image[0];
    }

    /* Where a fresh controller's log stops being what ZooKeeper held, record by record: Kafka's raft client lingers
     * and packs the appends of several controller events into one batch, so the migration's last records and the
     * live cluster's first can share one.  The migration ends with the EndTransactionRecord of the 'ZK Migration'
     * transaction that holds ZkMigrationState MIGRATION (with that record when there is no transaction).  Inside
     * the transaction the controller keeps serving brokers: one unfenced while the driver writes gets the offline
     * partitions it holds elected between the driver's batches (seen on 2 cores).  The driver only writes whole
     * PartitionRecords, so a PartitionChangeRecord there is the live cluster's own and is left out. */
    static final class MigrationCut {
        final long[] migrated;
        boolean inMigration, migrationState;

        MigrationCut(long[] migrated) { this.migrated = migrated; }

        boolean keep(ApiMessage m, long offset) {
            if (migrated[0] >= 0) {
                migrated[1]++;
                return false;
            }
            if (m instanceof BeginTransactionRecord) {
                inMigration = "ZK Migration".equals(((BeginTransactionRecord) m).name());
            } else if (m instanceof EndTransactionRecord || m instanceof AbortTransactionRecord) {
                if (inMigration && migrationState) migrated[0] = offset;
                inMigration = false;
            } else if (m instanceof PartitionChangeRecord && inMigration) {
                migrated[2]++;
                return false;
            } else if (m instanceof ZkMigrationStateRecord
                    && ((ZkMigrationStateRecord) m).zkMigrationState() == ZkMigrationState.MIGRATION.value()) {
                migrationState = true;
                if (!inMigration) migrated[0] = offset;
            }
            return true;
        }
    }

    /* Kafka's ZooKeeper reader, as the KRaft controller's migration driver runs it, replayed into an image. */
    static MetadataImage readZk(String connect, PasswordEncoder encoder) throws Exception {
        KafkaZkClient zk = KafkaZkClient.apply(connect, false, 30000, 30000, 10, Time.SYSTEM, "RoundTrip",
            new ZKClientConfig(), "kafka.server", "SessionExpireListener", false, false);
        try {
            MetadataDelta delta = new MetadataDelta.Builder().setImage(MetadataImage.EMPTY).build();
            ZkMigrationClient.apply(zk, encoder).readAllMetadata(
                batch -> batch.forEach(r -> delta.replay(r.message())), brokerId -> { });
            return delta.apply(MetadataProvenance.EMPTY);
        } finally {
            zk.close();
        }
    }

    void count(String what, long n) { counts.merge(what, n, Long::sum); }
    void normalise(String what) { normalised.merge(what, 1L, Long::sum); }
    void diff(String path, Object source, Object zk) { diffs.add(file + ": " + path + ": source " + source + ", " + other + " " + zk); }

    void compare(MetadataImage s, MetadataImage z) {
        compareTopics(s, z);
        compareMaps("configs", zkConfigs(s), z.configs().resourceData(), "configs",
            (path, a, b) -> {
                count("config_keys", a.data().size());
                // Password-type broker configs: written encrypted by kmproxy, decoded by Kafka's reader.
                count("password_config_keys", a.data().keySet().stream().filter(k -> k.endsWith(".password")).count());
                compareMaps(path, a.data(), b.data(), null, null);
            });
        compareMaps("client_quotas", s.clientQuotas().entities(), z.clientQuotas().entities(), "quota_entities",
            (path, a, b) -> {
                count("quota_values", a.quotaMap().size());
                compareMaps(path, integralQuotas(a.quotaMap()), b.quotaMap(), null, null);
            });
        s.scram().mechanisms().forEach((mech, users) -> count("scram_credentials", users.size()));
        compareMaps("scram", s.scram().mechanisms(), z.scram().mechanisms(), null,
            (path, a, b) -> compareMaps(path, a, b, null, null));
        compareAcls(s, z);
        compareMaps("delegation_tokens", s.delegationTokens().tokens(), z.delegationTokens().tokens(),
            "delegation_tokens", (path, a, b) -> {
                if (!a.tokenInformation().equals(b.tokenInformation())) diff(path, a, b);
            });
        count("producer_ids", 1);
        // Kafka's writer stores the block [next, next + 999] and its reader returns the block after it (next + 1000).
        long next = s.producerIds().nextProducerId();
        if (next >= 0 && z.producerIds().nextProducerId() == next + 1000)
            normalise("next_producer_id + 1000 (Kafka's reader returns the block after the one its writer stores)");
        else if (next != z.producerIds().nextProducerId())
            diff("producer_ids/next_producer_id", next, z.producerIds().nextProducerId());
        if (!s.cluster().isEmpty()) normalise("cluster (broker and controller registrations: not in ZooKeeper's image)");
        if (!s.features().isEmpty()) normalise("features (metadata.version, feature levels, ZkMigrationState: not read from ZooKeeper)");
    }

    /* Kafka's ZooKeeper reader reads broker configs and the configs of topics it reads; other resources (client
     * metrics, groups) and configs left behind by removed topics have no znode it reads. */
    Map<ConfigResource, ConfigurationImage> zkConfigs(MetadataImage s) {
        Map<ConfigResource, ConfigurationImage> out = new HashMap<>();
        s.configs().resourceData().forEach((r, c) -> {
            if (r.type() == ConfigResource.Type.BROKER
                || (r.type() == ConfigResource.Type.TOPIC && s.topics().getTopic(r.name()) != null))
                out.put(r, c);
            else
                normalise("configs of " + r.type() + (r.type() == ConfigResource.Type.TOPIC ? " not in the image" : "")
                    + " (Kafka's ZooKeeper reader does not read them)");
        });
        return out;
    }

    /* Kafka's writer (ZkConfigMigrationClient.writeClientQuotas) stores LONG and INT quota keys as integers. */
    Map<String, Double> integralQuotas(Map<String, Double> quotas) {
        Map<String, Double> out = new HashMap<>(quotas);
        for (String k : new String[] {"producer_byte_rate", "consumer_byte_rate", "connection_creation_rate"}) {
            Double v = out.get(k);
            if (v != null && v != (double) v.longValue()) {
                out.put(k, (double) v.longValue());
                normalise("integral quota values truncated (Kafka's writer stores LONG and INT quota keys as integers)");
            }
        }
        return out;
    }

    interface Inner<V> { void compare(String path, V a, V b); }

    /* Keys on either side only, then each common key's values (equals, or `inner`); counts the source's keys. */
    <K, V> void compareMaps(String path, Map<K, V> a, Map<K, V> b, String countAs, Inner<V> inner) {
        if (countAs != null) count(countAs, a.size());
        TreeSet<String> keys = new TreeSet<>();
        Map<String, K> byName = new HashMap<>();
        for (K k : a.keySet()) { keys.add(String.valueOf(k)); byName.put(String.valueOf(k), k); }
        for (K k : b.keySet()) { keys.add(String.valueOf(k)); byName.put(String.valueOf(k), k); }
        for (String name : keys) {
            K k = byName.get(name);
            V va = a.get(k), vb = b.get(k);
            String p = path + "/" + name;
            if (va == null || vb == null) diff(p, va == null ? "absent" : va, vb == null ? "absent" : vb);
            else if (inner != null) inner.compare(p, va, vb);
            else if (!valueEquals(va, vb)) diff(p, va, vb);
        }
    }

    static boolean valueEquals(Object a, Object b) {
        return Objects.equals(a, b);
    }

    void compareTopics(MetadataImage s, MetadataImage z) {
        compareMaps("topics", s.topics().topicsByName(), z.topics().topicsByName(), "topics", (path, a, b) -> {
            if (!a.id().equals(b.id())) diff(path + "/id", a.id(), b.id());
            count("partitions", a.partitions().size());
            compareMaps(path + "/partitions", a.partitions(), b.partitions(), null,
                (pp, pa, pb) -> comparePartition(pp, pa, pb));
        });
    }

    void comparePartition(String path, PartitionRegistration a, PartitionRegistration b) {
        check(path + "/replicas", Arrays.toString(a.replicas), Arrays.toString(b.replicas));
        check(path + "/isr", Arrays.toString(a.isr), Arrays.toString(b.isr));
        check(path + "/removing_replicas", Arrays.toString(a.removingReplicas), Arrays.toString(b.removingReplicas));
        check(path + "/adding_replicas", Arrays.toString(a.addingReplicas), Arrays.toString(b.addingReplicas));
        check(path + "/leader", a.leader, b.leader);
        check(path + "/leader_recovery_state", a.leaderRecoveryState, b.leaderRecoveryState);
        check(path + "/leader_epoch", a.leaderEpoch, b.leaderEpoch);
        // Kafka's reader sets the partition epoch to the state znode's zkVersion (ZkTopicMigrationClient).
        // Into an empty ZooKeeper, one sync creates each state znode once: its zkVersion, so the epoch read, is 0.
        if (b.partitionEpoch != 0) diff(path + "/partition_epoch (zkVersion of a state znode written once)", 0, b.partitionEpoch);
        else if (a.partitionEpoch != 0) normalise("partition_epoch (Kafka reads the state znode's zkVersion, 0 here)");
        // The ZooKeeper partition state has no directories and no ELR: Kafka's reader leaves them out.
        if (!Arrays.equals(a.directories, b.directories)) normalise("directories (not in ZooKeeper's partition state)");
        if (a.elr.length + a.lastKnownElr.length != 0)
            normalise("elr, last_known_elr (not in ZooKeeper's partition state)");
    }

    void check(String path, Object a, Object b) {
        if (!Objects.equals(a, b)) diff(path, a, b);
    }

    /* ACL ids are not in ZooKeeper (Kafka's reader makes new ones): compared as multisets of bindings. */
    void compareAcls(MetadataImage s, MetadataImage z) {
        Map<StandardAcl, Integer> a = new HashMap<>(), b = new HashMap<>();
        s.acls().acls().values().forEach(acl -> a.merge(acl, 1, Integer::sum));
        z.acls().acls().values().forEach(acl -> b.merge(acl, 1, Integer::sum));
        count("acls", s.acls().acls().size());
        if (!s.acls().acls().isEmpty()) normalise("acl ids (not in ZooKeeper: compared as bindings)");
        TreeSet<String> keys = new TreeSet<>();
        Map<String, StandardAcl> byName = new HashMap<>();
        for (StandardAcl k : a.keySet()) { keys.add(k.toString()); byName.put(k.toString(), k); }
        for (StandardAcl k : b.keySet()) { keys.add(k.toString()); byName.put(k.toString(), k); }
        for (String name : keys) {
            StandardAcl k = byName.get(name);
            check("acls/" + name + "/count", a.getOrDefault(k, 0), b.getOrDefault(k, 0));
        }
    }
}
