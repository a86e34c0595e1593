// RcLoss: the traffic of the KAFKA-21062 reproduction (tests/realcluster/test_kafka21062.c).
//   RcLoss produce BOOTSTRAP TOPIC PARTITION ACKS ACKFILE STOPFILE
//     a producer with acks=ACKS (all: idempotent; 1: not) writes "ACKS-0", "ACKS-1", ... to one partition, about
//     50 a second, until STOPFILE exists; each acknowledged record is appended to ACKFILE as "VALUE OFFSET".
//   RcLoss check BOOTSTRAP TOPIC PARTITION ACKFILE...
//     reads the partition from its start to its end; per ACKFILE prints "ACKFILE acknowledged N lost M" and the
//     first lost values. Exit 0 when nothing acknowledged is lost, 1 otherwise.
import java.io.*;
import java.nio.file.*;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class RcLoss {
    public static void main(String[] a) throws Exception {
        if (a.length == 7 && a[0].equals("produce")) {
            produce(a[1], a[2], Integer.parseInt(a[3]), a[4], a[5], a[6]);
        } else if (a.length >= 5 && a[0].equals("check")) {
            System.exit(check(a[1], a[2], Integer.parseInt(a[3]), Arrays.copyOfRange(a, 4, a.length)) ? 0 : 1);
        } else {
            System.err.println("usage: RcLoss produce BS TOPIC PARTITION ACKS ACKFILE STOPFILE | check BS TOPIC PARTITION ACKFILE...");
            System.exit(2);
        }
    }

    private static void produce(String bs, String topic, int partition, String acks, String ackFile, String stopFile)
            throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bs);
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, Boolean.toString(acks.equals("all")));
        p.put(ProducerConfig.RETRIES_CONFIG, Integer.toString(Integer.MAX_VALUE));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.METADATA_MAX_AGE_CONFIG, "2000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        long failed[] = {0};
        try (PrintWriter out = new PrintWriter(new FileWriter(ackFile, true), true);
             KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (long i = 0; !Files.exists(Paths.get(stopFile)); i++) {
                final String value = acks + "-" + i;
                producer.send(new ProducerRecord<>(topic, partition, null, value), (md, err) -> {
                    synchronized (out) {
                        if (err == null) out.println(value + " " + md.offset());
                        else if (failed[0]++ < 20) System.err.println("not acknowledged: " + value + ": " + err);
                    }
                });
                Thread.sleep(20);
            }
            producer.flush();
        }
        System.err.println("not acknowledged: " + failed[0] + " in all");
    }

    private static boolean check(String bs, String topic, int partition, String[] ackFiles) throws Exception {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bs);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        Set<String> seen = new HashSet<>();
        TopicPartition tp = new TopicPartition(topic, partition);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long end = c.endOffsets(List.of(tp), Duration.ofSeconds(120)).get(tp);
            long deadline = System.currentTimeMillis() + 300000;
            while (c.position(tp, Duration.ofSeconds(60)) < end && System.currentTimeMillis() < deadline)
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofSeconds(1))) seen.add(r.value());
            System.out.println("partition end offset " + end + ", read " + seen.size());
        }
        boolean ok = true;
        for (String f : ackFiles) {
            long acked = 0, lost = 0;
            List<String> first = new ArrayList<>();
            for (String line : Files.readAllLines(Paths.get(f))) {
                String[] w = line.trim().split(" ");
                if (w.length != 2) continue;
                acked++;
                if (!seen.contains(w[0])) {
                    lost++;
                    if (first.size() < 5) first.add(w[0] + "@" + w[1]);
                }
            }
            System.out.println(f + " acknowledged " + acked + " lost " + lost + (first.isEmpty() ? "" : " e.g. " + first));
            ok &= lost == 0;
        }
        return ok;
    }
}
