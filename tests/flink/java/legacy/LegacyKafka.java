package offsetaudit.flinktest;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.api.common.typeinfo.BasicTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.typeutils.TupleTypeInfo;
import org.apache.flink.state.api.OperatorIdentifier;
import org.apache.flink.state.api.SavepointReader;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.connectors.kafka.FlinkKafkaConsumer;
import org.apache.flink.streaming.connectors.kafka.FlinkKafkaConsumerBase;
import org.apache.flink.streaming.connectors.kafka.internals.KafkaTopicPartition;

/** The legacy FlinkKafkaConsumer's side of the job and of the oracle (flink-connector-kafka 3.4.0-1.20). */
public final class LegacyKafka {
    static final String STATE_NAME = "topic-partition-offset-states";

    public static DataStream<String> source(StreamExecutionEnvironment env, Properties props, String topic, String start) {
        FlinkKafkaConsumer<String> consumer = new FlinkKafkaConsumer<>(topic, new SimpleStringSchema(), props);
        switch (start) {
            case "earliest": consumer.setStartFromEarliest(); break;
            case "latest": consumer.setStartFromLatest(); break;
            case "committed": consumer.setStartFromGroupOffsets(); break;
            default: throw new IllegalArgumentException("unknown start " + start);
        }
        consumer.setCommitOffsetsOnCheckpoints(true);
        return env.addSource(consumer, "kafka-source").uid(FlinkKafkaJob.SOURCE_UID);
    }

    /** [topic, partition, offset] per stored element, read with the consumer's own state serializer. */
    @SuppressWarnings("unchecked")
    public static List<Object[]> readOffsets(SavepointReader reader, ExecutionConfig config) throws Exception {
        Method factory = FlinkKafkaConsumerBase.class.getDeclaredMethod("createStateSerializer", ExecutionConfig.class);
        factory.setAccessible(true);
        TypeSerializer<Tuple2<KafkaTopicPartition, Long>> serializer =
                (TypeSerializer<Tuple2<KafkaTopicPartition, Long>>) factory.invoke(null, config);
        TypeInformation<Tuple2<KafkaTopicPartition, Long>> type =
                new TupleTypeInfo<>(TypeInformation.of(KafkaTopicPartition.class), BasicTypeInfo.LONG_TYPE_INFO);
        List<Object[]> out = new ArrayList<>();
        DataStream<Tuple2<KafkaTopicPartition, Long>> states =
                reader.readUnionState(OperatorIdentifier.forUid(FlinkKafkaJob.SOURCE_UID), STATE_NAME, type, serializer);
        for (Tuple2<KafkaTopicPartition, Long> t : StateOracle.collect(states)) {
            out.add(new Object[] {t.f0.getTopic(), t.f0.getPartition(), t.f1});
        }
        return out;
    }
}
