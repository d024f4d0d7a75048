package offsetaudit.flinktest;

import java.util.HashMap;
import java.util.Map;
import java.util.Properties;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.kafka.clients.consumer.OffsetResetStrategy;

/**
 * A Kafka-reading Flink job on a MiniCluster in this JVM, REST API on loopback, for the tests.
 *
 * <p>Arguments are --key value pairs: bootstrap, topic, group, source (kafkasource|legacy), start
 * (earliest|latest|committed), checkpoint-dir, rest-port, num-retained (3), interval-ms (1000),
 * restore (a checkpoint or savepoint dir, optional), parallelism (2), record-delay-ms (0: a slow
 * operator after the source, that many milliseconds a record), sink (discard|iceberg: the records
 * with their topic, partition and offset appended to the Iceberg table --table ns.t of a Hadoop
 * catalog at --warehouse, on the 1.20-iceberg stack only). The job id goes to stdout as
 * "JOB_ID <hex>"; the process ends when the job ends (cancelled, failed or finished).
 */
public final class FlinkKafkaJob {
    static final String SOURCE_UID = "kafka-source";

    public static void main(String[] argv) {
        try {
            run(argv);
        } catch (Throwable t) {
            // the MiniCluster's non-daemon threads would keep a JVM whose start failed alive
            t.printStackTrace();
            System.exit(2);
        }
    }

    static void run(String[] argv) throws Exception {
        Map<String, String> args = parseArgs(argv);
        Configuration conf = configuration(args);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        if ("iceberg".equals(args.getOrDefault("sink", "discard"))) {
            icebergSink(env, args);
        } else {
            discardSink(env, args);
        }
        JobClient client = env.executeAsync("offset-audit-flink-test");
        System.out.println("JOB_ID " + client.getJobID());
        System.out.flush();
        int code = 0;
        try {
            client.getJobExecutionResult().get();
        } catch (Exception e) {
            // a cancel surfaces here too; the log says which end it was
            System.out.println("JOB_ENDED " + e);
            e.printStackTrace(System.out);
            code = 1;
        }
        System.out.flush();
        System.exit(code);
    }

    static void discardSink(StreamExecutionEnvironment env, Map<String, String> args) throws Exception {
        DataStream<String> records = "legacy".equals(args.get("source"))
                ? legacySource(env, args)
                : kafkaSource(env, args, KafkaRecordDeserializationSchema.valueOnly(new SimpleStringSchema()));
        long delayMs = Long.parseLong(args.getOrDefault("record-delay-ms", "0"));
        if (delayMs > 0) {
            // chained to the source: the source's thread spends delayMs on each record it emits
            records = records.map(new Slow(delayMs)).name("slow");
        }
        records.sinkTo(new DiscardingSink<>()).name("discard");
    }

    /** The Iceberg sink's jars are on the 1.20-iceberg stack alone: its class is compiled there only. */
    static void icebergSink(StreamExecutionEnvironment env, Map<String, String> args) throws Exception {
        if (!"kafkasource".equals(args.getOrDefault("source", "kafkasource"))) {
            throw new IllegalArgumentException("the Iceberg sink reads through the KafkaSource only");
        }
        Class.forName("offsetaudit.flinktest.IcebergOut")
                .getMethod("attach", StreamExecutionEnvironment.class, Map.class)
                .invoke(null, env, args);
    }

    /** A slow step of the job (an enrichment call, say): backpressure on the source's thread. */
    static final class Slow implements MapFunction<String, String> {
        private final long delayMs;

        Slow(long delayMs) {
            this.delayMs = delayMs;
        }

        @Override
        public String map(String value) throws Exception {
            Thread.sleep(delayMs);
            return value;
        }
    }

    static Map<String, String> parseArgs(String[] argv) {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --key value pairs, got " + argv[i]);
            }
            args.put(argv[i].substring(2), argv[i + 1]);
        }
        return args;
    }

    static void set(Configuration conf, String key, String value) {
        conf.set(ConfigOptions.key(key).stringType().noDefaultValue(), value);
    }

    /** Both the 1.20 keys and their older spellings, so one program configures either stack. */
    static Configuration configuration(Map<String, String> args) {
        Configuration conf = new Configuration();
        String restPort = args.get("rest-port");
        set(conf, "rest.address", "127.0.0.1");
        set(conf, "rest.bind-address", "127.0.0.1");
        set(conf, "rest.port", restPort);
        set(conf, "rest.bind-port", restPort);
        String parallelism = args.getOrDefault("parallelism", "2");
        set(conf, "parallelism.default", parallelism);
        set(conf, "taskmanager.numberOfTaskSlots", parallelism);
        set(conf, "execution.checkpointing.interval", args.getOrDefault("interval-ms", "1000") + " ms");
        String dir = args.get("checkpoint-dir");
        set(conf, "execution.checkpointing.dir", dir);
        set(conf, "state.checkpoints.dir", dir);
        String retained = args.getOrDefault("num-retained", "3");
        set(conf, "execution.checkpointing.num-retained", retained);
        set(conf, "state.checkpoints.num-retained", retained);
        set(conf, "execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
        set(conf, "state.backend.type", "hashmap");
        // REST serves metrics from a cache refreshed every 10 s by default: the tests poll them
        set(conf, "metrics.fetcher.update-interval", "500 ms");
        // a checkpoint that fails on a loaded test machine must not fail the job over: the tests wait
        // for completed ones, and the restarts they make are their own
        set(conf, "execution.checkpointing.tolerable-failed-checkpoints", "1000");
        // the startup mode published where REST shows it (/jobs/:id/config user-config), as a job
        // publishing its parameters with ParameterTool does: flink-watch --starting-offsets-key start
        set(conf, "pipeline.global-job-parameters", "start:" + args.getOrDefault("start", "earliest"));
        String restore = args.get("restore");
        if (restore != null) {
            set(conf, "execution.state-recovery.path", restore);
            set(conf, "execution.savepoint.path", restore);
        }
        return conf;
    }

    static Properties kafkaProperties(Map<String, String> args) {
        Properties props = new Properties();
        props.setProperty("bootstrap.servers", args.get("bootstrap"));
        props.setProperty("group.id", args.get("group"));
        return props;
    }

    static <T> DataStream<T> kafkaSource(
            StreamExecutionEnvironment env, Map<String, String> args, KafkaRecordDeserializationSchema<T> records) {
        OffsetsInitializer start;
        switch (args.getOrDefault("start", "earliest")) {
            case "earliest": start = OffsetsInitializer.earliest(); break;
            case "latest": start = OffsetsInitializer.latest(); break;
            case "committed": start = OffsetsInitializer.committedOffsets(OffsetResetStrategy.EARLIEST); break;
            default: throw new IllegalArgumentException("unknown start " + args.get("start"));
        }
        KafkaSource<T> source = KafkaSource.<T>builder()
                .setBootstrapServers(args.get("bootstrap"))
                .setTopics(args.get("topic"))
                .setGroupId(args.get("group"))
                .setStartingOffsets(start)
                .setDeserializer(records)
                .setProperty("commit.offsets.on.checkpoint", "true")
                .build();
        return env.fromSource(source, WatermarkStrategy.noWatermarks(), "kafka-source").uid(SOURCE_UID);
    }

    /** The legacy FlinkKafkaConsumer exists on the 1.20 stack only; it is compiled there alone. */
    @SuppressWarnings("unchecked")
    static DataStream<String> legacySource(StreamExecutionEnvironment env, Map<String, String> args) throws Exception {
        Class<?> legacy = Class.forName("offsetaudit.flinktest.LegacyKafka");
        return (DataStream<String>) legacy
                .getMethod("source", StreamExecutionEnvironment.class, Properties.class, String.class, String.class)
                .invoke(null, env, kafkaProperties(args), args.get("topic"), args.getOrDefault("start", "earliest"));
    }
}
