"""How a measurement that did not run is recorded: out of memory ("oom"), not
supported by the library it calls ("skipped"), or another error ("error")."""

from __future__ import annotations

import re
from typing import Any

OOM_PATTERN = re.compile(
    r"RESOURCE_EXHAUSTED|out of memory|could not allocate|ALLOC_FAILED|cudaErrorMemoryAllocation"
    r"|cuBLAS error 3 |bad_alloc|MemoryError|\bOOM\b", re.IGNORECASE)


class Unsupported(Exception):
    """The library under test has no such call (yet): the case is skipped, with this reason."""


def short_error(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [line for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else text
    return f"{type(exc).__name__}: {first}"[:240]


def is_oom(text: str) -> bool:
    return bool(OOM_PATTERN.search(text or ""))


def error_result(exc: BaseException, prefix: str = "") -> dict[str, Any]:
    """A result for a measurement that raised: status "oom" when it ran out of memory,
    "skipped" when the call does not exist, else "error"."""
    if isinstance(exc, Unsupported):
        return {"status": "skipped", "attempted": False, "error": prefix + str(exc)}
    text = prefix + short_error(exc)
    match = OOM_PATTERN.search(f"{type(exc).__name__}: {exc}")
    if match and not is_oom(text):  # say why, when the first line does not
        line = next(l for l in str(exc).splitlines() if OOM_PATTERN.search(l)).strip()
        text += f" [{line[:160]}]"
    return {"status": "oom" if match else "error", "error": text}
