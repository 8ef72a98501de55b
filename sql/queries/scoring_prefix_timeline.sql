-- The bucket timeline of one prefix (statistic, threshold, counted, bad), for explain, with
-- app_limited = the prefix's qualifying samples in the bucket that are app-limited (left out of
-- qualifying and the statistic unless include_app_limited; 0 where the source has no rows).
-- {{timeline}} is scoring_timeline.sql; {{app_limited}} is scoring_prefix_app_limited_rollup.sql
-- or scoring_prefix_app_limited_raw.sql (controller/scoring/query.py); parameters: those of
-- both and %(prefix)s.
SELECT pop, bucket, prefix, family, samples, qualifying, counted, stat, low, rtt, threshold, bad, app_limited
FROM
(
    SELECT * FROM ({{timeline}}) WHERE prefix = %(prefix)s
) AS prefix_timeline
ANY LEFT JOIN
(
    {{app_limited}}
) AS prefix_app_limited USING (pop, bucket)
ORDER BY bucket
