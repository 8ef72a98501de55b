-- The published config of a POP at a version (base64 of the serialized CongestionConfig).
SELECT config FROM config_versions
WHERE pop = %(pop)s AND version = %(version)s AND status = 'published'
ORDER BY created_ns DESC LIMIT 1
