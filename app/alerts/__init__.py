"""Alert channels: Prometheus metrics (a textfile, a Pushgateway), the webhook, and which incidents
`watch` alerts; used by `nightly` and `watch` alike."""
