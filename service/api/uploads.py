"""Receiving a dataset upload: a streaming ``multipart/form-data`` reader with a size limit.

FastAPI's automatic form parsing hands each received message whole to the multipart parser
and writes file data through a thread pool one message at a time; for a 200 MB upload that
costs more than reading the CSV itself. This reader instead:

* refuses a declared ``Content-Length`` above the limit before reading anything, and counts
  the bytes actually received, stopping at the limit (chunked uploads included);
* feeds the parser slices of at most 1 MiB;
* writes the ``file`` part to one temporary file (in memory up to 1 MiB, then on disk), so the
  upload is never held in memory whole, and keeps the small ``spec`` part as text.

Errors are :class:`UploadRejectedError` with the HTTP status to answer (400, 413, 415, 422);
they never contain the uploaded content.
"""

from __future__ import annotations

import codecs
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import IO, Final

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

__all__ = [
    "MAX_SPEC_BYTES",
    "ReceivedUpload",
    "UploadRejectedError",
    "receive_upload",
]

#: The ``spec`` part may not be larger than this.
MAX_SPEC_BYTES: Final[int] = 1 << 20
#: Largest slice handed to the multipart parser at once (it is much faster on slices).
_SLICE: Final[int] = 1 << 20
#: The file part stays in memory up to this size, then moves to a temporary file on disk.
_SPOOL_BYTES: Final[int] = 1 << 20

FILE_PART: Final[str] = "file"
SPEC_PART: Final[str] = "spec"


class UploadRejectedError(Exception):
    """The request body is not an acceptable upload; answer ``status`` with ``detail``."""

    def __init__(self, status: int, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail


@dataclass(slots=True)
class ReceivedUpload:
    """The received parts. ``file`` is positioned at 0; the caller closes it."""

    spec: str
    file: IO[bytes]
    filename: str | None
    size: int


def too_large(limit: int) -> UploadRejectedError:
    return UploadRejectedError(
        413,
        "upload-too-large",
        f"the upload is larger than this server's limit of {limit} bytes ({limit / 2**20:.0f} MiB)",
    )


@dataclass(slots=True)
class _Part:
    name: str | None = None
    filename: str | None = None
    is_file: bool = False
    data: bytearray = field(default_factory=bytearray)


class _Collector:
    """Multipart callbacks: remembers the ``spec`` text and streams ``file`` to disk."""

    def __init__(self, charset: str) -> None:
        self.charset = charset
        self.part = _Part()
        self.header_name = bytearray()
        self.header_value = bytearray()
        self.disposition = b""
        self.spec: bytes | None = None
        self.file: IO[bytes] | None = None
        self.filename: str | None = None
        self.file_size = 0
        self.error: UploadRejectedError | None = None

    def _reject(self, detail: str) -> None:
        if self.error is None:
            self.error = UploadRejectedError(422, "invalid-upload", detail)
        raise MultipartParseError(detail)

    def on_part_begin(self) -> None:
        self.part = _Part()
        self.disposition = b""

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def on_header_end(self) -> None:
        if bytes(self.header_name).lower() == b"content-disposition":
            self.disposition = bytes(self.header_value)
        self.header_name.clear()
        self.header_value.clear()

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self.disposition)
        raw_name = options.get(b"name")
        if raw_name is None:
            self._reject("every form part needs a Content-Disposition name")
            return
        name = raw_name.decode(self.charset, errors="replace")
        self.part.name = name
        if name == FILE_PART:
            if self.file is not None:
                self._reject("send exactly one 'file' part")
            self.part.is_file = True
            raw_filename = options.get(b"filename")
            self.filename = (
                None if raw_filename is None else raw_filename.decode(self.charset, "replace")
            )
            self.file = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115
        elif name == SPEC_PART:
            if self.spec is not None:
                self._reject("send exactly one 'spec' part")
        else:
            self._reject(
                f"unexpected form part {name[:100]!r}; send a 'file' part and a 'spec' part"
            )

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self.part.is_file:
            assert self.file is not None
            self.file.write(data[start:end])
            self.file_size += end - start
        else:
            if len(self.part.data) + (end - start) > MAX_SPEC_BYTES:
                self._reject(f"the 'spec' part is larger than {MAX_SPEC_BYTES} bytes")
            self.part.data += data[start:end]

    def on_part_end(self) -> None:
        if self.part.name == SPEC_PART:
            self.spec = bytes(self.part.data)


async def receive_upload(
    *,
    content_type: str | None,
    content_length: str | None,
    chunks: AsyncIterator[bytes],
    max_bytes: int,
) -> ReceivedUpload:
    """Read a ``multipart/form-data`` body with a ``file`` and a ``spec`` part.

    Raises :class:`UploadRejectedError`: 415 when the body is not multipart, 413 when it is
    (or is declared) larger than ``max_bytes``, 400 when the multipart framing is broken, 422
    when a part is missing, duplicated, unexpected or the spec is not UTF-8. On error every
    temporary file is closed (and so deleted).
    """
    media, params = parse_options_header(content_type or "")
    if media != b"multipart/form-data" or b"boundary" not in params:
        raise UploadRejectedError(
            415,
            "unsupported-media-type",
            "send multipart/form-data with a 'file' part (CSV or Parquet) and a 'spec' part (JSON)",
        )
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            declared = None
        if declared is not None and declared > max_bytes:
            raise too_large(max_bytes)
    charset = params.get(b"charset", b"utf-8").decode("latin-1")
    try:
        charset = codecs.lookup(charset).name
    except LookupError:
        charset = "utf-8"
    collector = _Collector(charset)
    parser = MultipartParser(
        params[b"boundary"],
        {
            "on_part_begin": collector.on_part_begin,
            "on_header_field": collector.on_header_field,
            "on_header_value": collector.on_header_value,
            "on_header_end": collector.on_header_end,
            "on_headers_finished": collector.on_headers_finished,
            "on_part_data": collector.on_part_data,
            "on_part_end": collector.on_part_end,
        },
    )
    received = 0
    try:
        async for chunk in chunks:
            received += len(chunk)
            if received > max_bytes:
                raise too_large(max_bytes)
            view = memoryview(chunk)
            for i in range(0, len(view), _SLICE):
                parser.write(bytes(view[i : i + _SLICE]) if len(view) > _SLICE else chunk)
        parser.finalize()
    except MultipartParseError as exc:
        if collector.file is not None:
            collector.file.close()
        if collector.error is not None:
            raise collector.error from None
        raise UploadRejectedError(
            400, "malformed-multipart", "the multipart/form-data body is malformed"
        ) from exc
    except BaseException:
        if collector.file is not None:
            collector.file.close()
        raise
    missing = [
        name
        for name, present in ((SPEC_PART, collector.spec is not None), (FILE_PART, collector.file))
        if not present
    ]
    if missing:
        if collector.file is not None:
            collector.file.close()
        raise UploadRejectedError(
            422,
            "invalid-upload",
            "the upload needs a 'file' part (CSV or Parquet) and a 'spec' part (JSON); "
            f"missing: {', '.join(repr(m) for m in missing)}",
        )
    assert collector.file is not None
    assert collector.spec is not None
    try:
        spec = collector.spec.decode("utf-8")
    except UnicodeDecodeError:
        collector.file.close()
        raise UploadRejectedError(
            422, "invalid-upload", "the 'spec' part must be UTF-8 JSON"
        ) from None
    collector.file.seek(0)
    return ReceivedUpload(
        spec=spec, file=collector.file, filename=collector.filename, size=collector.file_size
    )
