"""`dyncc control`: the scoring and publishing loop and its actions."""
