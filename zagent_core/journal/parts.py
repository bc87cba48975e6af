"""What every event body is built of: the base models, and the parts several events share."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict


class Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Body(Part):
    #: The schema version this code writes; bump it (and add an upcaster) when a
    #: field changes meaning or disappears, and ``v``'s default with it (checked below).
    SCHEMA_VERSION: ClassVar[int] = 1
    #: A plain default, not a ``model_post_init`` filling it in: that hook cost every
    #: event read from the journal a tenth of its validation.
    v: int = 1

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if cls.model_fields["v"].default != cls.SCHEMA_VERSION:
            raise TypeError(f"{cls.__name__}: a body of SCHEMA_VERSION {cls.SCHEMA_VERSION} must default v to it "
                            f"(v: int = {cls.SCHEMA_VERSION})")


def unset(value: Any) -> bool:
    """Whether an optional field is left out of a body: most events have none of those fields, and
    their bodies stay as they always were, so journals and exports read as before, by older zagents too."""
    return value is None


# -- parts shared by several events ------------------------------------------------


class ToolOffer(Part):
    """A tool as offered to the model when the session started."""

    name: str
    description: str
    folder: str
    manifest_hash: str
    #: What runs a call of it when it is not a folder: ``builtin:read_file``.
    identity: str | None = None


class Coercion(Part):
    """A loosely typed argument that validation converted (``"3"`` -> ``3``)."""

    path: str
    before: Any
    after: Any


class DroppedItem(Part):
    """An array item that did not fit its ``items`` schema even after coercion: left out, the call ran without it."""

    #: Its place in the arguments as asked (``tool_call_requested`` holds its value): ``paths[2]``.
    path: str
    #: Why, as the model was told: ``argument "paths[2]": expected string, got integer``.
    problem: str


class OutputFile(Part):
    """A file a call left in its output folder."""

    path: str
    size: int
    mime: str | None = None
    attached: bool = False
    #: Why a media file was not attached (capability off, too large), if it was not.
    note: str | None = None


class Media(Part):
    """A file attached to a result for the model to see: a reference, never its bytes."""

    path: str
    mime: str
    size: int
    #: The file's sha256 when the call made it, so a later request can tell it changed (None before 0.2).
    sha256: str | None = None
