package dev.sparkcdc.peers;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;

import org.apache.flink.cdc.connectors.mysql.source.MySqlSource;
import org.apache.flink.cdc.connectors.mysql.table.StartupOptions;

/**
 * Benchmark peer: Flink CDC's MySQL source ({@code MySqlSource}) against MariaDB, run by
 * {@link FlinkPeerJob} (the local MiniCluster at {@code --parallelism}, a counting sink).
 *
 * <p>Two modes:
 * <ul>
 *   <li>{@code --mode snapshot}: startup option {@code snapshot()} (a bounded read of the table
 *       in chunks of {@code --chunk-size} rows);</li>
 *   <li>{@code --mode catch-up}: startup option {@code specificOffset(--file, --pos)}, the binlog
 *       only.</li>
 * </ul>
 * It prints one JSON line (rows, seconds from the process's launch to the last record counted,
 * rows/s, the settings). {@code --tuned} sets Debezium's {@code poll.interval.ms},
 * {@code max.batch.size} and {@code max.queue.size} through {@code debeziumProperties}
 * ({@link PeerRun#tuning}); without it every setting is as shipped. Connection: {@code --host
 * --port --user --database --table --server-id}, password in {@code PEER_PASSWORD}.
 */
public final class FlinkCdcPeer {

    private FlinkCdcPeer() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = PeerRun.parse(argv);
        Map<String, Object> fields = FlinkPeerJob.fields(a);
        Properties dbz = PeerRun.tuning(a.containsKey("tuned"), a);
        int chunkSize = Integer.parseInt(a.getOrDefault("chunk-size", "8096"));
        String serverId = a.getOrDefault("server-id", "5500-5531");
        MySqlSource<Object> source = MySqlSource.<Object>builder()
                .hostname(a.get("host"))
                .port(Integer.parseInt(a.get("port")))
                .username(a.get("user"))
                .password(System.getenv("PEER_PASSWORD"))
                .databaseList(a.get("database"))
                .tableList(a.get("database") + "." + a.get("table"))
                .serverId(serverId)
                .serverTimeZone("UTC")
                .splitSize(chunkSize)
                .startupOptions(startup((String) fields.get("mode"), a))
                .debeziumProperties(dbz)
                .deserializer(FlinkPeerJob.deserializer((String) fields.get("records")))
                .build();
        Map<String, Object> settings = new LinkedHashMap<>();
        settings.put("startup", fields.get("mode").equals("snapshot") ? "snapshot()"
                : "specificOffset(" + a.get("file") + ", " + a.get("pos") + ")");
        settings.put("chunk_size", chunkSize);
        settings.put("server_id", serverId);
        settings.put("debezium_properties", dbz);
        fields.put("settings", settings);
        FlinkPeerJob.run(source, "mysql-cdc", a, fields);
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
}
