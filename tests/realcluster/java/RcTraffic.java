// RcTraffic: real clients through the real-cluster scenarios (kafka-clients).
//   RcTraffic produce BOOTSTRAP TOPIC PARTITIONS ACKFILE STOPFILE
//     an idempotent producer (acks=all) writes "0", "1", ... round-robin over the partitions, about 50 a second,
//     until STOPFILE exists; every acknowledged record is appended to ACKFILE as "PARTITION VALUE OFFSET".
//   RcTraffic check BOOTSTRAP TOPIC ACKFILE
//     reads every partition from the start to its end and checks: every acknowledged value is there, no value
//     twice, values in order per partition. Prints the counts; exit 0 when nothing is lost, duplicated or
//     out of order.
import java.io.*;
import java.nio.file.*;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class RcTraffic {
    public static void main(String[] a) throws Exception {
        if (a.length == 6 && a[0].equals("produce")) {
            produce(a[1], a[2], Integer.parseInt(a[3]), a[4], a[5]);
        } else if (a.length == 4 && a[0].equals("check")) {
            System.exit(check(a[1], a[2], a[3]) ? 0 : 1);
        } else {
            System.err.println("usage: RcTraffic produce BS TOPIC PARTITIONS ACKFILE STOPFILE | check BS TOPIC ACKFILE");
            System.exit(2);
        }
    }

    private static void produce(String bs, String topic, int partitions, String ackFile, String stopFile)
            throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bs);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "600000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (PrintWriter acks = new PrintWriter(new FileWriter(ackFile, true), true);
             KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (long i = 0; !Files.exists(Paths.get(stopFile)); i++) {
                final long value = i;
                producer.send(new ProducerRecord<>(topic, (int) (i % partitions), null, Long.toString(i)),
                    (md, err) -> {
                        if (err == null) {
                            synchronized (acks) {
                                acks.println(md.partition() + " " + value + " " + md.offset());
                            }
                        } else {
                            System.err.println("not acknowledged: " + value + ": " + err);
                        }
                    });
                Thread.sleep(20);
            }
            producer.flush();
        }
    }

    private static boolean check(String bs, String topic, String ackFile) throws Exception {
        Map<Long, Integer> acked = new HashMap<>();
        for (String line : Files.readAllLines(Paths.get(ackFile))) {
            String[] f = line.trim().split(" ");
            if (f.length == 3) acked.put(Long.parseLong(f[1]), Integer.parseInt(f[0]));
        }
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bs);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        Map<Long, Integer> seen = new HashMap<>();
        long dups = 0, disorder = 0, read = 0;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            c.partitionsFor(topic, Duration.ofSeconds(120)).forEach(i -> tps.add(new TopicPartition(topic, i.partition())));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(120));
            Map<Integer, Long> last = new HashMap<>();
            long deadline = System.currentTimeMillis() + 300000;
            while (System.currentTimeMillis() < deadline) {
                boolean done = true;
                for (TopicPartition tp : tps) done &= c.position(tp, Duration.ofSeconds(60)) >= end.get(tp);
                if (done) break;
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofSeconds(1))) {
                    long v = Long.parseLong(r.value());
                    read++;
                    if (seen.put(v, r.partition()) != null) dups++;
                    Long prev = last.put(r.partition(), v);
                    if (prev != null && prev >= v) disorder++;
                }
            }
        }
        long lost = 0;
        for (Map.Entry<Long, Integer> e : acked.entrySet()) {
            if (!e.getValue().equals(seen.get(e.getKey()))) {
                if (lost++ < 20) System.out.println("lost: value " + e.getKey() + " acknowledged in partition " + e.getValue());
            }
        }
        System.out.println("acknowledged " + acked.size() + " read " + read + " lost " + lost + " duplicated " + dups
                           + " out of order " + disorder);
        return acked.size() > 0 && lost == 0 && dups == 0 && disorder == 0;
    }
}
