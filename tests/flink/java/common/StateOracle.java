package offsetaudit.flinktest;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;

import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.connector.kafka.source.split.KafkaPartitionSplit;
import org.apache.flink.connector.kafka.source.split.KafkaPartitionSplitSerializer;
import org.apache.flink.core.io.SimpleVersionedSerialization;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.metadata.CheckpointMetadata;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.state.OperatorStateHandle;
import org.apache.flink.state.api.OperatorIdentifier;
import org.apache.flink.state.api.SavepointReader;
import org.apache.flink.state.api.runtime.SavepointLoader;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;

/**
 * Reads the Kafka source's offsets out of a checkpoint or savepoint directory with Flink's own State
 * Processor API and the connector's own serializers, and prints them as one JSON object:
 * {"checkpoint_id", "engine", "operator_id", "offsets": [{"topic", "partition", "raw_offset", "stopping_offset"}]}.
 * raw_offset is what Flink stored: the KafkaSource's next offset to read (or a sentinel), the legacy
 * consumer's last processed offset.
 */
public final class StateOracle {
    static final String SOURCE_READER_STATE = "SourceReaderState";
    static final String LEGACY_STATE = "topic-partition-offset-states";

    public static void main(String[] argv) throws Exception {
        String path = argv[0];
        CheckpointMetadata metadata = SavepointLoader.loadSavepointMetadata(path);
        OperatorID operatorId = OperatorIdentifier.forUid(FlinkKafkaJob.SOURCE_UID).getOperatorId();
        Set<String> stateNames = stateNames(metadata, operatorId);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(1);
        SavepointReader reader = SavepointReader.read(env, path);
        String engine;
        List<Object[]> rows;
        if (stateNames.contains(LEGACY_STATE)) {
            engine = "flink-legacy";
            rows = legacyOffsets(reader, env);
        } else if (stateNames.contains(SOURCE_READER_STATE)) {
            engine = "flink-kafkasource";
            rows = sourceOffsets(reader);
        } else {
            throw new IllegalStateException("no Kafka source state for uid kafka-source in " + path + ": " + stateNames);
        }
        System.out.println(toJson(metadata.getCheckpointId(), engine, operatorId.toHexString(), rows));
    }

    static Set<String> stateNames(CheckpointMetadata metadata, OperatorID operatorId) {
        Set<String> names = new TreeSet<>();
        for (OperatorState state : metadata.getOperatorStates()) {
            if (!state.getOperatorID().equals(operatorId)) {
                continue;
            }
            for (OperatorSubtaskState subtask : state.getSubtaskStates().values()) {
                for (OperatorStateHandle handle : subtask.getManagedOperatorState()) {
                    names.addAll(handle.getStateNameToPartitionOffsets().keySet());
                }
            }
        }
        return names;
    }

    /**
     * Every element of a bounded state stream. The job runs to its end on a MiniCluster in this JVM
     * and hands its elements over through a static queue: executeAndCollect can lose the last
     * results when the MiniCluster shuts down with the finished job.
     */
    @SuppressWarnings("unchecked")
    public static <T> List<T> collect(DataStream<T> elements) throws Exception {
        Collector.SEEN.clear();
        elements.map(new Collector<T>()).returns(Types.BOOLEAN).sinkTo(new DiscardingSink<>());
        elements.getExecutionEnvironment().execute("state-oracle");
        List<T> out = new ArrayList<>();
        for (Object element : Collector.SEEN) {
            out.add((T) element);
        }
        return out;
    }

    static final class Collector<T> implements MapFunction<T, Boolean> {
        static final ConcurrentLinkedQueue<Object> SEEN = new ConcurrentLinkedQueue<>();

        @Override
        public Boolean map(T value) {
            SEEN.add(value);
            return Boolean.TRUE;
        }
    }

    static List<Object[]> sourceOffsets(SavepointReader reader) throws Exception {
        KafkaPartitionSplitSerializer serializer = new KafkaPartitionSplitSerializer();
        DataStream<byte[]> elements = reader.readListState(
                OperatorIdentifier.forUid(FlinkKafkaJob.SOURCE_UID), SOURCE_READER_STATE,
                PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO);
        List<Object[]> rows = new ArrayList<>();
        for (byte[] element : collect(elements)) {
            KafkaPartitionSplit split = SimpleVersionedSerialization.readVersionAndDeSerialize(serializer, element);
            rows.add(new Object[] {split.getTopic(), split.getPartition(), split.getStartingOffset(),
                    split.getStoppingOffset().orElse(null)});
        }
        return rows;
    }

    @SuppressWarnings("unchecked")
    static List<Object[]> legacyOffsets(SavepointReader reader, StreamExecutionEnvironment env) throws Exception {
        Class<?> legacy = Class.forName("offsetaudit.flinktest.LegacyKafka");
        List<Object[]> rows = (List<Object[]>) legacy
                .getMethod("readOffsets", SavepointReader.class, org.apache.flink.api.common.ExecutionConfig.class)
                .invoke(null, reader, env.getConfig());
        List<Object[]> out = new ArrayList<>();
        for (Object[] r : rows) {
            out.add(new Object[] {r[0], r[1], r[2], null});
        }
        return out;
    }

    /** One row per partition, sorted; a union state read twice must agree with itself. */
    static String toJson(long checkpointId, String engine, String operatorId, List<Object[]> rows) {
        TreeMap<String, Object[]> byPartition = new TreeMap<>();
        for (Object[] r : rows) {
            String key = r[0] + "\u0000" + String.format("%010d", (Integer) r[1]);
            Object[] seen = byPartition.put(key, r);
            if (seen != null && !seen[2].equals(r[2])) {
                throw new IllegalStateException("two offsets for " + r[0] + "-" + r[1] + ": " + seen[2] + ", " + r[2]);
            }
        }
        StringBuilder sb = new StringBuilder();
        sb.append("{\"checkpoint_id\": ").append(checkpointId)
          .append(", \"engine\": \"").append(engine)
          .append("\", \"operator_id\": \"").append(operatorId)
          .append("\", \"offsets\": [");
        boolean first = true;
        for (Object[] r : byPartition.values()) {
            sb.append(first ? "" : ", ").append("{\"topic\": \"").append(r[0])
              .append("\", \"partition\": ").append(r[1])
              .append(", \"raw_offset\": ").append(r[2])
              .append(", \"stopping_offset\": ").append(r[3] == null ? "null" : r[3]).append('}');
            first = false;
        }
        return sb.append("]}").toString();
    }
}
