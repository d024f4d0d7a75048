"""__consumer_offsets: the record decoder and the ingest-offsets job."""
