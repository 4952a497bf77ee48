// Peer is the e2e suite's Java peer: Apache Pulsar's reference Java client driven by a JSON
// spec on stdin, answering with JSON lines on stdout (one per message, then a summary), so
// the Go tests can hold the bridge against the client the protocol is defined by.
//
//   java -cp "<classes>:<pulsar>/lib/*" Peer < spec.json
//
// The spec's "op" is "produce" or "consume"; Spec below lists every field. Anything the
// client libraries print goes to stderr: stdout carries only the JSON lines.
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.ClientBuilder;
import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.ConsumerBuilder;
import org.apache.pulsar.client.api.ConsumerCryptoFailureAction;
import org.apache.pulsar.client.api.DeadLetterPolicy;
import org.apache.pulsar.client.api.HashingScheme;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerBuilder;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.TypedMessageBuilder;
import org.apache.pulsar.client.impl.DefaultCryptoKeyReader;

public class Peer {
    /** Spec is the whole of what a run is told; unset fields keep the defaults given here. */
    public static class Spec {
        public String op;                    // produce | consume
        public String url = "pulsar://127.0.0.1:6650";
        public String topic;
        // produce
        public int count = 10;
        public long seed = 1;
        public int size = 100;               // payload bytes (sizes, when given, cycle)
        public int[] sizes;
        public String compression = "NONE";  // NONE LZ4 ZLIB ZSTD SNAPPY
        public boolean batching = true;
        public int batchMaxMessages = 1000;
        public int batchMaxBytes;            // batchingMaxBytes, 0: the client's default (128 KiB)
        public int batchDelayMs = 10;
        public boolean chunking;             // enableChunking (needs batching off)
        public int chunkMaxBytes;            // chunkMaxMessageSize, 0: the broker's limit
        public int keys;                     // > 0: key keyPrefix + (i % keys)
        public String keyPrefix = "k";
        public boolean orderingKeys;         // ordering key "o<i % keys>"
        public boolean properties;           // properties i=<i>, p=peer
        public long eventTime;               // > 0: event time eventTime + i
        public String hashing = "JavaStringHash"; // JavaStringHash (the Java client's default) | Murmur3_32Hash
        public String encryptKey;            // addEncryptionKey(name) with publicKey
        public String publicKey;             // PEM file
        public String schema = "BYTES";      // BYTES | JSON (Item below)
        public int sendTimeoutMs = 30000;
        // consume
        public String subscription = "peer";
        public String type = "Exclusive";    // Exclusive Shared Failover Key_Shared
        public String position = "Earliest";
        public int timeoutMs = 30000;        // give up after this long without a message
        public boolean batchIndexAck;
        public String ack = "all";           // all | none | mod (receive index % ackMod == ackRem) | nack
        public int ackMod = 2;
        public int ackRem;
        public String nack = "";             // "" | all | mod (same mod and rem as ack)
        public int negativeAckDelayMs = 200;
        public int dlqMaxRedeliver;          // > 0: DeadLetterPolicy
        public String dlqTopic;
        public String dlqInitialSubscription; // created on the dead-letter topic with it
        public List<String> nackSha256;      // nack every delivery of these payloads, ack the rest
        public String privateKey;            // PEM file: DefaultCryptoKeyReader
        public String cryptoFailure;         // FAIL DISCARD CONSUME
        public int ackTimeoutMs;             // > 0: ackTimeout
        public long seekTime;                // consume: after the first pass, seek to this publish time (ms) and read again (phase 2)
        public String seekId;                // consume: after the first pass, seek to the message received with this ledger:entry:partition:batchIndex
        public String token;                 // authentication token (AuthenticationToken), none when null
        public boolean payloads;             // consume: each line carries the payload as UTF-8 text
        public String topicsPattern;         // consume: the topics this pattern matches (topicsPattern) instead of topic
    }

    /** Item is the JSON-schema record a producer with schema JSON sends. */
    public static class Item {
        public int seq;
        public String name;
        public double score;
        public List<String> tags;
    }

    static PrintStream out;
    static final ObjectMapper json = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err); // the libraries' console output goes to stderr
        Spec s = json.readValue(System.in, Spec.class);
        ClientBuilder cb = PulsarClient.builder().serviceUrl(s.url);
        if (s.token != null) {
            cb.authentication(AuthenticationFactory.token(s.token));
        }
        PulsarClient c = cb.build();
        switch (s.op) {
            case "produce" -> produce(c, s);
            case "consume" -> consume(c, s);
            default -> throw new IllegalArgumentException("op " + s.op);
        }
        try {
            c.close();
        } catch (Exception e) {
            System.err.println("closing the client: " + e);
        }
        System.exit(0); // client threads must not keep the JVM up
    }

    /** payload is message i's bytes: a readable prefix and seeded bytes from a small alphabet (compressible). */
    static byte[] payload(Spec s, int i) {
        int n = s.sizes != null && s.sizes.length > 0 ? s.sizes[i % s.sizes.length] : s.size;
        byte[] b = new byte[n];
        byte[] head = ("peer-" + s.seed + "-" + i + "-").getBytes(StandardCharsets.US_ASCII);
        Random r = new Random(s.seed * 1_000_003L + i);
        for (int j = 0; j < n; j++) {
            b[j] = j < head.length ? head[j] : (byte) (r.nextInt(16) == 0 ? r.nextInt(256) : 'a' + r.nextInt(8));
        }
        return b;
    }

    static String sha(byte[] b) throws Exception {
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(b));
    }

    static ObjectNode idJSON(MessageId id) {
        ObjectNode o = json.createObjectNode();
        if (id instanceof MessageIdAdv a) {
            o.put("ledger", a.getLedgerId());
            o.put("entry", a.getEntryId());
            o.put("partition", a.getPartitionIndex());
            o.put("batchIndex", a.getBatchIndex());
            o.put("batchSize", a.getBatchSize());
        }
        o.put("text", id.toString());
        return o;
    }

    static void produce(PulsarClient c, Spec s) throws Exception {
        boolean isJSON = "JSON".equals(s.schema);
        Schema<?> schema = isJSON ? Schema.JSON(Item.class) : Schema.BYTES;
        @SuppressWarnings("unchecked")
        ProducerBuilder<Object> pb = (ProducerBuilder<Object>) c.newProducer(schema);
        pb.topic(s.topic)
          .compressionType(CompressionType.valueOf(s.compression))
          .enableBatching(s.batching && !s.chunking)
          .batchingMaxMessages(s.batchMaxMessages)
          .batchingMaxPublishDelay(s.batchDelayMs, TimeUnit.MILLISECONDS)
          .hashingScheme(HashingScheme.valueOf(s.hashing))
          .sendTimeout(s.sendTimeoutMs, TimeUnit.MILLISECONDS)
          .blockIfQueueFull(true);
        if (s.batchMaxBytes > 0) {
            pb.batchingMaxBytes(s.batchMaxBytes);
        }
        if (s.chunking) {
            pb.enableChunking(true);
            if (s.chunkMaxBytes > 0) {
                pb.chunkMaxMessageSize(s.chunkMaxBytes);
            }
        }
        if (s.encryptKey != null) {
            pb.addEncryptionKey(s.encryptKey)
              .cryptoKeyReader(DefaultCryptoKeyReader.builder().defaultPublicKey("file://" + s.publicKey).build());
        }
        @SuppressWarnings("unchecked")
        Schema<Object> enc = (Schema<Object>) schema;
        Producer<Object> p = pb.create();
        try {
            List<CompletableFuture<MessageId>> sent = new ArrayList<>();
            List<ObjectNode> lines = new ArrayList<>();
            for (int i = 0; i < s.count; i++) {
                Object value;
                byte[] bytes;
                if (isJSON) {
                    Item it = new Item();
                    it.seq = i;
                    it.name = "item-" + s.seed + "-" + i;
                    it.score = i * 1.5;
                    it.tags = List.of("a" + (i % 3), "b");
                    value = it;
                    bytes = enc.encode(it);
                } else {
                    bytes = payload(s, i);
                    value = bytes;
                }
                TypedMessageBuilder<Object> m = p.newMessage().value(value);
                ObjectNode line = json.createObjectNode();
                line.put("i", i);
                if (s.keys > 0) {
                    String k = s.keyPrefix + (i % s.keys);
                    m.key(k);
                    line.put("key", k);
                    if (s.orderingKeys) {
                        String ok = "o" + (i % s.keys);
                        m.orderingKey(ok.getBytes(StandardCharsets.UTF_8));
                        line.put("orderingKey", ok);
                    }
                }
                if (s.properties) {
                    m.property("i", Integer.toString(i)).property("p", "peer");
                }
                if (s.eventTime > 0) {
                    m.eventTime(s.eventTime + i);
                }
                line.put("sha256", sha(bytes));
                line.put("size", bytes.length);
                lines.add(line);
                sent.add(m.sendAsync());
            }
            try {
                p.flush();
            } catch (Exception e) {
                // a failed send is reported on its own line below
            }
            int failed = 0;
            for (int i = 0; i < sent.size(); i++) {
                ObjectNode line = lines.get(i);
                try {
                    line.set("id", idJSON(sent.get(i).get()));
                } catch (Exception e) {
                    failed++;
                    line.put("error", String.valueOf(e.getCause() != null ? e.getCause() : e));
                }
                out.println(json.writeValueAsString(line));
            }
            ObjectNode done = json.createObjectNode();
            done.put("done", true);
            done.put("sent", sent.size() - failed);
            done.put("failed", failed);
            out.println(json.writeValueAsString(done));
        } finally {
            try {
                p.close();
            } catch (Exception e) {
                // a broker that failed the sends may fail the close too: the summary is out
                System.err.println("closing the producer: " + e);
            }
        }
    }

    static boolean pick(Spec s, String how, int i) {
        return switch (how) {
            case "all" -> true;
            case "mod" -> i % s.ackMod == s.ackRem;
            default -> false;
        };
    }

    static void consume(PulsarClient c, Spec s) throws Exception {
        ConsumerBuilder<byte[]> cb = c.newConsumer(Schema.BYTES);
        if (s.topicsPattern != null) {
            cb.topicsPattern(s.topicsPattern).patternAutoDiscoveryPeriod(1, TimeUnit.SECONDS);
        } else {
            cb.topic(s.topic);
        }
        cb.subscriptionName(s.subscription)
            .subscriptionType(SubscriptionType.valueOf(s.type))
            .subscriptionInitialPosition(SubscriptionInitialPosition.valueOf(s.position))
            .enableBatchIndexAcknowledgment(s.batchIndexAck)
            .negativeAckRedeliveryDelay(s.negativeAckDelayMs, TimeUnit.MILLISECONDS);
        if (s.dlqMaxRedeliver > 0) {
            DeadLetterPolicy.DeadLetterPolicyBuilder d = DeadLetterPolicy.builder().maxRedeliverCount(s.dlqMaxRedeliver);
            if (s.dlqTopic != null) {
                d.deadLetterTopic(s.dlqTopic);
            }
            if (s.dlqInitialSubscription != null) {
                d.initialSubscriptionName(s.dlqInitialSubscription);
            }
            cb.deadLetterPolicy(d.build());
        }
        if (s.privateKey != null) {
            cb.cryptoKeyReader(DefaultCryptoKeyReader.builder().defaultPrivateKey("file://" + s.privateKey).build());
        }
        if (s.cryptoFailure != null) {
            cb.cryptoFailureAction(ConsumerCryptoFailureAction.valueOf(s.cryptoFailure));
        }
        if (s.ackTimeoutMs > 0) {
            cb.ackTimeout(s.ackTimeoutMs, TimeUnit.MILLISECONDS);
        }
        int[] counts = new int[3]; // received, acked, nacked
        try (Consumer<byte[]> con = cb.subscribe()) {
            MessageId target = readAll(con, s, s.count, 1, counts);
            if (s.seekTime > 0 || s.seekId != null) {
                // The oracle of a replay: the subscription is moved as an application
                // moves it, by time or to a message it received (on a partitioned
                // topic, the consumer's TopicMessageId: only its partition moves).
                if (s.seekTime > 0) {
                    con.seek(s.seekTime);
                } else if (target != null) {
                    con.seek(target);
                } else {
                    throw new IllegalStateException("seekId " + s.seekId + " was not received");
                }
                readAll(con, s, 0, 2, counts);
            }
        }
        int received = counts[0], acked = counts[1], nacked = counts[2];
        ObjectNode done = json.createObjectNode();
        done.put("done", true);
        done.put("received", received);
        done.put("acked", acked);
        done.put("nacked", nacked);
        out.println(json.writeValueAsString(done));
    }

    // readAll receives count messages (0: until timeoutMs passes without one), reporting
    // each with its phase, and returns the one whose id is seekId, if it came.
    static MessageId readAll(Consumer<byte[]> con, Spec s, int count, int phase, int[] counts) throws Exception {
        MessageId target = null;
        int n = 0;
        while (count <= 0 || n < count) {
            Message<byte[]> m = con.receive(s.timeoutMs, TimeUnit.MILLISECONDS);
            if (m == null) {
                break;
            }
            byte[] data = m.getData();
            ObjectNode line = json.createObjectNode();
            line.put("i", counts[0]);
            line.put("phase", phase);
            line.set("id", idJSON(m.getMessageId()));
            line.put("topic", m.getTopicName());
            if (m.hasKey()) {
                line.put("key", m.getKey());
            }
            if (m.hasOrderingKey()) {
                line.put("orderingKey", new String(m.getOrderingKey(), StandardCharsets.UTF_8));
            }
            Map<String, String> props = new HashMap<>(m.getProperties());
            line.set("properties", json.valueToTree(props));
            line.put("eventTime", m.getEventTime());
            line.put("publishTime", m.getPublishTime());
            line.put("redeliveryCount", m.getRedeliveryCount());
            line.put("sha256", sha(data));
            line.put("size", data.length);
            if (s.payloads) {
                line.put("payload", new String(data, StandardCharsets.UTF_8));
            }
            String action = "none";
            String h = line.get("sha256").asText();
            if (s.nackSha256 != null) {
                if (s.nackSha256.contains(h)) {
                    con.negativeAcknowledge(m);
                    counts[2]++;
                    action = "nack";
                } else {
                    con.acknowledge(m);
                    counts[1]++;
                    action = "ack";
                }
            } else if (pick(s, s.nack, counts[0])) {
                con.negativeAcknowledge(m);
                counts[2]++;
                action = "nack";
            } else if (pick(s, s.ack, counts[0])) {
                con.acknowledge(m);
                counts[1]++;
                action = "ack";
            }
            line.put("action", action);
            out.println(json.writeValueAsString(line));
            counts[0]++;
            n++;
            if (s.seekId != null && s.seekId.equals(idText(m.getMessageId()))) {
                target = m.getMessageId();
            }
        }
        return target;
    }

    // idText is ledger:entry:partition:batchIndex.
    static String idText(MessageId id) {
        if (id instanceof MessageIdAdv a) {
            return a.getLedgerId() + ":" + a.getEntryId() + ":" + a.getPartitionIndex() + ":" + a.getBatchIndex();
        }
        return id.toString();
    }
}
