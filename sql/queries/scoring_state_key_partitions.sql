-- The days (partitions, YYYYMMDD of the generation's time) of scoring_state_keys in database %(db)s.
SELECT DISTINCT partition FROM system.parts WHERE database = %(db)s AND table = 'scoring_state_keys' AND active
