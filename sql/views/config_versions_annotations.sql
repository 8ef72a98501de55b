-- Grafana: Annotation query (Dashboard settings > Annotations, ClickHouse data source), or a
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
