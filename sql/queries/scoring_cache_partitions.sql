-- The active partitions (days) of the scoring_cache cache in database %(db)s.
SELECT DISTINCT partition FROM system.parts WHERE database = %(db)s AND table = 'scoring_cache' AND active
