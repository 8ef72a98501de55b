-- View config_versions_annotations (created by `dyncc schema apply`; README "Views").
-- One mark per published config version (rejected versions never reached edges), at the time
-- the version was first created.
-- Columns: time, text, tags (the POP).
-- No time filter here: the query adds its own on `time`, e.g. a Grafana annotation query
-- (Dashboard settings > Annotations, ClickHouse data source) or a Table panel:
--   SELECT time, text, tags FROM config_versions_annotations WHERE $__timeFilter(time) ORDER BY time
SELECT
    min(created_at) AS time,
    concat(pop, ' v', toString(version), ': ', toString(max(entries)), ' prefixes',
           if(max(kill_switch) = 1, ' (KILL SWITCH)', '')) AS text,
    pop AS tags
FROM config_versions
WHERE lower(status) NOT LIKE 'reject%'
GROUP BY pop, version
