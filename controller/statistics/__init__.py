"""The per-bucket statistics the scoring reads (the scoring_cache table): cache.py fills it from
the telemetry rollups or raw tcpinfo, keeper.py keeps it filled as data arrives (`dyncc ingest`
runs it).  Imports nothing above the store."""
