-- Grafana: Annotation query (Dashboard settings > Annotations, ClickHouse data source), or a
-- $__timeFilter(col) is Grafana's macro, not dyncc's template syntax; dyncc runs this file with it
-- expanded by controller/store/sql.py render_time_filter (as the ClickHouse data source does).
-- Table panel.  One mark per published config version (rejected versions never reached edges).
SELECT
    min(created_at) AS time,
    concat(pop, ' v', toString(version), ': ', toString(max(entries)), ' prefixes',
           if(max(kill_switch) = 1, ' (KILL SWITCH)', '')) AS text,
    pop AS tags
FROM config_versions
WHERE $__timeFilter(created_at)
  AND lower(status) NOT LIKE 'reject%'
GROUP BY pop, version
ORDER BY time
