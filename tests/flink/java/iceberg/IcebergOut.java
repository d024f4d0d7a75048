package offsetaudit.flinktest;

import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.Map;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.util.Collector;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.Schema;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.SupportsNamespaces;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.flink.CatalogLoader;
import org.apache.iceberg.flink.FlinkSchemaUtil;
import org.apache.iceberg.flink.TableLoader;
import org.apache.iceberg.flink.sink.FlinkSink;
import org.apache.iceberg.types.Types;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * The job's Iceberg sink: every record with its topic, partition and offset, appended through
 * Iceberg's FlinkSink (its IcebergFilesCommitter commits one snapshot per checkpoint with data,
 * naming the Flink job, the committer operator and the max committed checkpoint id) to a table of a
 * Hadoop catalog, a warehouse directory on local disk, created on first use.
 */
public final class IcebergOut {
    static final String CATALOG = "warehouse";
    static final String SINK_UID = "iceberg-sink";
    static final Schema SCHEMA = new Schema(
            Types.NestedField.required(1, "topic", Types.StringType.get()),
            Types.NestedField.required(2, "partition", Types.IntegerType.get()),
            Types.NestedField.required(3, "offset", Types.LongType.get()),
            Types.NestedField.optional(4, "value", Types.StringType.get()));

    private IcebergOut() {}

    public static void attach(StreamExecutionEnvironment env, Map<String, String> args) throws Exception {
        String warehouse = required(args, "warehouse");
        TableIdentifier table = TableIdentifier.parse(required(args, "table"));
        CatalogLoader catalog = CatalogLoader.hadoop(
                CATALOG, new Configuration(), Collections.singletonMap("warehouse", warehouse));
        ensureTable(catalog.loadCatalog(), table);
        DataStream<RowData> records = FlinkKafkaJob.kafkaSource(env, args, new Coordinates());
        FlinkSink.forRowData(records)
                .tableLoader(TableLoader.fromCatalog(catalog, table))
                .uidPrefix(SINK_UID)
                .append();
    }

    static String required(Map<String, String> args, String key) {
        String value = args.get(key);
        if (value == null) {
            throw new IllegalArgumentException("--sink iceberg needs --" + key);
        }
        return value;
    }

    static void ensureTable(Catalog catalog, TableIdentifier table) {
        if (catalog instanceof SupportsNamespaces) {
            SupportsNamespaces namespaces = (SupportsNamespaces) catalog;
            Namespace namespace = table.namespace();
            if (!namespaces.namespaceExists(namespace)) {
                namespaces.createNamespace(namespace);
            }
        }
        if (!catalog.tableExists(table)) {
            catalog.createTable(table, SCHEMA);
        }
    }

    /** A Kafka record as a row of the table: its coordinates and its value. */
    static final class Coordinates implements KafkaRecordDeserializationSchema<RowData> {
        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<RowData> out) {
            byte[] value = record.value();
            out.collect(GenericRowData.of(
                    StringData.fromString(record.topic()),
                    record.partition(),
                    record.offset(),
                    value == null ? null : StringData.fromString(new String(value, StandardCharsets.UTF_8))));
        }

        @Override
        public TypeInformation<RowData> getProducedType() {
            return InternalTypeInfo.of(FlinkSchemaUtil.convert(SCHEMA));
        }
    }
}
