-- The bucket timeline of one prefix (statistic, threshold, counted, bad), for explain.
-- {{timeline}} is scoring_timeline.sql; parameters: those of scoring_timeline.sql and %(prefix)s.
SELECT * FROM ({{timeline}}) WHERE prefix = %(prefix)s ORDER BY bucket
