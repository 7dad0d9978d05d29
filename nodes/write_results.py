"""What became of a reviewed write call, and the tool result that tells the model.

Whether an approved write was applied is stored explicitly with its decision (an
`error` when it could not be applied, `applied_at` once it was) and read with
`write_outcome`; the model's text is built from the outcome, never the other way
round. Only decision rows stored before rows had an `error` field are read from
their text (`legacy_error`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from nodes.prompts import TOOL_ERROR_PREFIX

APPLIED_TEXT = "Approved by the reviewer and applied"
"""How the tool result of an applied write starts (the model reads it; the demo model too)."""


class WriteOutcome(StrEnum):
    """What became of a reviewed write call."""

    APPLIED = "applied"
    """Approved and written (or found already at its planned content)."""
    PENDING = "pending"
    """Approved, not written yet: it is applied before the thread goes on."""
    NOT_APPLIED = "not_applied"
    """Approved, but it could not be applied; nothing was written and the model is told why."""
    REJECTED = "rejected"
    """Rejected by the reviewer; nothing was written."""


@dataclass(frozen=True)
class WriteResult:
    """A decision's outcome and the tool result the model reads for it.

    Attributes:
        outcome: What became of the call.
        text: The `tool` message content sent to the model.
        error: Why an approved write could not be applied (`NOT_APPLIED`), else None.
    """

    outcome: WriteOutcome
    text: str
    error: str | None = None

    @classmethod
    def approved(cls, name: str, rel: str, size: int) -> WriteResult:
        """An approved write about to be applied (`size` in bytes)."""
        return cls(WriteOutcome.PENDING, f"{APPLIED_TEXT}: {name} {rel} ({size} bytes).")

    @classmethod
    def rejected(cls, reason: str | None) -> WriteResult:
        """A write the reviewer rejected, with the reviewer's reason if any."""
        return cls(WriteOutcome.REJECTED,
                   f"REJECTED by the reviewer: {reason or 'no reason given'}. Nothing was written.")

    @classmethod
    def not_applied(cls, error: Exception | str) -> WriteResult:
        """An approved write that cannot be applied, and why."""
        return cls(WriteOutcome.NOT_APPLIED, f"{TOOL_ERROR_PREFIX}approved, but the write could not "
                   f"be applied: {error}. Nothing was written.", str(error))


def write_outcome(row: Mapping[str, Any]) -> WriteOutcome:
    """The outcome of a stored decision row, from its explicit fields.

    Args:
        row: A decision row with `decision` (`approve` or `reject`), `error` and
            `applied_at`.
    """
    if row["decision"] != "approve":
        return WriteOutcome.REJECTED
    if row["error"] is not None:
        return WriteOutcome.NOT_APPLIED
    return WriteOutcome.PENDING if row["applied_at"] is None else WriteOutcome.APPLIED


def legacy_error(decision: str, result: str) -> str | None:
    """The `error` of a decision row stored before rows had that field, or None.

    Such rows said an approved write was not applied only in the text the model was
    told (`TOOL_ERROR_PREFIX`); the whole text then stands for the error, as it did.
    """
    return result if decision == "approve" and str(result).startswith(TOOL_ERROR_PREFIX) else None
