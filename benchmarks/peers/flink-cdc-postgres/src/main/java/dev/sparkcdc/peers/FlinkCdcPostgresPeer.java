package dev.sparkcdc.peers;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;

import org.apache.flink.cdc.connectors.base.options.StartupOptions;
import org.apache.flink.cdc.connectors.postgres.source.PostgresSourceBuilder;
import org.apache.flink.cdc.connectors.postgres.source.PostgresSourceBuilder.PostgresIncrementalSource;

/**
 * Benchmark peer: Flink CDC's {@code postgres-cdc} incremental snapshot source
 * ({@code PostgresSourceBuilder}'s {@code PostgresIncrementalSource}, the flink-cdc-base framework
 * ours follows), run by {@link FlinkPeerJob} (the local MiniCluster at {@code --parallelism}, a
 * counting sink).
 *
 * <p>Two modes:
 * <ul>
 *   <li>{@code --mode snapshot}: startup option {@code snapshot()}, a bounded read of the table in
 *       chunks of {@code --chunk-size} rows. The enumerator creates the slot {@code --slot} for
 *       the stream split it would read next, and each chunk's backfill a slot of its own
 *       ({@code <slot>_<subtask>}, dropped after the chunk): that is how the source works;</li>
 *   <li>{@code --mode catch-up}: startup option {@code committed()}, the stream only, from the
 *       {@code confirmed_flush_lsn} of the slot {@code --slot}, which the caller created before
 *       the burst.</li>
 * </ul>
 * Logical decoding through {@code pgoutput} and the publication {@code --publication}, which the
 * caller created ({@code decodingPluginName("pgoutput")}: the source's default, decoderbufs, is
 * a server extension PostgreSQL does not ship). {@code --tuned} sets Debezium's
 * {@code poll.interval.ms}, {@code max.batch.size} and {@code max.queue.size} through
 * {@code debeziumProperties} ({@link PeerRun#tuning}); without it every setting is as shipped.
 * Connection: {@code --host --port --user --database --schema --table}, password in
 * {@code PEER_PASSWORD}. It prints one JSON line with rows, seconds from launch and the settings.
 */
public final class FlinkCdcPostgresPeer {

    private FlinkCdcPostgresPeer() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = PeerRun.parse(argv);
        Map<String, Object> fields = FlinkPeerJob.fields(a);
        Properties dbz = PeerRun.tuning(a.containsKey("tuned"), a);
        dbz.setProperty("publication.name", a.get("publication"));
        int chunkSize = Integer.parseInt(a.getOrDefault("chunk-size", "8096"));
        String mode = (String) fields.get("mode");
        PostgresIncrementalSource<Object> source = PostgresSourceBuilder.PostgresIncrementalSource.<Object>builder()
                .hostname(a.get("host"))
                .port(Integer.parseInt(a.get("port")))
                .username(a.get("user"))
                .password(System.getenv("PEER_PASSWORD"))
                .database(a.get("database"))
                .schemaList(a.get("schema"))
                .tableList(a.get("schema") + "." + a.get("table"))
                .slotName(a.get("slot"))
                .decodingPluginName("pgoutput")
                .splitSize(chunkSize)
                .startupOptions(startup(mode))
                .debeziumProperties(dbz)
                .deserializer(FlinkPeerJob.deserializer((String) fields.get("records")))
                .build();
        Map<String, Object> settings = new LinkedHashMap<>();
        settings.put("startup", mode.equals("snapshot") ? "snapshot()" : "committed()");
        settings.put("chunk_size", chunkSize);
        settings.put("slot", a.get("slot"));
        settings.put("decoding_plugin", "pgoutput");
        settings.put("debezium_properties", dbz);
        fields.put("settings", settings);
        FlinkPeerJob.run(source, "postgres-cdc", a, fields);
    }

    static StartupOptions startup(String mode) {
        switch (mode) {
            case "snapshot":
                return StartupOptions.snapshot();
            case "catch-up":
                return StartupOptions.committed();
            default:
                throw new IllegalArgumentException("--mode: expected snapshot or catch-up, got " + mode);
        }
    }
}
