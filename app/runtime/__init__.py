"""Process plumbing: JVM classpaths, the Spark session, child-process lifetimes."""
