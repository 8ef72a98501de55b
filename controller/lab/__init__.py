"""`dyncc lab` and `dyncc demo`: the whole loop on namespaces or a recording."""

__all__: list[str] = []
