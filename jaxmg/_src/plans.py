"""Plans of eager calls: what the argument checks and the engine choice
decided (a compiled program to call, or a layout), kept by
`distribution.eager_key`, so that a call repeated on arrays of the same
sharding, shape and dtype goes straight to its compiled program (for a small
problem the checks cost more than the solve's own launch)."""

from __future__ import annotations

from typing import Any, Callable

LIMIT = 1024
_plans: dict[Any, Any] = {}


def find(key) -> Any:
    return _plans.get(key) if key is not None else None


def keep(key, plan: Any) -> Any:
    if key is not None:
        if len(_plans) >= LIMIT:
            _plans.pop(next(iter(_plans)))  # the oldest
        _plans[key] = plan
    return plan


def find_or_make(key, make: Callable[[], Any]) -> Any:
    """The plan kept under `key`, else make()'s, kept (with no key: made, not kept)."""
    plan = find(key)
    return plan if plan is not None else keep(key, make())


def count() -> int:
    return len(_plans)


def clear() -> None:
    _plans.clear()
