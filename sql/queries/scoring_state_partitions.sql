-- The generations (partitions) of the scoring state in database %(db)s (on a cluster: a shard's).
SELECT DISTINCT partition FROM system.parts WHERE database = %(db)s AND table = 'scoring_state' AND active
