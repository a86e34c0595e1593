/*
 * RequestCheck FRAMES... : every request frame kmproxy wrote ([int32 size][RequestHeader][body], as sent on the
 * wire) is read as a Kafka 3.9 broker or controller reads it, with Kafka's own kafka-clients classes:
 *   - RequestHeader.parse, then ApiKeys.isVersionSupported (SocketServer/KafkaApis refuse other versions);
 *   - RequestContext.parseRequest (what SocketServer's RequestChannel does), AbstractRequest.parseRequest, with no
 *     byte left over;
 *   - the request's own checks a server applies: ApiVersionsRequest.isValid (KafkaApis and ControllerApis answer
 *     INVALID_REQUEST otherwise), and the accessors the handlers call (LeaderAndIsr/UpdateMetadata/StopReplica
 *     partition states, Fetch's replica id, SaslHandshake's mechanism, DescribeCluster's endpoint type as a
 *     controller reads it);
 *   - serializing the parsed request again gives the very bytes that were sent (nothing misread or dropped).
 * Prints one line per frame ("OK api vN" or "REJECT api vN: why") and a summary; exits 1 if any was rejected.
 * Built at test time with javac against realkafka's class path (tests/realkafka.cmake, test_realkafka_requests.c).
 */
import java.net.InetAddress;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.Map;
import java.util.TreeMap;

import org.apache.kafka.clients.admin.EndpointType;
import org.apache.kafka.common.message.ApiMessageType;
import org.apache.kafka.common.message.DescribeClusterRequestData;
import org.apache.kafka.common.network.ClientInformation;
import org.apache.kafka.common.network.ListenerName;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.requests.AbstractRequest;
import org.apache.kafka.common.requests.ApiVersionsRequest;
import org.apache.kafka.common.requests.DescribeClusterRequest;
import org.apache.kafka.common.requests.FetchRequest;
import org.apache.kafka.common.requests.LeaderAndIsrRequest;
import org.apache.kafka.common.requests.RequestAndSize;
import org.apache.kafka.common.requests.RequestContext;
import org.apache.kafka.common.requests.RequestHeader;
import org.apache.kafka.common.requests.SaslHandshakeRequest;
import org.apache.kafka.common.requests.StopReplicaRequest;
import org.apache.kafka.common.requests.UpdateMetadataRequest;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.auth.SecurityProtocol;

public class RequestCheck {
    public static void main(String[] args) throws Exception {
        Map<String, Integer> seen = new TreeMap<>();
        int ok = 0, rejected = 0;
        for (String file : args) {
            ByteBuffer all = ByteBuffer.wrap(Files.readAllBytes(Paths.get(file)));
            while (all.remaining() >= 4) {
                int size = all.getInt();
                if (size < 0 || size > all.remaining()) {
                    System.out.println("REJECT frame size " + size + " with " + all.remaining() + " bytes left in " + file);
                    rejected++;
                    break;
                }
                byte[] payload = new byte[size];
                all.get(payload);
                String what = "?";
                try {
                    RequestHeader header = RequestHeader.parse(ByteBuffer.wrap(payload));
                    what = header.apiKey() + " v" + header.apiVersion();
                    check(header, payload);
                    System.out.println("OK " + what);
                    seen.merge(what, 1, Integer::sum);
                    ok++;
                } catch (Exception e) {
                    System.out.println("REJECT " + what + ": " + e);
                    rejected++;
                }
            }
        }
        for (Map.Entry<String, Integer> e : seen.entrySet())
            System.out.println("COVERED " + e.getKey() + " x" + e.getValue());
        System.out.println("frames=" + (ok + rejected) + " ok=" + ok + " rejected=" + rejected);
        System.exit(rejected == 0 ? 0 : 1);
    }

    static void check(RequestHeader header, byte[] payload) throws Exception {
        ApiKeys api = header.apiKey();
        short v = header.apiVersion();
        if (!api.isVersionSupported(v))
            throw new IllegalArgumentException("version " + v + " is not one Kafka 3.9 supports");
        ByteBuffer buf = ByteBuffer.wrap(payload);
        RequestHeader.parse(buf);
        RequestContext ctx = new RequestContext(header, "kmproxy-test", InetAddress.getLoopbackAddress(),
            KafkaPrincipal.ANONYMOUS, ListenerName.forSecurityProtocol(SecurityProtocol.PLAINTEXT),
            SecurityProtocol.PLAINTEXT, ClientInformation.EMPTY, false);
        RequestAndSize viaContext = ctx.parseRequest(buf.duplicate());
        RequestAndSize parsed = AbstractRequest.parseRequest(api, v, buf);
        if (buf.hasRemaining())
            throw new IllegalArgumentException(buf.remaining() + " bytes left after the body");
        if (viaContext.size != parsed.size)
            throw new IllegalArgumentException("RequestContext read " + viaContext.size + " bytes, the body is " + parsed.size);
        validate(parsed.request);
        ByteBuffer again = parsed.request.serializeWithHeader(header);
        byte[] bytes = new byte[again.remaining()];
        again.get(bytes);
        if (!Arrays.equals(bytes, payload))
            throw new IllegalArgumentException("serialized again it is " + bytes.length + " bytes, not the " +
                payload.length + " sent (or they differ)");
    }

    static void validate(AbstractRequest r) {
        if (r instanceof ApiVersionsRequest && !((ApiVersionsRequest) r).isValid())
            throw new IllegalArgumentException("ApiVersionsRequest.isValid is false (ClientSoftwareName '" +
                ((ApiVersionsRequest) r).data().clientSoftwareName() + "', ClientSoftwareVersion '" +
                ((ApiVersionsRequest) r).data().clientSoftwareVersion() + "')");
        if (r instanceof LeaderAndIsrRequest) {
            LeaderAndIsrRequest l = (LeaderAndIsrRequest) r;
            l.partitionStates().forEach(p -> { });
            l.topicIds();
            l.liveLeaders();
        }
        if (r instanceof UpdateMetadataRequest) {
            UpdateMetadataRequest u = (UpdateMetadataRequest) r;
            u.partitionStates().forEach(p -> { });
            u.liveBrokers();
            u.topicStates();
        }
        if (r instanceof StopReplicaRequest)
            ((StopReplicaRequest) r).partitionStates();
        if (r instanceof FetchRequest)
            ((FetchRequest) r).replicaId();
        if (r instanceof SaslHandshakeRequest && ((SaslHandshakeRequest) r).data().mechanism().isEmpty())
            throw new IllegalArgumentException("empty SASL mechanism");
        if (r instanceof DescribeClusterRequest)
            describeClusterAtController((DescribeClusterRequest) r);
    }

    /* kmproxy sends DescribeCluster only to controllers (quorum_cluster.c), so it is read as ControllerApis
     * reads it: the API must be served on the controller listener, and handleDescribeCluster's
     * AuthHelper.computeDescribeClusterResponse answers UNSUPPORTED_ENDPOINT_TYPE, MISMATCHED_ENDPOINT_TYPE or
     * (v0) INVALID_REQUEST unless the request's EndpointType is CONTROLLER. */
    static void describeClusterAtController(DescribeClusterRequest r) {
        if (!ApiKeys.DESCRIBE_CLUSTER.inScope(ApiMessageType.ListenerType.CONTROLLER))
            throw new IllegalArgumentException("DescribeCluster is not served on a controller listener");
        DescribeClusterRequestData d = r.data();
        EndpointType type = EndpointType.fromId(d.endpointType());
        if (type != EndpointType.CONTROLLER)
            throw new IllegalArgumentException("DescribeCluster v" + r.version() + " asks for endpoint type " +
                d.endpointType() + " (" + type + "): a controller answers it only for CONTROLLER (2)" +
                (r.version() == 0 ? ", which v0 cannot carry" : ""));
        d.includeClusterAuthorizedOperations(); /* read as the handler does; asking for them is allowed */
    }
}
