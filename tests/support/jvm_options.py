"""The JVM options of the Spark and Flink JVMs the suite starts: local Spark drivers, the cluster
tier's daemons, drivers and executors, and the Flink tier's MiniClusters. (The Kafka brokers keep
the JVM's defaults: each lives a whole session.)

These JVMs live seconds to minutes on tiny data, where C2's compiler threads and G1's workers only
compete for the machine's two cores: C1 alone and the serial collector start them faster. C1 alone
also shrinks the default code cache from 240 MB to 48 MB, which a driver running the demo's eight
incidents fills; the JVM then disables its compiler for the rest of its life and prints ten lines
of warnings. The code cache keeps the size a full JVM gets.
"""

from __future__ import annotations

QUICK_JVM_OPTIONS = (
    "-XX:TieredStopAtLevel=1",
    "-XX:ReservedCodeCacheSize=240m",
    "-XX:+UseSerialGC",
)
QUICK_JVM = " ".join(QUICK_JVM_OPTIONS)
