"""Receiving a dataset upload: a streaming ``multipart/form-data`` reader with a size limit
that hands the file to its consumer while the file is still arriving.

FastAPI's automatic form parsing hands each received message whole to the multipart parser
and writes file data through a thread pool one message at a time; for a 200 MB upload that
costs more than reading the CSV itself. :func:`process_upload` instead:

* refuses a declared ``Content-Length`` above the limit before reading anything, and counts
  the bytes actually received, stopping at the limit (chunked uploads included);
* feeds the parser slices of at most 1 MiB, keeps the small ``spec`` part as text, and
  refuses a body that ends before its closing boundary (a cut-short upload);
* when the ``spec`` part comes before the ``file`` part (as HTML forms, curl ``-F`` in that
  order and httpx send them), prepares the spec and starts ``process`` at once on a thread
  of its own, reading the file through a bounded in-memory pipe (:class:`_Pipe`) while the
  rest of the body arrives: receiving and parsing overlap, and the file never touches disk;
* otherwise spools the ``file`` part to a temporary file (in memory up to 1 MiB, then on
  disk) and calls ``process`` once the body is complete.

Either way the upload is never held in memory whole, and the outcome is the same as reading
the whole body first: a problem with the body (413, malformed multipart, a missing part)
wins over a problem with the spec, which wins over one with the file. The reader of the pipe
sees the end of the file only once the whole body has been received and checked; if the body
turns out bad, its reads fail with :class:`UploadAbortedError`, so nothing it read is kept.

Errors are :class:`UploadRejectedError` with the HTTP status to answer (400, 413, 415, 422);
they never contain the uploaded content.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import contextvars
import functools
import io
import tempfile
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import IO, Any, Final, Generic, TypeVar, cast

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, MultipartState, parse_options_header
from starlette.concurrency import run_in_threadpool

__all__ = [
    "MAX_SPEC_BYTES",
    "SPEC_ERROR",
    "UploadAbortedError",
    "UploadRejectedError",
    "process_upload",
]

#: The ``spec`` part may not be larger than this.
MAX_SPEC_BYTES: Final[int] = 1 << 20
#: Largest slice handed to the multipart parser at once (it is much faster on slices).
_SLICE: Final[int] = 1 << 20
#: A spooled file part stays in memory up to this size, then moves to a temporary file.
_SPOOL_BYTES: Final[int] = 1 << 20
#: File bytes received but not yet read by ``process`` (the pipe's capacity).
PIPE_BYTES: Final[int] = 8 << 20

#: The ``kind`` of a rejection that concerns the ``spec`` part itself (too large, not UTF-8);
#: answered with the same problem type as every other spec error.
SPEC_ERROR: Final[str] = "invalid-dataset-spec"

FILE_PART: Final[str] = "file"
SPEC_PART: Final[str] = "spec"

_P = TypeVar("_P")
_R = TypeVar("_R")


class UploadRejectedError(Exception):
    """The request body is not an acceptable upload; answer ``status`` with ``detail``."""

    def __init__(self, status: int, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail


class UploadAbortedError(Exception):
    """Raised to the reader of an upload's file when the request body failed or ended early."""


def too_large(limit: int) -> UploadRejectedError:
    return UploadRejectedError(
        413,
        "upload-too-large",
        f"the upload is larger than this server's limit of {limit} bytes ({limit / 2**20:.0f} MiB)",
    )


def _malformed() -> UploadRejectedError:
    return UploadRejectedError(
        400, "malformed-multipart", "the multipart/form-data body is malformed"
    )


class _Pipe(io.RawIOBase):
    """Bytes from the event loop (:meth:`put`) to one reader thread (:meth:`read`), with at
    most about ``capacity`` bytes buffered.

    ``put`` waits (asynchronously) while the buffer is full; ``read(n)`` blocks until it can
    return ``n`` bytes, or what is left after :meth:`finish`. After :meth:`fail` every read
    raises :class:`UploadAbortedError`; after :meth:`abandon` (the reader is gone) ``put``
    drops what it is given.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self._loop = asyncio.get_running_loop()
        self._capacity = capacity
        self._cond = threading.Condition()
        self._chunks: deque[memoryview] = deque()
        self._buffered = 0
        self._want = 0
        self._ended = False
        self._failed = False
        self._abandoned = False
        self._room = asyncio.Event()

    def readable(self) -> bool:
        return True

    async def put(self, data: memoryview) -> None:
        while True:
            with self._cond:
                if self._abandoned:
                    return
                if self._buffered < self._capacity:
                    self._chunks.append(data)
                    self._buffered += len(data)
                    if self._buffered >= self._want:
                        self._cond.notify()
                    return
                self._room.clear()
            await self._room.wait()

    def finish(self) -> None:
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def fail(self) -> None:
        with self._cond:
            self._failed = True
            self._chunks.clear()
            self._cond.notify_all()

    def abandon(self) -> None:
        """The reader stopped (on the event loop: a done callback)."""
        with self._cond:
            self._abandoned = True
            self._chunks.clear()
            self._buffered = 0
        self._room.set()

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return self.readall()
        with self._cond:
            self._want = min(size, self._capacity)
            while self._buffered < self._want and not (self._ended or self._failed):
                self._cond.wait()
            self._want = 0
            if self._failed:
                raise UploadAbortedError("the upload failed while its file was being read")
            out: list[memoryview] = []
            got = 0
            while self._chunks and got < size:
                chunk = self._chunks[0]
                take = min(len(chunk), size - got)
                out.append(chunk[:take])
                if take == len(chunk):
                    self._chunks.popleft()
                else:
                    self._chunks[0] = chunk[take:]
                got += take
            self._buffered -= got
        if got:
            with contextlib.suppress(RuntimeError):  # the loop is closing: nobody waits
                self._loop.call_soon_threadsafe(self._room.set)
        return b"".join(out)

    def readall(self) -> bytes:
        parts = []
        while data := self.read(self._capacity):
            parts.append(data)
        return b"".join(parts)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _in_thread(call: Callable[[], _R]) -> asyncio.Future[_R]:
    """Run ``call`` on a thread of its own (with the caller's context variables); its
    outcome as a future of the running loop.

    Not the shared thread pool: ``process`` may wait on a slow client for as long as the
    upload lasts, and must not hold a thread that other requests need meanwhile.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_R] = loop.create_future()
    context = contextvars.copy_context()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def run() -> None:
        try:
            result = context.run(call)
        except BaseException as exc:
            report = functools.partial(settle, functools.partial(future.set_exception, exc))
        else:
            report = functools.partial(settle, functools.partial(future.set_result, result))
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(report)

    threading.Thread(target=run, name="privfit-upload", daemon=True).start()
    return future


def _prepare_then_process(
    prepare: Callable[[str], _P], process: Callable[[_P, IO[bytes]], _R], text: str, file: IO[bytes]
) -> _R:
    """``process(prepare(text), file)``: on a worker thread, so the spec (up to 1 MiB of JSON)
    is not parsed on the event loop."""
    return process(prepare(text), file)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class _Upload(Generic[_P, _R]):
    """The multipart callbacks and what they lead to: the ``spec`` text, and the file going
    to ``process`` through a pipe, to a spooled temporary file, or (when the spec cannot be
    prepared) nowhere."""

    def __init__(
        self,
        charset: str,
        prepare: Callable[[str], _P],
        process: Callable[[_P, IO[bytes]], _R],
    ) -> None:
        self.charset = charset
        self.prepare = prepare
        self.process = process
        # the part being read
        self.name: str | None = None
        self.header_name = bytearray()
        self.header_value = bytearray()
        self.disposition = b""
        self.spec_data = bytearray()
        # what was received
        self.spec: bytes | None = None
        self.file_seen = False
        self.filename: str | None = None
        self.file_size = 0
        self.error: UploadRejectedError | None = None
        # where the file goes
        self.pipe: _Pipe | None = None
        self.pending: list[memoryview] = []
        self.worker: asyncio.Future[_R] | None = None
        self.spool: IO[bytes] | None = None
        self.spec_text: str | None = None

    def _reject(self, detail: str, kind: str = "invalid-upload") -> None:
        if self.error is None:
            self.error = UploadRejectedError(422, kind, detail)
        raise MultipartParseError(detail)

    def on_part_begin(self) -> None:
        self.name = None
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
        self.name = name
        if name == FILE_PART:
            if self.file_seen:
                self._reject("send exactly one 'file' part")
            self.file_seen = True
            raw_filename = options.get(b"filename")
            self.filename = (
                None if raw_filename is None else raw_filename.decode(self.charset, "replace")
            )
            self._start_file()
        elif name == SPEC_PART:
            if self.spec is not None:
                self._reject("send exactly one 'spec' part")
            self.spec_data = bytearray()
        else:
            self._reject(
                f"unexpected form part {name[:100]!r}; send a 'file' part and a 'spec' part"
            )

    def _start_file(self) -> None:
        """The file part begins: stream it to a worker that prepares the spec and runs
        ``process`` if the spec is already here (UTF-8), else spool it (spec still to come) or
        drop it (the spec is not UTF-8)."""
        if self.spec is None:
            self.spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115
            return
        try:
            self.spec_text = self.spec.decode("utf-8")
        except UnicodeDecodeError:
            return  # reported once the body is complete
        # The spec is parsed on the worker too (never on the event loop); a problem with it
        # fails the worker, which drops the file, and is raised once the body is known to be
        # complete and sound (see complete).
        pipe = self.pipe = _Pipe(PIPE_BYTES)
        self.worker = _in_thread(
            functools.partial(
                _prepare_then_process,
                self.prepare,
                self.process,
                self.spec_text,
                cast(IO[bytes], pipe),
            )
        )
        self.worker.add_done_callback(lambda _: pipe.abandon())

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self.name == FILE_PART:
            self.file_size += end - start
            if self.pipe is not None:
                self.pending.append(memoryview(data)[start:end])
            elif self.spool is not None:
                self.spool.write(memoryview(data)[start:end])
        else:
            if len(self.spec_data) + (end - start) > MAX_SPEC_BYTES:
                self._reject(f"the 'spec' part is larger than {MAX_SPEC_BYTES} bytes", SPEC_ERROR)
            self.spec_data += data[start:end]

    def on_part_end(self) -> None:
        if self.name == SPEC_PART:
            self.spec = bytes(self.spec_data)

    async def flush(self) -> None:
        """Hand the file data of the last slice to the pipe (waiting while it is full)."""
        if self.pending:
            pending, self.pending = self.pending, []
            assert self.pipe is not None
            for piece in pending:
                await self.pipe.put(piece)

    def check_complete(self) -> None:
        """After the whole body: both parts present, the spec UTF-8."""
        missing = [
            name
            for name, present in ((SPEC_PART, self.spec is not None), (FILE_PART, self.file_seen))
            if not present
        ]
        if missing:
            raise UploadRejectedError(
                422,
                "invalid-upload",
                "the upload needs a 'file' part (CSV or Parquet) and a 'spec' part (JSON); "
                f"missing: {', '.join(repr(m) for m in missing)}",
            )
        assert self.spec is not None
        try:
            self.spec_text = self.spec.decode("utf-8")
        except UnicodeDecodeError:
            raise UploadRejectedError(
                422, SPEC_ERROR, "the 'spec' part must be UTF-8 JSON"
            ) from None

    def abort(self) -> None:
        """The body failed: make the file's reader fail, drop the spool."""
        if self.pipe is not None:
            self.pipe.fail()
        if self.worker is not None:  # its outcome is not reported: retrieve it when it comes
            self.worker.add_done_callback(_retrieve)
        if self.spool is not None:
            self.spool.close()

    async def settle(self) -> None:
        """Wait for ``process`` to stop (after :meth:`abort`), ignoring how it ended."""
        if self.worker is not None:
            await asyncio.wait([self.worker])
            if not self.worker.cancelled():
                self.worker.exception()  # retrieved: it is the body's error that is reported

    async def complete(self) -> _R:
        """The body is complete and sound: the outcome of ``process``."""
        if self.worker is not None:
            assert self.pipe is not None
            self.pipe.finish()
            return await self.worker
        assert self.spool is not None
        assert self.spec_text is not None
        try:
            self.spool.seek(0)
            return await run_in_threadpool(
                _prepare_then_process, self.prepare, self.process, self.spec_text, self.spool
            )
        finally:
            self.spool.close()


async def process_upload(
    *,
    content_type: str | None,
    content_length: str | None,
    chunks: AsyncIterator[bytes],
    max_bytes: int,
    prepare: Callable[[str], _P],
    process: Callable[[_P, IO[bytes]], _R],
) -> _R:
    """Receive a ``multipart/form-data`` body with a ``file`` and a ``spec`` part, and return
    ``process(prepare(spec_text), file)`` (``process`` runs on a worker thread and reads the
    file once, front to back; it may start before the body is complete, see the module doc).

    Raises, in this order of precedence: :class:`UploadRejectedError` (415 when the body is
    not multipart, 413 when it is or is declared larger than ``max_bytes``, 400 when the
    multipart framing is broken, 422 when a part is missing, duplicated or unexpected, or
    with ``kind`` :data:`SPEC_ERROR` when the spec part is too large or not UTF-8), then
    what ``prepare`` raises, then what ``process`` raises. Every temporary file is closed
    (and so deleted).
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
    upload: _Upload[_P, _R] = _Upload(charset, prepare, process)
    parser = MultipartParser(
        params[b"boundary"],
        {
            "on_part_begin": upload.on_part_begin,
            "on_header_field": upload.on_header_field,
            "on_header_value": upload.on_header_value,
            "on_header_end": upload.on_header_end,
            "on_headers_finished": upload.on_headers_finished,
            "on_part_data": upload.on_part_data,
            "on_part_end": upload.on_part_end,
        },
    )
    received = 0
    try:
        try:
            async for chunk in chunks:
                received += len(chunk)
                if received > max_bytes:
                    raise too_large(max_bytes)
                if len(chunk) <= _SLICE:
                    parser.write(chunk)
                    await upload.flush()
                    continue
                view = memoryview(chunk)
                for i in range(0, len(view), _SLICE):
                    parser.write(bytes(view[i : i + _SLICE]))
                    await upload.flush()
            parser.finalize()
            if parser.state != MultipartState.END:  # no closing boundary: the body is cut short
                raise MultipartParseError("the body ends inside a part")
        except MultipartParseError as exc:
            raise (upload.error or _malformed()) from exc
        upload.check_complete()
    except asyncio.CancelledError:
        upload.abort()
        raise
    except BaseException:
        upload.abort()
        await upload.settle()
        raise
    return await upload.complete()
