package dev.sparkcdc.debezium;

import java.io.BufferedWriter;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import javax.management.MBeanServer;
import javax.management.ObjectName;

import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.storage.SimpleHeaderConverter;

import com.fasterxml.jackson.databind.ObjectMapper;

import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;

/**
 * Runs one Debezium connector in the embedded engine and writes every record it emits as a Kafka
 * Connect worker would write it to Kafka: key and value through Kafka Connect's
 * {@link JsonConverter} (both {@code schemas.enable=true} and {@code false}, from the same record),
 * headers through the worker's default {@link SimpleHeaderConverter}. No Kafka, no Connect cluster.
 *
 * <p>Used by tests/test_debezium_differential.py. Arguments:
 * <ul>
 *   <li>{@code --properties FILE}: the engine and connector properties (a Java properties file);
 *       the database password comes from the environment variable {@code DEBEZIUM_PASSWORD};</li>
 *   <li>{@code --out FILE}: one JSON line per record, in the order the engine hands them over:
 *       {@code topic}, {@code key}/{@code value} (schemas on), {@code key_plain}/{@code value_plain}
 *       (schemas off), each the converter's bytes in base64 (null for a null key or a tombstone),
 *       and {@code headers}, a list of [name, base64 of the converted value];</li>
 *   <li>{@code --ready FILE}: created once the connector streams (its snapshot is over);</li>
 *   <li>{@code --until-topic TOPIC}: the run ends after the batch holding a record of this topic;</li>
 *   <li>{@code --timeout SECONDS} (default 300): the run fails after this long.</li>
 * </ul>
 * Exits 0 after the record of {@code --until-topic}, else 1 with the reason on stderr.
 */
public final class DebeziumCapture {

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Base64.Encoder B64 = Base64.getEncoder();

    private DebeziumCapture() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = parse(argv);
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(required(a, "properties"))) {
            props.load(in);
        }
        String password = System.getenv("DEBEZIUM_PASSWORD");
        if (password != null) {
            props.setProperty("database.password", password);
        }
        String untilTopic = required(a, "until-topic");
        long timeoutS = Long.parseLong(a.getOrDefault("timeout", "300"));
        Converters converters = new Converters();
        CompletableFuture<String> finished = new CompletableFuture<>();

        try (BufferedWriter out = Files.newBufferedWriter(Path.of(required(a, "out")), StandardCharsets.UTF_8)) {
            DebeziumEngine<RecordChangeEvent<SourceRecord>> engine = DebeziumEngine
                    .create(ChangeEventFormat.of(Connect.class))
                    .using(props)
                    .using((success, message, error) -> finished.complete(
                            "the engine stopped before a record of " + untilTopic + ": " + message
                                    + (error == null ? "" : " (" + error + ")")))
                    .notifying((batch, committer) -> {
                        boolean last = false;
                        try {
                            for (RecordChangeEvent<SourceRecord> event : batch) {
                                SourceRecord record = event.record();
                                out.write(converters.line(record));
                                out.newLine();
                                last |= untilTopic.equals(record.topic());
                                committer.markProcessed(event);
                            }
                            out.flush();
                        } catch (IOException e) {
                            finished.complete("cannot write the records: " + e);
                            return;
                        }
                        committer.markBatchFinished();
                        if (last) {
                            finished.complete(null);
                        }
                    })
                    .build();
            ExecutorService runner = Executors.newSingleThreadExecutor();
            runner.execute(engine);
            String error;
            try {
                String ready = a.get("ready");
                if (ready != null && awaitStreaming(finished, timeoutS)) {
                    Files.writeString(Path.of(ready), "streaming\n");
                }
                error = finished.get(timeoutS, TimeUnit.SECONDS);
            } catch (TimeoutException e) {
                error = "timed out after " + timeoutS + " s without a record of " + untilTopic;
            }
            out.flush();
            if (error != null) {
                System.err.println("debezium-capture: " + error);
            }
            System.err.flush();
            Runtime.getRuntime().halt(error == null ? 0 : 1);  // the engine's shutdown is not needed
        }
    }

    /** The worker's converters: JsonConverter for keys and values (schemas on and off), headers. */
    static final class Converters {
        final JsonConverter keyOn = json(true, true);
        final JsonConverter valueOn = json(false, true);
        final JsonConverter keyOff = json(true, false);
        final JsonConverter valueOff = json(false, false);
        final SimpleHeaderConverter headers = new SimpleHeaderConverter();

        Converters() {
            headers.configure(Map.of());
        }

        static JsonConverter json(boolean isKey, boolean schemas) {
            JsonConverter c = new JsonConverter();
            c.configure(Map.of("schemas.enable", Boolean.toString(schemas)), isKey);
            return c;
        }

        String line(SourceRecord r) throws IOException {
            String topic = r.topic();
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("topic", topic);
            line.put("key", b64(keyOn.fromConnectData(topic, r.keySchema(), r.key())));
            line.put("value", b64(valueOn.fromConnectData(topic, r.valueSchema(), r.value())));
            line.put("key_plain", b64(keyOff.fromConnectData(topic, r.keySchema(), r.key())));
            line.put("value_plain", b64(valueOff.fromConnectData(topic, r.valueSchema(), r.value())));
            List<List<String>> hs = new ArrayList<>();
            for (Header h : r.headers()) {
                hs.add(List.of(h.key(), b64(headers.fromConnectHeader(topic, h.key(), h.schema(), h.value()))));
            }
            line.put("headers", hs);
            return JSON.writeValueAsString(line);
        }

        static String b64(byte[] bytes) {
            return bytes == null ? null : B64.encodeToString(bytes);
        }
    }

    /**
     * Wait until the connector's log reader reports itself connected (its JMX metrics): true, or
     * false when the run finished first (failed).
     */
    static boolean awaitStreaming(CompletableFuture<String> finished, long timeoutS) throws Exception {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        ObjectName pattern = new ObjectName("debezium.*:type=connector-metrics,context=streaming,*");
        long deadline = System.currentTimeMillis() + timeoutS * 1000;
        while (System.currentTimeMillis() < deadline && !finished.isDone()) {
            for (ObjectName name : server.queryNames(pattern, null)) {
                if (Boolean.TRUE.equals(server.getAttribute(name, "Connected"))) {
                    return true;
                }
            }
            Thread.sleep(50);
        }
        if (!finished.isDone()) {
            throw new TimeoutException();
        }
        return false;
    }

    static String required(Map<String, String> a, String key) {
        String v = a.get(key);
        if (v == null) {
            throw new IllegalArgumentException("--" + key + " is required");
        }
        return v;
    }

    static Map<String, String> parse(String[] argv) {
        Map<String, String> out = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + argv[i]);
            }
            out.put(argv[i].substring(2), argv[i + 1]);
        }
        return out;
    }
}
