package dev.sparkcdc.peers;

import java.lang.management.ManagementFactory;
import java.time.Instant;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicLong;

/**
 * What every benchmark peer's main shares (benchmarks/peers/common, compiled into each peer's own
 * module by build-helper-maven-plugin): its {@code --key value} arguments, the record counter that
 * ends a run, the Debezium throughput settings of a tuned run, and the one JSON line a run prints
 * before it halts. JDK classes only, so that it fits every peer's classpath.
 */
final class PeerRun {

    static final AtomicLong COUNT = new AtomicLong();
    static final AtomicLong FIRST_MS = new AtomicLong();
    static final CompletableFuture<Long> REACHED = new CompletableFuture<>();
    static volatile long target = Long.MAX_VALUE;

    private PeerRun() {}

    /** One change record delivered: counts it, and completes {@link #REACHED} at the target. */
    static void counted() {
        long n = COUNT.incrementAndGet();
        if (n == 1) {
            FIRST_MS.set(System.currentTimeMillis());
        }
        if (n == target) {
            REACHED.complete(System.currentTimeMillis());
        }
    }

    /**
     * The settings Debezium documents for throughput, set by {@code --tuned} (as shipped: 500 ms,
     * 2048, 8192); each can be moved by {@code --poll-interval-ms}, {@code --max-batch-size} and
     * {@code --max-queue-size}. Empty when not tuned.
     */
    static Properties tuning(boolean tuned, Map<String, String> a) {
        Properties p = new Properties();
        if (tuned) {
            p.setProperty("poll.interval.ms", a.getOrDefault("poll-interval-ms", "10"));
            p.setProperty("max.batch.size", a.getOrDefault("max-batch-size", "16384"));
            p.setProperty("max.queue.size", a.getOrDefault("max-queue-size", "65536"));
        }
        return p;
    }

    /** {@code --key value} pairs; a {@code --flag} without a value maps to "true". */
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

    /**
     * Once the target is reached, waits {@code --settle-ms} (default 1000) for records beyond it,
     * which {@link #report} counts apart: a peer that delivers a record twice, or more than the
     * table holds, shows it there. Not timed: a run's seconds end at its target.
     */
    static void settle(Map<String, String> a) throws InterruptedException {
        if (REACHED.isDone()) {
            Thread.sleep(Long.parseLong(a.getOrDefault("settle-ms", "1000")));
        }
    }

    /** The fields every run reports first: the tool, its version, the mode, the setting, the records. */
    static Map<String, Object> fields(String tool, String version, Map<String, String> a) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("tool", tool);
        out.put("version", version);
        out.put("mode", a.getOrDefault("mode", "snapshot"));
        out.put("tuned", a.containsKey("tuned"));
        out.put("records", a.getOrDefault("records", "json"));
        return out;
    }

    /**
     * Prints one JSON line, {@code fields} then rows (the target, once reached), the records
     * counted past it ({@link #settle}), seconds from the process's launch to the last record of
     * the target, the first record's second, rows/s and {@code error} (null when none), and halts
     * the JVM: its shutdown is not timed.
     */
    static void report(Map<String, Object> fields, String error) {
        long launched = launchMillis();
        long counted = COUNT.get();
        long rows = REACHED.isDone() ? target : counted;
        long last = REACHED.isDone() ? REACHED.join() : System.currentTimeMillis();
        double seconds = (last - launched) / 1000.0;
        Map<String, Object> out = new LinkedHashMap<>(fields);
        out.put("rows", rows);
        out.put("records_after_target", counted - rows);
        out.put("seconds", seconds);
        out.put("first_record_s", FIRST_MS.get() == 0 ? -1.0 : (FIRST_MS.get() - launched) / 1000.0);
        out.put("rows_per_s", seconds > 0 ? Math.round(rows / seconds) : 0);
        out.put("error", error);
        System.out.println(json(out));
        System.out.flush();
        Runtime.getRuntime().halt(error == null ? 0 : 1);
    }

    /** When this process was launched (the OS's start time), so that JVM start-up counts. */
    static long launchMillis() {
        return ProcessHandle.current().info().startInstant().map(Instant::toEpochMilli)
                .orElse(ManagementFactory.getRuntimeMXBean().getStartTime());
    }

    /** A JSON text of maps (Properties sorted by key), numbers, booleans, strings and null. */
    static String json(Object value) {
        if (value == null) {
            return "null";
        }
        if (value instanceof Double || value instanceof Float) {
            return String.format(Locale.ROOT, "%.3f", ((Number) value).doubleValue());
        }
        if (value instanceof Number || value instanceof Boolean) {
            return value.toString();
        }
        if (value instanceof Map<?, ?> map) {
            Map<?, ?> ordered = value instanceof Properties ? new TreeMap<>(map) : map;
            StringBuilder out = new StringBuilder("{");
            for (Map.Entry<?, ?> e : ordered.entrySet()) {
                out.append(out.length() > 1 ? ", " : "").append(json(String.valueOf(e.getKey())))
                        .append(": ").append(json(e.getValue()));
            }
            return out.append('}').toString();
        }
        StringBuilder out = new StringBuilder("\"");
        for (char c : value.toString().toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }
}
