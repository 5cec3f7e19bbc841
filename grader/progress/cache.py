"""The progress view's cache of verdicts: one small JSON file per user, written atomically.

Keys carry the answers' text and grader_digest(), so an entry is stale as soon as
either changes.
"""

from __future__ import annotations

import json
import os

CACHE_ENTRIES = 64


def cache_path() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ddp-course", "progress.json")


def load_cache() -> dict:
    try:
        with open(cache_path(), encoding="utf-8") as f:
            cache = json.load(f)
        return cache if isinstance(cache, dict) else {}
    except (OSError, ValueError):
        return {}


def save_cache(cache: dict) -> None:
    path = cache_path()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        newest = sorted(cache.items(), key=lambda kv: kv[1].get("at", 0))[-CACHE_ENTRIES:]
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(dict(newest), f)
        os.replace(tmp, path)  # atomic: two kernels may save at once
    except OSError:
        pass  # a read-only home: no cache, still correct
