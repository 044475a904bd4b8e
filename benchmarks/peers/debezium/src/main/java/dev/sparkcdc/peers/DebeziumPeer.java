package dev.sparkcdc.peers;

import java.lang.management.ManagementFactory;
import java.util.List;
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
 * Benchmark peer: Debezium's embedded engine ({@code DebeziumEngine}) with the MariaDB connector
 * ({@code --connector mariadb}, the default) or the PostgreSQL connector ({@code --connector
 * postgres}), into a counting consumer that writes nothing (the peer's best case).
 *
 * <p>Modes:
 * <ul>
 *   <li>{@code --mode snapshot}: {@code snapshot.mode=initial} with fresh offsets; stops once
 *       {@code --expect} of the table's records are counted (Postgres: the connector creates the
 *       slot {@code --slot});</li>
 *   <li>{@code --mode record-offset} (MariaDB): {@code snapshot.mode=no_data} (schemas only) with
 *       heartbeats every 100 ms, until the binlog reader is connected and a heartbeat came after
 *       that, then stops: the offset file ({@code --offsets}) and schema history ({@code --history})
 *       now hold a streaming position (an offset from the schema snapshot alone would make a
 *       restarted connector snapshot again, from the position of that moment);</li>
 *   <li>{@code --mode catch-up}: {@code snapshot.mode=no_data}; MariaDB starts from that offset
 *       file, Postgres from fresh offsets and the slot {@code --slot} the caller created before
 *       the burst (with no offset the connector streams from the slot's
 *       {@code confirmed_flush_lsn}); stops once {@code --expect} change records are counted.</li>
 * </ul>
 * Postgres decodes through {@code pgoutput} and the publication {@code --publication}, which the
 * caller created. It prints one JSON line: rows, seconds from the process's launch to the last
 * record counted, rows/s, the connector's settings (less the password). Records come as JSON
 * ({@code --records json}, the engine's documented format, {@code converter.schemas.enable=false}:
 * the connector's best case) or as Kafka Connect records with no conversion ({@code --records
 * raw}). {@code --tuned} sets {@code poll.interval.ms}, {@code max.batch.size} and
 * {@code max.queue.size} ({@link PeerRun#tuning}); without it every setting is as shipped.
 * Connection: {@code --host --port --user --database [--schema] --table}, password in
 * {@code PEER_PASSWORD}.
 */
public final class DebeziumPeer {

    static final String VERSION = "3.5.0.Final";
    static final CompletableFuture<String> FAILED = new CompletableFuture<>();
    static final AtomicLong HEARTBEATS = new AtomicLong();

    private DebeziumPeer() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = PeerRun.parse(argv);
        String mode = a.getOrDefault("mode", "snapshot");
        boolean postgres = "postgres".equals(a.getOrDefault("connector", "mariadb"));
        PeerRun.target = "record-offset".equals(mode) ? Long.MAX_VALUE : Long.parseLong(a.get("expect"));
        long timeoutS = Long.parseLong(a.getOrDefault("timeout", "900"));
        String topic = "peer." + (postgres ? a.get("schema") : a.get("database")) + "." + a.get("table");
        Properties props = properties(mode, postgres, a);

        DebeziumEngine<?> engine = build(a.getOrDefault("records", "json"), props, topic);
        ExecutorService runner = Executors.newSingleThreadExecutor();
        runner.execute(engine);
        String error = null;
        try {
            error = "record-offset".equals(mode) ? awaitStreamingHeartbeat(timeoutS) : awaitTarget(timeoutS);
        } catch (TimeoutException e) {
            error = "timed out after " + timeoutS + " s with " + PeerRun.COUNT.get() + " records";
        }
        PeerRun.settle(a);
        if ("record-offset".equals(mode)) {
            engine.close();  // commits the offsets of what it read (schemas only)
            runner.shutdown();
            runner.awaitTermination(60, TimeUnit.SECONDS);
        }
        Map<String, Object> fields = PeerRun.fields("debezium", VERSION, a);
        fields.put("connector", postgres ? "postgres" : "mariadb");
        fields.put("parallelism", 1);
        props.remove("database.password");
        fields.put("settings", props);
        PeerRun.report(fields, error);  // the engine's shutdown is not timed
    }

    static String awaitTarget(long timeoutS) throws Exception {
        CompletableFuture.anyOf(PeerRun.REACHED, FAILED).get(timeoutS, TimeUnit.SECONDS);
        return FAILED.isDone() && !PeerRun.REACHED.isDone() ? FAILED.get() : null;
    }

    static String awaitStreamingHeartbeat(long timeoutS) throws Exception {
        awaitStreaming(timeoutS);
        long seen = HEARTBEATS.get();
        long deadline = System.currentTimeMillis() + timeoutS * 1000;
        while (HEARTBEATS.get() <= seen + 1 && System.currentTimeMillis() < deadline) {
            Thread.sleep(20);
        }
        return HEARTBEATS.get() <= seen + 1 ? "no heartbeat after the binlog reader connected" : null;
    }

    /** An engine whose consumer counts the table's change records (not schema or heartbeat events). */
    static DebeziumEngine<?> build(String records, Properties props, String topic) {
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
                                count(event.destination(), topic);
                                committer.markProcessed(event);
                            }
                            committer.markBatchFinished();
                        }).build();
            case "raw":
                return DebeziumEngine.create(ChangeEventFormat.of(Connect.class)).using(props).using(done)
                        .notifying((List<RecordChangeEvent<SourceRecord>> batch,
                                    DebeziumEngine.RecordCommitter<RecordChangeEvent<SourceRecord>> committer) -> {
                            for (RecordChangeEvent<SourceRecord> event : batch) {
                                count(event.record().topic(), topic);
                                committer.markProcessed(event);
                            }
                            committer.markBatchFinished();
                        }).build();
            default:
                throw new IllegalArgumentException("--records: expected json or raw, got " + records);
        }
    }

    static void count(String destination, String topic) {
        if (topic.equals(destination)) {
            PeerRun.counted();
        } else if (destination != null && destination.startsWith("__debezium-heartbeat")) {
            HEARTBEATS.incrementAndGet();
        }
    }

    static Properties properties(String mode, boolean postgres, Map<String, String> a) {
        Properties p = new Properties();
        p.setProperty("name", "peer-debezium");
        p.setProperty("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore");
        p.setProperty("offset.storage.file.filename", a.get("offsets"));
        p.setProperty("database.hostname", a.get("host"));
        p.setProperty("database.port", a.get("port"));
        p.setProperty("database.user", a.get("user"));
        p.setProperty("database.password", System.getenv("PEER_PASSWORD"));
        p.setProperty("topic.prefix", "peer");
        p.setProperty("snapshot.mode", "snapshot".equals(mode) ? "initial" : "no_data");
        p.setProperty("converter.schemas.enable", "false");  // JSON without schemas: Debezium's best case
        p.putAll(postgres ? postgres(a) : mariadb(a));
        if ("record-offset".equals(mode)) {
            p.setProperty("heartbeat.interval.ms", "100");
        }
        p.putAll(PeerRun.tuning(a.containsKey("tuned"), a));
        return p;
    }

    static Properties mariadb(Map<String, String> a) {
        Properties p = new Properties();
        p.setProperty("connector.class", "io.debezium.connector.mariadb.MariaDbConnector");
        p.setProperty("schema.history.internal", "io.debezium.storage.file.history.FileSchemaHistory");
        p.setProperty("schema.history.internal.file.filename", a.get("history"));
        p.setProperty("database.server.id", a.getOrDefault("server-id", "5600"));
        p.setProperty("database.include.list", a.get("database"));
        p.setProperty("table.include.list", a.get("database") + "." + a.get("table"));
        return p;
    }

    static Properties postgres(Map<String, String> a) {
        Properties p = new Properties();
        p.setProperty("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
        p.setProperty("database.dbname", a.get("database"));
        p.setProperty("table.include.list", a.get("schema") + "." + a.get("table"));
        p.setProperty("plugin.name", "pgoutput");
        p.setProperty("slot.name", a.get("slot"));
        p.setProperty("publication.name", a.get("publication"));
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
}
