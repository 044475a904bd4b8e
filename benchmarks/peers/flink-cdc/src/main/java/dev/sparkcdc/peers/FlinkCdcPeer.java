package dev.sparkcdc.peers;

import java.lang.management.ManagementFactory;
import java.time.Instant;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.cdc.connectors.mysql.source.MySqlSource;
import org.apache.flink.cdc.connectors.mysql.table.StartupOptions;
import org.apache.flink.cdc.connectors.shaded.org.apache.kafka.connect.source.SourceRecord;
import org.apache.flink.cdc.debezium.DebeziumDeserializationSchema;
import org.apache.flink.cdc.debezium.JsonDebeziumDeserializationSchema;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.SinkFunction;
import org.apache.flink.util.Collector;

/**
 * Benchmark peer: Flink CDC's MySQL source ({@code MySqlSource}) in Flink's local MiniCluster at
 * a given parallelism, into a counting sink that writes nothing (the peer's best case).
 *
 * <p>Two modes:
 * <ul>
 *   <li>{@code --mode snapshot}: startup option {@code snapshot()} (a bounded read of the table
 *       in chunks of {@code --chunk-size} rows);</li>
 *   <li>{@code --mode catch-up}: startup option {@code specificOffset(--file, --pos)}, the binlog
 *       only.</li>
 * </ul>
 * Either way it stops once the sink has counted {@code --expect} records and prints one JSON line:
 * rows, seconds from the process's launch to the last record counted, rows/s. Records are the
 * source's JSON strings ({@code --records json}, Flink CDC's documented DataStream deserializer)
 * or nothing but a count per record ({@code --records raw}: no conversion at all).
 *
 * <p>{@code --tuned} sets Debezium's {@code poll.interval.ms}, {@code max.batch.size} and
 * {@code max.queue.size} through {@code debeziumProperties}; without it every setting is as shipped.
 * Connection: {@code --host --port --user --database --table}, password in {@code PEER_PASSWORD}.
 */
public final class FlinkCdcPeer {

    static final AtomicLong COUNT = new AtomicLong();
    static final AtomicLong FIRST_MS = new AtomicLong();
    static final CompletableFuture<Long> REACHED = new CompletableFuture<>();
    static volatile long target = Long.MAX_VALUE;

    private FlinkCdcPeer() {}

    /** Counts records in a JVM-wide counter (the MiniCluster runs every task in this JVM). */
    static final class CountingSink<T> implements SinkFunction<T> {
        @Override
        public void invoke(T value, Context context) {
            long n = COUNT.incrementAndGet();
            if (n == 1) {
                FIRST_MS.set(System.currentTimeMillis());
            }
            if (n == target) {
                REACHED.complete(System.currentTimeMillis());
            }
        }
    }

    /** One small value per change record: the source's work without any conversion. */
    static final class RawDeserializer implements DebeziumDeserializationSchema<Integer> {
        @Override
        public void deserialize(SourceRecord record, Collector<Integer> out) {
            out.collect(1);
        }

        @Override
        public TypeInformation<Integer> getProducedType() {
            return Types.INT;
        }
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = parse(argv);
        int parallelism = Integer.parseInt(a.getOrDefault("parallelism", "1"));
        String mode = a.getOrDefault("mode", "snapshot");
        boolean tuned = a.containsKey("tuned");
        target = Long.parseLong(a.get("expect"));
        long timeoutS = Long.parseLong(a.getOrDefault("timeout", "900"));

        MySqlSource<?> source = MySqlSource.<Object>builder()
                .hostname(a.get("host"))
                .port(Integer.parseInt(a.get("port")))
                .username(a.get("user"))
                .password(System.getenv("PEER_PASSWORD"))
                .databaseList(a.get("database"))
                .tableList(a.get("database") + "." + a.get("table"))
                .serverId(a.getOrDefault("server-id", "5500-5531"))
                .serverTimeZone("UTC")
                .splitSize(Integer.parseInt(a.getOrDefault("chunk-size", "8096")))
                .startupOptions(startup(mode, a))
                .debeziumProperties(debeziumProperties(tuned, a))
                .deserializer(deserializer(a.getOrDefault("records", "json")))
                .build();

        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(parallelism, new Configuration());
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "mysql-cdc")
                .addSink(new CountingSink<>()).name("count");
        JobClient job = env.executeAsync("peer-flink-cdc-" + mode);
        CompletableFuture<Object> ended = CompletableFuture.anyOf(REACHED, job.getJobExecutionResult());
        String error = null;
        try {
            ended.get(timeoutS, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            error = "timed out after " + timeoutS + " s";
        } catch (ExecutionException e) {
            error = String.valueOf(e.getCause());
        }
        long rows = COUNT.get();
        if (error == null && !REACHED.isDone()) {
            error = "the job ended after " + rows + " records, expected " + target;
        }
        long launched = launchMillis();
        long last = REACHED.isDone() ? REACHED.get() : System.currentTimeMillis();
        double seconds = (last - launched) / 1000.0;
        double first = FIRST_MS.get() == 0 ? -1 : (FIRST_MS.get() - launched) / 1000.0;
        System.out.println(String.format(java.util.Locale.ROOT,
                "{\"tool\": \"flink-cdc\", \"version\": \"3.5.0\", \"flink\": \"1.20.1\", \"mode\": \"%s\", "
                        + "\"tuned\": %b, \"records\": \"%s\", \"parallelism\": %d, \"rows\": %d, \"seconds\": %.3f, "
                        + "\"first_record_s\": %.3f, \"rows_per_s\": %.0f, \"debezium_properties\": \"%s\", \"error\": %s}",
                mode, tuned, a.getOrDefault("records", "json"), parallelism, rows, seconds, first,
                seconds > 0 ? rows / seconds : 0.0, debeziumProperties(tuned, a),
                error == null ? "null" : "\"" + error.replace("\\", "\\\\").replace("\"", "'") + "\""));
        System.out.flush();
        Runtime.getRuntime().halt(error == null ? 0 : 1);  // the MiniCluster's shutdown is not timed
    }

    static StartupOptions startup(String mode, Map<String, String> a) {
        switch (mode) {
            case "snapshot":
                return StartupOptions.snapshot();
            case "catch-up":
                return StartupOptions.specificOffset(a.get("file"), Long.parseLong(a.get("pos")));
            default:
                throw new IllegalArgumentException("--mode: expected snapshot or catch-up, got " + mode);
        }
    }

    static Properties debeziumProperties(boolean tuned, Map<String, String> a) {
        Properties p = new Properties();
        if (tuned) {  // the throughput settings Debezium documents (as shipped: 500 ms, 2048, 8192)
            p.setProperty("poll.interval.ms", a.getOrDefault("poll-interval-ms", "10"));
            p.setProperty("max.batch.size", a.getOrDefault("max-batch-size", "16384"));
            p.setProperty("max.queue.size", a.getOrDefault("max-queue-size", "65536"));
        }
        return p;
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static DebeziumDeserializationSchema<Object> deserializer(String records) {
        switch (records) {
            case "json":
                return (DebeziumDeserializationSchema) new JsonDebeziumDeserializationSchema();
            case "raw":
                return (DebeziumDeserializationSchema) new RawDeserializer();
            default:
                throw new IllegalArgumentException("--records: expected json or raw, got " + records);
        }
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
