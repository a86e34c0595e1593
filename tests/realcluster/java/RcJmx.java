// RcJmx: reads a running Kafka JVM's metrics over JMX, attaching to it by pid (no JMX port on the rig's JVMs).
//   RcJmx PID MBEAN [MBEAN...]   prints "MBEAN Value" per Yammer gauge, e.g.
//   kafka.controller:type=KafkaController,name=ZkWriteBehindLag
//   kafka.controller:type=KafkaController,name=LastAppliedRecordOffset
import com.sun.tools.attach.VirtualMachine;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public final class RcJmx {
    public static void main(String[] a) throws Exception {
        if (a.length < 2) {
            System.err.println("usage: RcJmx PID MBEAN...");
            System.exit(2);
        }
        VirtualMachine vm = VirtualMachine.attach(a[0]);
        String url;
        try {
            url = vm.startLocalManagementAgent();
        } finally {
            vm.detach();
        }
        try (JMXConnector c = JMXConnectorFactory.connect(new JMXServiceURL(url))) {
            MBeanServerConnection s = c.getMBeanServerConnection();
            for (int i = 1; i < a.length; i++) {
                Object v;
                try {
                    v = s.getAttribute(new ObjectName(a[i]), "Value");
                } catch (javax.management.InstanceNotFoundException e) {
                    v = "absent";
                }
                System.out.println(a[i] + " " + v);
            }
        }
    }
}
