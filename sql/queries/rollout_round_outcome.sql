-- The config_versions row a publish step wrote for a round (published / rejected / publish_failed).
SELECT status, version, reasons FROM config_versions
WHERE pop = %(pop)s AND round_id = %(round_id)s AND created_ns >= %(since)s
  AND kind IN ('canary', 'full', 'candidate')
ORDER BY created_ns DESC LIMIT 1
