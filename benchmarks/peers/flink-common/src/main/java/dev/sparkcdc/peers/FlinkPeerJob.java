package dev.sparkcdc.peers;

import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.cdc.connectors.shaded.org.apache.kafka.connect.source.SourceRecord;
import org.apache.flink.cdc.debezium.DebeziumDeserializationSchema;
import org.apache.flink.cdc.debezium.JsonDebeziumDeserializationSchema;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.SinkFunction;
import org.apache.flink.util.Collector;

/**
 * The Flink side every Flink CDC peer shares (benchmarks/peers/flink-common, compiled into the
 * MySQL and the Postgres module, each on its own Flink CDC fat jar): a Flink CDC source in Flink's
 * local MiniCluster at {@code --parallelism}, into a sink that counts records and writes nothing
 * (the peer's best case), until {@code --expect} records are counted or the job ends.
 *
 * <p>Records are the source's JSON strings ({@code --records json}, Flink CDC's documented
 * DataStream deserializer, without schemas) or nothing but a count per record ({@code --records
 * raw}: no conversion at all).
 */
final class FlinkPeerJob {

    static final String VERSION = "3.5.0";
    static final String FLINK = "1.20.1";

    private FlinkPeerJob() {}

    /** Counts records in the JVM-wide counter (the MiniCluster runs every task in this JVM). */
    static final class CountingSink<T> implements SinkFunction<T> {
        @Override
        public void invoke(T value, Context context) {
            PeerRun.counted();
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

    /** The fields of a Flink CDC run's JSON line, before its settings. */
    static Map<String, Object> fields(Map<String, String> a) {
        Map<String, Object> out = PeerRun.fields("flink-cdc", VERSION, a);
        out.put("flink", FLINK);
        out.put("parallelism", parallelism(a));
        return out;
    }

    static int parallelism(Map<String, String> a) {
        return Integer.parseInt(a.getOrDefault("parallelism", "1"));
    }

    /**
     * Runs {@code source} into the counting sink until the target is counted, the job ends or
     * {@code --timeout} seconds pass; then prints the run's line ({@link PeerRun#report}) and halts.
     */
    static <T> void run(Source<T, ?, ?> source, String name, Map<String, String> a, Map<String, Object> fields)
            throws Exception {
        PeerRun.target = Long.parseLong(a.get("expect"));
        long timeoutS = Long.parseLong(a.getOrDefault("timeout", "900"));
        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.createLocalEnvironment(parallelism(a), new Configuration());
        env.fromSource(source, WatermarkStrategy.noWatermarks(), name).addSink(new CountingSink<>()).name("count");
        JobClient job = env.executeAsync("peer-" + name + "-" + fields.get("mode"));
        CompletableFuture<Object> ended = CompletableFuture.anyOf(PeerRun.REACHED, job.getJobExecutionResult());
        String error = null;
        try {
            ended.get(timeoutS, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            error = "timed out after " + timeoutS + " s";
        } catch (ExecutionException e) {
            error = String.valueOf(e.getCause());
        }
        if (error == null && !PeerRun.REACHED.isDone()) {
            error = "the job ended after " + PeerRun.COUNT.get() + " records, expected " + PeerRun.target;
        }
        PeerRun.settle(a);
        PeerRun.report(fields, error);  // the MiniCluster's shutdown is not timed
    }
}
