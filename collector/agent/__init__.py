"""`dyncc agent`: apply signed per-prefix congestion configs as routes, report statuses."""

__all__: list[str] = []
