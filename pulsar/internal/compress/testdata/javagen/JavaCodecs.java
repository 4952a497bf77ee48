// JavaCodecs runs the Java client's own payload codecs (CompressionCodecProvider in
// pulsar-common) for the compress package's tests. It is compiled against an Apache Pulsar
// distribution's lib/ by gen.sh and by the package's Java test; it has no other dependency.
//
//   java JavaCodecs gen DIR   compress every input of inputs() with LZ4, ZLIB, ZSTD and SNAPPY,
//                             write DIR/<input>.<codec> and DIR/MANIFEST
//   java JavaCodecs decode    read "<codec> <uncompressed size> <file>" lines on stdin, decode each
//                             file with the Java codec and print "<file> ok <sha256 of the output>"
//                             or "<file> error <exception>"
//
// Each codec runs on a direct buffer (what a producer's batch container hands it, the
// memory-address path) and on a heap buffer (the NIO path); both must give the same bytes.
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import org.apache.pulsar.common.api.proto.CompressionType;
import org.apache.pulsar.common.api.proto.SingleMessageMetadata;
import org.apache.pulsar.common.compression.CompressionCodec;
import org.apache.pulsar.common.compression.CompressionCodecProvider;
import org.apache.pulsar.common.protocol.Commands;

public final class JavaCodecs {
    private static final CompressionType[] CODECS = {
        CompressionType.LZ4, CompressionType.ZLIB, CompressionType.ZSTD, CompressionType.SNAPPY,
    };

    public static void main(String[] args) throws Exception {
        if (args.length == 2 && args[0].equals("gen")) {
            gen(Path.of(args[1]));
        } else if (args.length == 1 && args[0].equals("decode")) {
            decode();
        } else {
            System.err.println("usage: JavaCodecs gen DIR | JavaCodecs decode < lines");
            System.exit(2);
        }
    }

    // inputs: deterministic payloads, named; the Go tests know them only by size and sha256.
    static Map<String, byte[]> inputs() {
        Map<String, byte[]> in = new LinkedHashMap<>();
        in.put("empty", new byte[0]);
        in.put("tiny", "hello, pulsar".getBytes(StandardCharsets.UTF_8));
        in.put("text-1k", text(1024));
        in.put("mixed-64k", mixed(64 * 1024, 20240817L));
        in.put("mixed-160k", mixed(160 * 1024, 7L)); // past Snappy's 64 KiB fragments and ZSTD's 128 KiB blocks
        in.put("batch", batch());
        // the most compressible input: each codec's output comes nearest its format's expansion bound
        in.put("zeros-1m", new byte[1 << 20]);
        return in;
    }

    static byte[] text(int n) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; sb.length() < n; i++) {
            sb.append("Record ").append(i).append(": the agent reported TASK_RUNNING for task ")
                .append(i * 7 % 13).append(" on host-").append(i % 5).append(".\n");
        }
        return Arrays.copyOf(sb.toString().getBytes(StandardCharsets.US_ASCII), n);
    }

    // mixed: 4 KiB pieces that are in turn seeded random bytes, text, a run of one byte and a
    // short pattern, so every codec meets literals, long matches and incompressible data.
    static byte[] mixed(int n, long seed) {
        Random rng = new Random(seed);
        byte[] out = new byte[n];
        byte[] txt = text(4096);
        for (int off = 0, piece = 0; off < n; off += 4096, piece++) {
            int len = Math.min(4096, n - off);
            switch (piece % 4) {
                case 0 -> {
                    byte[] r = new byte[len];
                    rng.nextBytes(r);
                    System.arraycopy(r, 0, out, off, len);
                }
                case 1 -> System.arraycopy(txt, 0, out, off, len);
                case 2 -> Arrays.fill(out, off, off + len, (byte) piece);
                default -> {
                    for (int i = 0; i < len; i++) {
                        out[off + i] = (byte) "0123456789abcdef".charAt((i * 3 + piece) % 16);
                    }
                }
            }
        }
        return out;
    }

    // batch: what a producer's batch container compresses: each message's SingleMessageMetadata,
    // size-prefixed, then its payload, serialized by the client's own Commands.
    static byte[] batch() {
        ByteBuf buf = Unpooled.buffer();
        for (int i = 0; i < 6; i++) {
            byte[] payload = ("{\"type\":\"TASK_UPDATED\",\"task_id\":\"task-" + i + "\",\"state\":\"TASK_RUNNING\"}")
                .getBytes(StandardCharsets.UTF_8);
            SingleMessageMetadata smm = new SingleMessageMetadata()
                .setPayloadSize(payload.length)
                .setSequenceId(i)
                .setEventTime(1_700_000_000_000L + i);
            if (i % 2 == 0) {
                smm.setPartitionKey("agent-" + i);
            }
            smm.addProperty().setKey("stream").setValue("s" + (i % 3));
            Commands.serializeSingleMessageInBatchWithPayload(smm, Unpooled.wrappedBuffer(payload), buf);
        }
        byte[] out = new byte[buf.readableBytes()];
        buf.readBytes(out);
        return out;
    }

    static void gen(Path dir) throws Exception {
        Files.createDirectories(dir);
        StringBuilder manifest = new StringBuilder();
        manifest.append("# Written by testdata/javagen/gen.sh with the Java client's codecs (pulsar-common ")
            .append(pulsarVersion()).append(").\n")
            .append("# file codec uncompressed-size sha256-of-uncompressed\n");
        for (Map.Entry<String, byte[]> e : inputs().entrySet()) {
            byte[] in = e.getValue();
            for (CompressionType type : CODECS) {
                CompressionCodec codec = CompressionCodecProvider.getCompressionCodec(type);
                byte[] direct = bytes(codec.encode(direct(in)));
                byte[] heap = bytes(codec.encode(Unpooled.wrappedBuffer(in)));
                if (!Arrays.equals(direct, heap)) {
                    throw new IllegalStateException(type + " " + e.getKey() + ": the direct and heap paths differ");
                }
                byte[] back = bytes(codec.decode(direct(direct), in.length));
                if (!Arrays.equals(back, in)) {
                    throw new IllegalStateException(type + " " + e.getKey() + ": does not decode back");
                }
                String file = e.getKey() + "." + type.name().toLowerCase(Locale.ROOT);
                Files.write(dir.resolve(file), direct);
                manifest.append(file).append(' ').append(type.name()).append(' ').append(in.length)
                    .append(' ').append(sha256(in)).append('\n');
            }
        }
        Files.writeString(dir.resolve("MANIFEST"), manifest.toString());
    }

    static void decode() throws Exception {
        BufferedReader r = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = r.readLine()) != null; ) {
            line = line.strip();
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split(" ", 3);
            String file = f[2];
            try {
                CompressionCodec codec = CompressionCodecProvider.getCompressionCodec(CompressionType.valueOf(f[0]));
                int size = Integer.parseInt(f[1]);
                byte[] src = Files.readAllBytes(Path.of(file));
                byte[] direct = bytes(codec.decode(direct(src), size));
                byte[] heap = bytes(codec.decode(Unpooled.wrappedBuffer(src), size));
                if (!Arrays.equals(direct, heap)) {
                    throw new IllegalStateException("the direct and heap paths decode differently");
                }
                System.out.println(file + " ok " + sha256(direct));
            } catch (Exception | AssertionError ex) {
                System.out.println(file + " error " + ex.toString().replace('\n', ' '));
            }
        }
        System.out.flush();
    }

    static ByteBuf direct(byte[] b) {
        ByteBuf d = Unpooled.directBuffer(Math.max(b.length, 1));
        d.writeBytes(b);
        return d;
    }

    static byte[] bytes(ByteBuf b) {
        byte[] out = new byte[b.readableBytes()];
        b.getBytes(b.readerIndex(), out);
        b.release();
        return out;
    }

    static String sha256(byte[] b) throws Exception {
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(b));
    }

    static String pulsarVersion() {
        String v = CompressionCodecProvider.class.getPackage().getImplementationVersion();
        return v == null ? "unknown version" : v;
    }
}
