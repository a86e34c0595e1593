// ResponseBuilder: responses that carry broker addresses (Metadata, FindCoordinator, DescribeCluster),
// built and read back by Kafka's own kafka-clients classes, for tests/test_inline_realkafka.c.
//
// One command per line on stdin, one answer line on stdout ("OK ..." or "ERR why"):
//   build API VERSION CORRELATION_ID  -> OK <hex of the response payload: header + body>
//   parse API VERSION HEX             -> OK <id>@<host>:<port> ... rest=<bytes left after the body>
// API is metadata, find_coordinator or describe_cluster.  Brokers 1 and 2 are at 10.9.9.1:9092 and
// 10.9.9.2:9093; the FindCoordinator answer also has an error entry (node -1), which parse lists too.
// Parsing goes through AbstractResponse.parseResponse, which is what NetworkClient does with a reply.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.List;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.message.DescribeClusterResponseData;
import org.apache.kafka.common.message.FindCoordinatorResponseData;
import org.apache.kafka.common.message.MetadataResponseData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.MessageUtil;
import org.apache.kafka.common.requests.AbstractResponse;
import org.apache.kafka.common.requests.DescribeClusterResponse;
import org.apache.kafka.common.requests.FindCoordinatorResponse;
import org.apache.kafka.common.requests.MetadataResponse;
import org.apache.kafka.common.requests.ResponseHeader;

public final class ResponseBuilder {
    private static ApiKeys api(String name) {
        switch (name) {
            case "metadata": return ApiKeys.METADATA;
            case "find_coordinator": return ApiKeys.FIND_COORDINATOR;
            case "describe_cluster": return ApiKeys.DESCRIBE_CLUSTER;
            default: throw new IllegalArgumentException("unknown API " + name);
        }
    }

    private static ApiMessage metadata() {
        MetadataResponseData m = new MetadataResponseData().setClusterId("c1").setControllerId(1);
        m.brokers().add(new MetadataResponseData.MetadataResponseBroker().setNodeId(1).setHost("10.9.9.1").setPort(9092));
        m.brokers().add(new MetadataResponseData.MetadataResponseBroker().setNodeId(2).setHost("10.9.9.2").setPort(9093)
                .setRack("r2"));
        MetadataResponseData.MetadataResponsePartition p = new MetadataResponseData.MetadataResponsePartition()
                .setPartitionIndex(0).setLeaderId(2).setLeaderEpoch(3).setReplicaNodes(List.of(2, 1))
                .setIsrNodes(List.of(2, 1));
        MetadataResponseData.MetadataResponseTopic t = new MetadataResponseData.MetadataResponseTopic().setName("t")
                .setTopicId(new Uuid(0x1234L, 0x5678L));
        t.partitions().add(p);
        m.topics().add(t);
        return m;
    }

    private static ApiMessage findCoordinator(short v) {
        FindCoordinatorResponseData f = new FindCoordinatorResponseData();
        if (v < 4)
            return f.setNodeId(2).setHost("10.9.9.2").setPort(9093);
        f.coordinators().add(new FindCoordinatorResponseData.Coordinator().setKey("g1").setNodeId(2)
                .setHost("10.9.9.2").setPort(9093));
        f.coordinators().add(new FindCoordinatorResponseData.Coordinator().setKey("g2").setNodeId(-1).setHost("")
                .setPort(-1).setErrorCode((short) 15));
        return f;
    }

    private static ApiMessage describeCluster(short v) {
        DescribeClusterResponseData d = new DescribeClusterResponseData().setClusterId("c1").setControllerId(1);
        if (v >= 1)
            d.setEndpointType((byte) 1);
        d.brokers().add(new DescribeClusterResponseData.DescribeClusterBroker().setBrokerId(1).setHost("10.9.9.1")
                .setPort(9092));
        d.brokers().add(new DescribeClusterResponseData.DescribeClusterBroker().setBrokerId(2).setHost("10.9.9.2")
                .setPort(9093));
        return d;
    }

    private static String build(ApiKeys key, short v, int corr) {
        ApiMessage body = key == ApiKeys.METADATA ? metadata()
                : key == ApiKeys.FIND_COORDINATOR ? findCoordinator(v) : describeCluster(v);
        short hv = key.responseHeaderVersion(v);
        ByteBuffer h = MessageUtil.toByteBuffer(new ResponseHeader(corr, hv).data(), hv);
        ByteBuffer b = MessageUtil.toByteBuffer(body, v);
        return hex(h) + hex(b);
    }

    private static String parse(ApiKeys key, short v, String hex) {
        ByteBuffer buf = ByteBuffer.wrap(unhex(hex));
        ResponseHeader.parse(buf, key.responseHeaderVersion(v));
        AbstractResponse r = AbstractResponse.parseResponse(key, buf, v);
        StringBuilder out = new StringBuilder();
        if (r instanceof MetadataResponse)
            for (MetadataResponseData.MetadataResponseBroker b : ((MetadataResponse) r).data().brokers())
                out.append(' ').append(b.nodeId()).append('@').append(b.host()).append(':').append(b.port());
        else if (r instanceof FindCoordinatorResponse) {
            FindCoordinatorResponseData d = ((FindCoordinatorResponse) r).data();
            if (v < 4)
                out.append(' ').append(d.nodeId()).append('@').append(d.host()).append(':').append(d.port());
            for (FindCoordinatorResponseData.Coordinator c : d.coordinators())
                out.append(' ').append(c.nodeId()).append('@').append(c.host()).append(':').append(c.port());
        } else
            for (DescribeClusterResponseData.DescribeClusterBroker b : ((DescribeClusterResponse) r).data().brokers())
                out.append(' ').append(b.brokerId()).append('@').append(b.host()).append(':').append(b.port());
        return out.append(" rest=").append(buf.remaining()).toString();
    }

    private static String hex(ByteBuffer b) {
        StringBuilder s = new StringBuilder();
        while (b.hasRemaining())
            s.append(String.format("%02x", b.get() & 0xff));
        return s.toString();
    }

    private static byte[] unhex(String s) {
        byte[] out = new byte[s.length() / 2];
        for (int i = 0; i < out.length; i++)
            out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        return out;
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null;) {
            String[] w = line.trim().split(" ");
            try {
                ApiKeys key = api(w[1]);
                short v = Short.parseShort(w[2]);
                System.out.println(w[0].equals("build") ? "OK " + build(key, v, Integer.parseInt(w[3]))
                        : "OK" + parse(key, v, w[3]));
            } catch (RuntimeException e) {
                System.out.println("ERR " + e);
            }
        }
    }
}
