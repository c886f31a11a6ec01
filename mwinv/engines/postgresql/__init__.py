"""PostgreSQL: the reader of the `mwinv` extension's ring (`reader`) and of its USDT probes
(`probes`)."""
