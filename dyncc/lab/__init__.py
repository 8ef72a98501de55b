"""`dyncc lab` and `dyncc demo`: the whole loop on a fleet of namespaces or a recording."""
