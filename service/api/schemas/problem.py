"""RFC 9457 problem details, the body of every error response."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PROBLEM_MEDIA_TYPE", "PROBLEM_TYPE_BASE", "Problem", "ValidationIssue"]

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "https://privfit.dev/problems/"


class ValidationIssue(BaseModel):
    """One invalid part of a request."""

    loc: list[str | int] = Field(description="Where: e.g. ['body', 'name'] or ['query', 'limit'].")
    msg: str = Field(description="What is wrong with it.")
    type: str | None = Field(default=None, description="Machine-readable error code.")


class Problem(BaseModel):
    """An error, as `application/problem+json` (RFC 9457).

    `type` is a stable URI per kind of error; clients branch on it, not on `detail`. Some
    problems add members: `errors` (validation), `remaining_epsilon`/`remaining_delta`
    (budget exhausted).
    """

    model_config = ConfigDict(extra="allow")

    type: str = Field(
        description="URI identifying the kind of problem.",
        examples=[PROBLEM_TYPE_BASE + "not-found"],
    )
    title: str = Field(description="Short summary of the kind of problem.")
    status: int = Field(ge=400, le=599, description="The HTTP status code.")
    detail: str | None = Field(
        default=None, description="What went wrong with this request; never contains secrets."
    )
    instance: str | None = Field(default=None, description="The request path.")
    request_id: str | None = Field(
        default=None, description="Also in the X-Request-ID header; quote it when reporting."
    )
    errors: list[ValidationIssue] | None = Field(
        default=None, description="For validation problems: every invalid part of the request."
    )

    def body(self) -> dict[str, Any]:
        """The JSON body, without unset optional members."""
        return self.model_dump(mode="json", exclude_none=True)
