package dev.sparkcdc.peers;

import java.lang.management.ManagementFactory;
import java.time.Instant;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;

import javax.management.MBeanServer;
import javax.management.ObjectName;

import org.apache.kafka.connect.source.SourceRecord;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.embedded.Connect;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;
import io.debezium.engine.format.Json;

/**
 * Benchmark peer: Debezium's embedded engine ({@code DebeziumEngine}) with the MariaDB connector,
 * into a counting consumer that writes nothing (the peer's best case).
 *
 * <p>Modes:
 * <ul>
 *   <li>{@code --mode snapshot}: {@code snapshot.mode=initial} with fresh offsets; stops once
 *       {@code --expect} of the table's records are counted;</li>
 *   <li>{@code --mode record-offset}: {@code snapshot.mode=no_data} (schemas only) with heartbeats
 *       every 100 ms, until the binlog reader is connected and a heartbeat came after that, then
 *       stops: the offset file ({@code --offsets}) and schema history ({@code --history}) now hold
 *       a streaming position (an offset from the schema snapshot alone would make a restarted
 *       connector snapshot again, from the position of that moment);</li>
 *   <li>{@code --mode catch-up}: starts from that offset file and stops once {@code --expect}
 *       change records are counted.</li>
 * </ul>
 * It prints one JSON line: rows, seconds from the process's launch to the last record counted,
 * rows/s. Records come as JSON ({@code --records json}, the engine's documented format) or as Kafka
 * Connect records with no conversion ({@code --records raw}). {@code --tuned} sets
 * {@code poll.interval.ms}, {@code max.batch.size} and {@code max.queue.size}; without it every
 * setting is as shipped. Connection: {@code --host --port --user --database --table}, password in
 * {@code PEER_PASSWORD}.
 */
public final class DebeziumPeer {

    static final AtomicLong COUNT = new AtomicLong();
    static final AtomicLong FIRST_MS = new AtomicLong();
    static final CompletableFuture<Long> REACHED = new CompletableFuture<>();
    static final CompletableFuture<String> FAILED = new CompletableFuture<>();
    static final AtomicLong HEARTBEATS = new AtomicLong();

    private DebeziumPeer() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = parse(argv);
        String mode = a.getOrDefault("mode", "snapshot");
        boolean tuned = a.containsKey("tuned");
        String records = a.getOrDefault("records", "json");
        long target = "record-offset".equals(mode) ? Long.MAX_VALUE : Long.parseLong(a.get("expect"));
        long timeoutS = Long.parseLong(a.getOrDefault("timeout", "900"));
        String topic = "peer." + a.get("database") + "." + a.get("table");

        DebeziumEngine<?> engine = build(records, properties(mode, tuned, a), topic, target);
        ExecutorService runner = Executors.newSingleThreadExecutor();
        runner.execute(engine);
        String error = null;
        try {
            if ("record-offset".equals(mode)) {
                awaitStreaming(timeoutS);
                long seen = HEARTBEATS.get();
                long deadline = System.currentTimeMillis() + timeoutS * 1000;
                while (HEARTBEATS.get() <= seen + 1 && System.currentTimeMillis() < deadline) {
                    Thread.sleep(20);
                }
                if (HEARTBEATS.get() <= seen + 1) {
                    error = "no heartbeat after the binlog reader connected";
                }
            } else {
                CompletableFuture.anyOf(REACHED, FAILED).get(timeoutS, TimeUnit.SECONDS);
                if (FAILED.isDone() && !REACHED.isDone()) {
                    error = FAILED.get();
                }
            }
        } catch (TimeoutException e) {
            error = "timed out after " + timeoutS + " s with " + COUNT.get() + " records";
        }
        long launched = launchMillis();
        long last = REACHED.isDone() ? REACHED.get() : System.currentTimeMillis();
        long rows = COUNT.get();
        if ("record-offset".equals(mode)) {
            engine.close();  // commits the offsets of what it read (schemas only)
            runner.shutdown();
            runner.awaitTermination(60, TimeUnit.SECONDS);
        }
        double seconds = (last - launched) / 1000.0;
        double first = FIRST_MS.get() == 0 ? -1 : (FIRST_MS.get() - launched) / 1000.0;
        System.out.println(String.format(Locale.ROOT,
                "{\"tool\": \"debezium\", \"version\": \"3.5.0.Final\", \"mode\": \"%s\", \"tuned\": %b, "
                        + "\"records\": \"%s\", \"parallelism\": 1, \"rows\": %d, \"seconds\": %.3f, "
                        + "\"first_record_s\": %.3f, \"rows_per_s\": %.0f, \"tuning\": \"%s\", \"error\": %s}",
                mode, tuned, records, rows, seconds, first, seconds > 0 ? rows / seconds : 0.0, tuning(tuned, a),
                error == null ? "null" : "\"" + error.replace("\\", "\\\\").replace("\"", "'") + "\""));
        System.out.flush();
        Runtime.getRuntime().halt(error == null ? 0 : 1);  // the engine's shutdown is not timed
    }

    /** An engine whose consumer counts the table's change records (not schema or heartbeat events). */
    static DebeziumEngine<?> build(String records, Properties props, String topic, long target) {
        DebeziumEngine.CompletionCallback done = (success, message, error) -> {
            if (!success) {
                FAILED.complete(message + (error == null ? "" : ": " + error));
            } else {
                FAILED.complete("the engine stopped: " + message);
            }
        };
        switch (records) {
            case "json":
                return DebeziumEngine.create(Json.class).using(props).using(done)
                        .notifying((List<ChangeEvent<String, String>> batch,
                                    DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer) -> {
                            for (ChangeEvent<String, String> event : batch) {
                                count(event.destination(), topic, target);
                                committer.markProcessed(event);
                            }
                            committer.markBatchFinished();
                        }).build();
            case "raw":
                return DebeziumEngine.create(ChangeEventFormat.of(Connect.class)).using(props).using(done)
                        .notifying((List<RecordChangeEvent<SourceRecord>> batch,
                                    DebeziumEngine.RecordCommitter<RecordChangeEvent<SourceRecord>> committer) -> {
                            for (RecordChangeEvent<SourceRecord> event : batch) {
                                count(event.record().topic(), topic, target);
                                committer.markProcessed(event);
                            }
                            committer.markBatchFinished();
                        }).build();
            default:
                throw new IllegalArgumentException("--records: expected json or raw, got " + records);
        }
    }

    static void count(String destination, String topic, long target) {
        if (!topic.equals(destination)) {
            if (destination != null && destination.startsWith("__debezium-heartbeat")) {
                HEARTBEATS.incrementAndGet();
            }
            return;
        }
        long n = COUNT.incrementAndGet();
        if (n == 1) {
            FIRST_MS.set(System.currentTimeMillis());
        }
        if (n == target) {
            REACHED.complete(System.currentTimeMillis());
        }
    }

    static Properties properties(String mode, boolean tuned, Map<String, String> a) {
        Properties p = new Properties();
        p.setProperty("name", "peer-debezium");
        p.setProperty("connector.class", "io.debezium.connector.mariadb.MariaDbConnector");
        p.setProperty("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore");
        p.setProperty("offset.storage.file.filename", a.get("offsets"));
        p.setProperty("schema.history.internal", "io.debezium.storage.file.history.FileSchemaHistory");
        p.setProperty("schema.history.internal.file.filename", a.get("history"));
        p.setProperty("database.hostname", a.get("host"));
        p.setProperty("database.port", a.get("port"));
        p.setProperty("database.user", a.get("user"));
        p.setProperty("database.password", System.getenv("PEER_PASSWORD"));
        p.setProperty("database.server.id", a.getOrDefault("server-id", "5600"));
        p.setProperty("topic.prefix", "peer");
        p.setProperty("database.include.list", a.get("database"));
        p.setProperty("table.include.list", a.get("database") + "." + a.get("table"));
        p.setProperty("snapshot.mode", "snapshot".equals(mode) ? "initial" : "no_data");
        if ("record-offset".equals(mode)) {
            p.setProperty("heartbeat.interval.ms", "100");
        }
        p.putAll(tuning(tuned, a));
        return p;
    }

    static Properties tuning(boolean tuned, Map<String, String> a) {
        Properties p = new Properties();
        if (tuned) {  // the throughput settings Debezium documents (as shipped: 500 ms, 2048, 8192)
            p.setProperty("poll.interval.ms", a.getOrDefault("poll-interval-ms", "10"));
            p.setProperty("max.batch.size", a.getOrDefault("max-batch-size", "16384"));
            p.setProperty("max.queue.size", a.getOrDefault("max-queue-size", "65536"));
        }
        return p;
    }

    /** Wait until the connector's binlog reader reports itself connected (its JMX metrics). */
    static void awaitStreaming(long timeoutS) throws Exception {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        ObjectName pattern = new ObjectName("debezium.*:type=connector-metrics,context=streaming,*");
        long deadline = System.currentTimeMillis() + timeoutS * 1000;
        while (System.currentTimeMillis() < deadline) {
            if (FAILED.isDone()) {
                throw new IllegalStateException(FAILED.get());
            }
            Set<ObjectName> names = server.queryNames(pattern, null);
            for (ObjectName name : names) {
                if (Boolean.TRUE.equals(server.getAttribute(name, "Connected"))) {
                    return;
                }
            }
            Thread.sleep(50);
        }
        throw new TimeoutException();
    }

    /** When this process was launched (the OS's start time), so that JVM start-up counts. */
    static long launchMillis() {
        return ProcessHandle.current().info().startInstant().map(Instant::toEpochMilli)
                .orElse(ManagementFactory.getRuntimeMXBean().getStartTime());
    }

    static Map<String, String> parse(String[] argv) {
        Map<String, String> out = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + argv[i]);
            }
            String key = argv[i].substring(2);
            boolean flag = i + 1 == argv.length || argv[i + 1].startsWith("--");
            out.put(key, flag ? "true" : argv[++i]);
        }
        return out;
    }
}
