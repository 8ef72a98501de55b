-- Per POP, the newest committed generation of the scoring state for %(source)s and %(params)s
-- with the (bucket, version, threshold)s it holds; %(pop)s = '' for every POP.
SELECT pop, generation, bucket, version, threshold
FROM scoring_state_keys
WHERE source = %(source)s AND params = %(params)s AND (%(pop)s = '' OR pop = %(pop)s)
  AND (pop, generation) IN
      (
          SELECT pop, max(generation)
          FROM scoring_state_keys
          WHERE source = %(source)s AND params = %(params)s AND (%(pop)s = '' OR pop = %(pop)s)
          GROUP BY pop
      )
