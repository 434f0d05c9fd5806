import functools


class Cache:
    """A cache."""

    @functools.lru_cache
    def get(self, key):
        return key

    def put(self, key, value):
        pass
