package dev.sparkcdc.debezium;

import java.io.FileInputStream;
import java.io.InputStream;
import java.lang.management.ManagementFactory;
import java.time.Instant;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.storage.SimpleHeaderConverter;

import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;

/**
 * Debezium's embedded engine into Kafka as a Kafka Connect worker would write it (benchmarks/
 * kafka_bench.py): each record converted by JsonConverter (schemas on or off) and
 * SimpleHeaderConverter, then sent by a producer with the worker's producer defaults (acks=all,
 * one request in flight, no idempotence, no transactions: at-least-once).
 *
 * <p>Arguments: {@code --properties FILE} (engine and connector, and {@code producer.*} settings
 * that override the producer's, as a worker's; the password in {@code DEBEZIUM_PASSWORD}), {@code --bootstrap HOST:PORT}, {@code --topic T} (the table's topic,
 * whose records are counted), {@code --expect N} (stop once N of them are acknowledged),
 * {@code --schemas true|false}, {@code --timeout SECONDS}. Prints one JSON line: records
 * acknowledged, seconds from the process's launch to the last acknowledgement, records/s.
 */
public final class DebeziumProducer {

    private DebeziumProducer() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = DebeziumCapture.parse(argv);
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(DebeziumCapture.required(a, "properties"))) {
            props.load(in);
        }
        String password = System.getenv("DEBEZIUM_PASSWORD");
        if (password != null) {
            props.setProperty("database.password", password);
        }
        String topic = DebeziumCapture.required(a, "topic");
        long expect = Long.parseLong(DebeziumCapture.required(a, "expect"));
        long timeoutS = Long.parseLong(a.getOrDefault("timeout", "900"));
        boolean schemas = Boolean.parseBoolean(a.getOrDefault("schemas", "true"));
        JsonConverter keys = DebeziumCapture.Converters.json(true, schemas);
        JsonConverter values = DebeziumCapture.Converters.json(false, schemas);
        SimpleHeaderConverter headers = new SimpleHeaderConverter();
        headers.configure(Map.of());

        Properties p = new Properties();  // Kafka Connect's Worker.baseProducerConfigs
        p.put("bootstrap.servers", DebeziumCapture.required(a, "bootstrap"));
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("max.block.ms", Long.toString(Long.MAX_VALUE));
        p.put("enable.idempotence", "false");
        p.put("acks", "all");
        p.put("max.in.flight.requests.per.connection", "1");
        p.put("delivery.timeout.ms", Integer.toString(Integer.MAX_VALUE));
        for (String name : props.stringPropertyNames()) {  // a worker's producer.* settings
            if (name.startsWith("producer.")) {
                p.put(name.substring("producer.".length()), props.getProperty(name));
                props.remove(name);
            }
        }
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);

        AtomicLong acked = new AtomicLong();
        CompletableFuture<Long> reached = new CompletableFuture<>();
        CompletableFuture<String> failed = new CompletableFuture<>();
        DebeziumEngine<RecordChangeEvent<SourceRecord>> engine = DebeziumEngine
                .create(ChangeEventFormat.of(Connect.class))
                .using(props)
                .using((success, message, error) -> failed.complete(message + (error == null ? "" : " (" + error + ")")))
                .notifying((List<RecordChangeEvent<SourceRecord>> batch,
                            DebeziumEngine.RecordCommitter<RecordChangeEvent<SourceRecord>> committer) -> {
                    for (RecordChangeEvent<SourceRecord> event : batch) {
                        SourceRecord r = event.record();
                        RecordHeaders hs = new RecordHeaders();
                        for (Header h : r.headers()) {
                            hs.add(h.key(), headers.fromConnectHeader(r.topic(), h.key(), h.schema(), h.value()));
                        }
                        boolean counted = topic.equals(r.topic());
                        producer.send(new ProducerRecord<>(r.topic(), null,
                                keys.fromConnectData(r.topic(), r.keySchema(), r.key()),
                                values.fromConnectData(r.topic(), r.valueSchema(), r.value()), hs),
                                (meta, error) -> {
                                    if (error != null) {
                                        failed.complete("a send failed: " + error);
                                    } else if (counted && acked.incrementAndGet() == expect) {
                                        reached.complete(System.currentTimeMillis());
                                    }
                                });
                        committer.markProcessed(event);
                    }
                    committer.markBatchFinished();
                })
                .build();
        ExecutorService runner = Executors.newSingleThreadExecutor();
        runner.execute(engine);
        String error = null;
        long last = 0;
        try {
            CompletableFuture.anyOf(reached, failed).get(timeoutS, TimeUnit.SECONDS);
            if (reached.isDone()) {
                last = reached.get();
            } else {
                error = failed.get();
            }
        } catch (TimeoutException e) {
            error = "timed out after " + timeoutS + " s with " + acked.get() + " records acknowledged";
        }
        long launched = ProcessHandle.current().info().startInstant().map(Instant::toEpochMilli)
                .orElse(ManagementFactory.getRuntimeMXBean().getStartTime());
        double seconds = last == 0 ? -1 : (last - launched) / 1000.0;
        System.out.println(String.format(Locale.ROOT,
                "{\"records\": %d, \"seconds\": %.3f, \"records_per_s\": %.0f, \"error\": %s}", acked.get(), seconds,
                seconds > 0 ? acked.get() / seconds : 0.0,
                error == null ? "null" : "\"" + error.replace("\\", "\\\\").replace("\"", "'") + "\""));
        System.out.flush();
        Runtime.getRuntime().halt(error == null ? 0 : 1);  // the engine's shutdown is not timed
    }
}
