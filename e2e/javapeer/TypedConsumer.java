// TypedConsumer reads a typed topic with the Java client's AUTO_CONSUME schema (the
// topic's registered schema, fetched by each message's schema version) and prints each
// message's decoded value as one JSON line: {"type": schema type, "value": the decoded
// record as JSON}, then {"done": true, "received": n}.
//
//   java -cp "<classes>:<pulsar>/lib/*" TypedConsumer URL TOPIC COUNT TIMEOUT_MS SUBSCRIPTION
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.util.JsonFormat;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.schema.GenericRecord;
import org.apache.pulsar.common.schema.SchemaType;

public class TypedConsumer {
    public static void main(String[] args) throws Exception {
        String url = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]);
        long timeoutMs = Long.parseLong(args[3]);
        java.io.PrintStream out = new java.io.PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, "UTF-8");
        System.setOut(System.err); // the libraries' console output goes to stderr
        ObjectMapper om = new ObjectMapper();
        int received = 0;
        try (PulsarClient client = PulsarClient.builder().serviceUrl(url).build();
             Consumer<GenericRecord> c = client.newConsumer(Schema.AUTO_CONSUME()).topic(topic)
                     .subscriptionName(args[4]).subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                     .subscribe()) {
            while (received < count) {
                Message<GenericRecord> m = c.receive((int) timeoutMs, TimeUnit.MILLISECONDS);
                if (m == null) {
                    break;
                }
                ObjectNode line = om.createObjectNode();
                try {
                    GenericRecord v = m.getValue();
                    SchemaType t = v.getSchemaType();
                    line.put("type", t.toString());
                    Object nat = v.getNativeObject();
                    String json;
                    if (nat instanceof DynamicMessage) {
                        json = JsonFormat.printer().preservingProtoFieldNames().print((DynamicMessage) nat);
                    } else {
                        json = String.valueOf(nat); // Avro's GenericRecord and Jackson's JsonNode print JSON
                    }
                    line.set("value", om.readTree(json));
                } catch (Exception e) {
                    line.put("error", e.toString());
                }
                out.println(om.writeValueAsString(line));
                c.acknowledge(m);
                received++;
            }
        }
        ObjectNode done = om.createObjectNode();
        done.put("done", true);
        done.put("received", received);
        out.println(om.writeValueAsString(done));
    }
}
