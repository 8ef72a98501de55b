"""`dyncc agent`: apply signed per-prefix congestion configs as routes, report statuses."""
