"""A corpus file read text by text, in bounded memory: plain text, JSONL, CSV or Parquet.

Every reader yields ``(text_id, text)`` in the file's order. A text's id is its place in the file (a line of a
text file, a paragraph, a JSONL line, a CSV data row, a Parquet row, counted from 0), so an empty text is skipped
but never renumbers the texts after it: a resumed run and the page name the same text by the same id.

A plain text file holds one text a line, or paragraphs. Which, is decided from the file's first block
(:data:`FIRST_BLOCK` bytes): when a blank line there lies between two non-blank lines, the file is paragraphs
(texts separated by one or more blank lines, a paragraph's lines joined by "\\n"); otherwise every line is a text.
Lines end in "\\n" or "\\r\\n" (the "\\r" is dropped). JSONL holds one object a line with a string ``text`` field
(null or blank: an empty text); CSV has a header row naming a ``text`` column; Parquet a ``text`` column, read a
batch of rows at a time. Whatever the format, a file that is not UTF-8 text, a line longer than
:data:`MAX_LINE_BYTES` and a missing ``text`` column are a ValueError of one line naming the file.

:func:`read_texts` hands back a :class:`TextReader`: an iterator that also says how far through the file it is
(``position`` of ``size``: bytes, or rows for Parquet), which the corpus run turns into a time left.
"""

from __future__ import annotations

import codecs
import csv
import json
import os
from collections.abc import Iterator
from pathlib import Path

FORMATS = ("text", "jsonl", "csv", "parquet")
SUFFIXES = {
    ".txt": "text",
    ".text": "text",
    ".md": "text",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
FIRST_BLOCK = 64 * 1024  # bytes read to decide between one text a line and paragraphs
MAX_LINE_BYTES = 4 * 1024 * 1024  # a line (a JSONL record, a CSV row) longer than this is refused, not held
PARQUET_BATCH_ROWS = 1024  # rows read at a time from a Parquet file's row groups
TEXT_COLUMN = "text"


def detect_format(path: str | os.PathLike, fmt: str | None = None) -> str:
    """``fmt`` checked, or the format the file's suffix names ("text" for any suffix not in :data:`SUFFIXES`)."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
        return fmt
    return SUFFIXES.get(Path(path).suffix.lower(), "text")


class TextReader:
    """``(text_id, text)`` of a corpus file, in its order, empty texts skipped (see the module's docstring).

    position: how much of the file has been read (bytes; rows for Parquet); size: the whole (None if unknown);
    format: the format read."""

    def __init__(self, path: str | os.PathLike, fmt: str | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"{self.path}: no such file")
        self.format = detect_format(self.path, fmt)
        self.position = 0
        self.size: int | None = self.path.stat().st_size
        if self.format == "parquet":
            self._parquet = _open_parquet(self.path)
            self.size = self._parquet.metadata.num_rows
        else:
            _check_textual(self.path)
        self._texts = self._read()

    def __iter__(self) -> Iterator[tuple[int, str]]:
        return self

    def __next__(self) -> tuple[int, str]:
        return next(self._texts)

    def _read(self) -> Iterator[tuple[int, str]]:
        if self.format == "parquet":
            texts = self._parquet_texts()
        elif self.format == "jsonl":
            texts = self._jsonl_texts()
        elif self.format == "csv":
            texts = self._csv_texts()
        elif _is_paragraphs(self.path):
            texts = self._paragraphs()
        else:
            texts = ((i, line) for i, line in enumerate(self._lines()))
        for text_id, text in texts:
            if text and text.strip():
                yield text_id, text

    def _raw_lines(self) -> Iterator[bytes]:
        """The file's lines as bytes, each at most :data:`MAX_LINE_BYTES`, ``position`` moved past each."""
        with open(self.path, "rb") as file:
            number = 0
            while line := file.readline(MAX_LINE_BYTES + 1):
                number += 1
                if len(line) > MAX_LINE_BYTES:
                    raise ValueError(
                        f"{self.path}: line {number} is longer than {MAX_LINE_BYTES:,} bytes; split it into shorter texts"
                    )
                self.position += len(line)
                yield line

    def _lines(self) -> Iterator[str]:
        """The file's lines as text, their "\\n" or "\\r\\n" removed."""
        for number, line in enumerate(self._raw_lines(), 1):
            yield self._decode(line, number).rstrip("\n").removesuffix("\r")

    def _decode(self, line: bytes, number: int) -> str:
        try:
            return line.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(
                f"{self.path}: line {number} is not UTF-8 text ({err.reason} at byte {err.start})"
            ) from None

    def _paragraphs(self) -> Iterator[tuple[int, str]]:
        paragraph: list[str] = []
        text_id = 0
        for line in self._lines():
            if line.strip():
                paragraph.append(line)
            elif paragraph:
                yield text_id, "\n".join(paragraph)
                text_id, paragraph = text_id + 1, []
        if paragraph:
            yield text_id, "\n".join(paragraph)

    def _jsonl_texts(self) -> Iterator[tuple[int, str]]:
        for number, line in enumerate(self._lines(), 1):
            if not line.strip():
                yield number - 1, ""
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{self.path}: line {number} is not JSON ({err.msg})") from None
            if not isinstance(record, dict) or TEXT_COLUMN not in record:
                raise ValueError(f'{self.path}: line {number} has no "{TEXT_COLUMN}" field; each line needs one')
            text = record[TEXT_COLUMN]
            if text is not None and not isinstance(text, str):
                raise ValueError(f'{self.path}: line {number}\'s "{TEXT_COLUMN}" is a {type(text).__name__}, not text')
            yield number - 1, text or ""

    def _csv_texts(self) -> Iterator[tuple[int, str]]:
        decoded = (self._decode(line, number) for number, line in enumerate(self._raw_lines(), 1))
        limit = csv.field_size_limit()
        csv.field_size_limit(MAX_LINE_BYTES)
        try:
            rows = csv.reader(decoded)
            header = next(rows, None)
            if header is None or TEXT_COLUMN not in header:
                columns = ", ".join(header or []) or "none"
                raise ValueError(f'{self.path}: no "{TEXT_COLUMN}" column (its columns: {columns})')
            column = header.index(TEXT_COLUMN)
            for row_id, row in enumerate(rows):
                yield row_id, row[column] if column < len(row) else ""
        except csv.Error as err:
            raise ValueError(f"{self.path}: not readable as CSV ({err})") from None
        finally:
            csv.field_size_limit(limit)

    def _parquet_texts(self) -> Iterator[tuple[int, str]]:
        row_id = 0
        for batch in self._parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[TEXT_COLUMN]):
            for text in batch.column(0).to_pylist():
                if text is not None and not isinstance(text, str):
                    raise ValueError(f'{self.path}: row {row_id}\'s "{TEXT_COLUMN}" is not text')
                self.position = row_id + 1
                yield row_id, text or ""
                row_id += 1


def read_texts(path: str | os.PathLike, fmt: str | None = None) -> TextReader:
    """``(text_id, text)`` of every non-empty text of the corpus file ``path`` (format ``fmt``, else from its
    suffix), streamed: at most a line (or a Parquet batch) held at a time. ValueError (one line) for a file that
    is missing, not text, not UTF-8, or has no ``text`` column."""
    return TextReader(path, fmt)


def _check_textual(path: Path) -> None:
    """ValueError when the file's first block holds a NUL byte (a binary file, or UTF-16) or is not UTF-8."""
    try:
        with open(path, "rb") as file:
            head = file.read(FIRST_BLOCK)
    except OSError as err:
        raise ValueError(f"{path}: cannot be read ({err.strerror})") from None
    if b"\0" in head:
        raise ValueError(f"{path}: a binary file, not text (a NUL byte in its first {len(head):,} bytes)")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)  # a character cut at the block's end is fine
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None


def _is_paragraphs(path: Path) -> bool:
    """Whether the first block of a text file has a blank line between two non-blank ones."""
    with open(path, "rb") as file:
        block = file.read(FIRST_BLOCK)
    lines = block.split(b"\n")
    if len(block) == FIRST_BLOCK:
        lines.pop()  # the last piece may be a line cut at the block's end
    seen_text = blank_after_text = False
    for line in lines:
        if line.strip():
            if blank_after_text:
                return True
            seen_text = True
        elif seen_text:
            blank_after_text = True
    return False


def _open_parquet(path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as err:
        raise ValueError(f"{path}: not readable as Parquet ({str(err).splitlines()[0]})") from None
    names = parquet.schema_arrow.names
    if TEXT_COLUMN not in names:
        raise ValueError(f'{path}: no "{TEXT_COLUMN}" column (its columns: {", ".join(names) or "none"})')
    return parquet
