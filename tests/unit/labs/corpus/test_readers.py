"""Reading a corpus file: every format, the text-or-paragraphs rule, stable ids and one-line errors."""

import json

import pandas as pd
import pytest

from attnviz.labs.corpus import readers
from attnviz.labs.corpus.readers import read_texts


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def test_one_text_a_line(tmp_path):
    path = write(tmp_path, "c.txt", "first\nsecond\nthird\n\n")
    assert list(read_texts(path)) == [(0, "first"), (1, "second"), (2, "third")]


def test_empty_lines_past_the_first_block_are_skipped_and_keep_the_ids(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "FIRST_BLOCK", 8)  # the rule reads "a\nb\nc\nd": one text a line
    path = write(tmp_path, "c.txt", "a\nb\nc\nd\n\n  \ng\n")
    assert list(read_texts(path)) == [(0, "a"), (1, "b"), (2, "c"), (3, "d"), (6, "g")]


def test_one_line_without_a_newline(tmp_path):
    assert list(read_texts(write(tmp_path, "c.txt", "only one"))) == [(0, "only one")]


def test_paragraphs_when_the_first_block_has_a_blank_line_between_texts(tmp_path):
    path = write(tmp_path, "c.txt", "\nOne line\nand its next.\n\n\nTwo.\n  \nThree\nends")
    assert list(read_texts(path)) == [(0, "One line\nand its next."), (1, "Two."), (2, "Three\nends")]


def test_crlf_and_a_byte_order_mark(tmp_path):
    path = write(tmp_path, "c.txt", "\ufeffa\r\nb\r\n")
    assert list(read_texts(path)) == [(0, "a"), (1, "b")]
    path = write(tmp_path, "p.txt", "a\r\nb\r\n\r\nc\r\n")
    assert list(read_texts(path)) == [(0, "a\nb"), (1, "c")]


def test_unicode_text(tmp_path):
    texts = ["猫坐着 👍", "‮right-to-left", "naïve café"]
    path = write(tmp_path, "c.txt", "\n".join(texts))
    assert [t for _, t in read_texts(path)] == texts


def test_jsonl_skips_empty_texts_but_keeps_their_ids(tmp_path):
    lines = [{"text": "a"}, {"text": ""}, {"text": None}, {"text": "d", "other": 1}]
    path = write(tmp_path, "c.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")
    assert list(read_texts(path)) == [(0, "a"), (3, "d")]


def test_csv_with_quoted_newlines_and_other_columns(tmp_path):
    path = write(tmp_path, "c.csv", 'id,text\r\n1,"hello, ""world""\nagain"\r\n2,\r\n3,bye\r\n')
    assert list(read_texts(path)) == [(0, 'hello, "world"\nagain'), (2, "bye")]


def test_parquet_in_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "PARQUET_BATCH_ROWS", 2)
    path = tmp_path / "c.parquet"
    pd.DataFrame({"text": ["a", None, "", "d", "e"], "n": range(5)}).to_parquet(path, row_group_size=2)
    reader = read_texts(path)
    assert reader.size == 5
    assert list(reader) == [(0, "a"), (3, "d"), (4, "e")]
    assert reader.position == 5


def test_position_runs_to_the_size(tmp_path):
    reader = read_texts(write(tmp_path, "c.txt", "a\nbb\nccc\n"))
    assert next(reader) == (0, "a") and reader.position == 2
    assert list(reader) == [(1, "bb"), (2, "ccc")] and reader.position == reader.size == 9


@pytest.mark.parametrize(
    "name,content,fmt",
    [("e.txt", "", None), ("e.txt", "\n\n  \n", None), ("e.jsonl", "", None), ("e.csv", "text\n", None)],
)
def test_no_texts(tmp_path, name, content, fmt):
    assert list(read_texts(write(tmp_path, name, content), fmt)) == []


@pytest.mark.parametrize(
    "name,content,reason",
    [
        ("c.csv", "id,body\n1,x\n", 'no "text" column (its columns: id, body)'),
        ("c.jsonl", '{"body": "x"}\n', 'line 1 has no "text" field'),
        ("c.jsonl", '{"text": 3}\n', 'line 1\'s "text" is a int, not text'),
        ("c.jsonl", "{not json\n", "line 1 is not JSON"),
        ("c.txt", b"ok\n\xff\xfe\n", "not UTF-8 text"),
        ("c.bin", b"\x89PNG\r\n\x1a\n\0\0\0", "a binary file, not text"),
        ("c.parquet", b"not parquet at all", "not readable as Parquet"),
    ],
)
def test_bad_files_are_one_line_value_errors(tmp_path, name, content, reason):
    with pytest.raises(ValueError) as err:
        list(read_texts(write(tmp_path, name, content)))
    assert reason in str(err.value) and "\n" not in str(err.value)


def test_a_parquet_file_without_a_text_column(tmp_path):
    path = tmp_path / "c.parquet"
    pd.DataFrame({"body": ["x"]}).to_parquet(path)
    with pytest.raises(ValueError, match='no "text" column'):
        read_texts(path)


def test_a_line_longer_than_the_bound_is_refused_not_held(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "MAX_LINE_BYTES", 16)
    path = write(tmp_path, "c.txt", "short\n" + "x" * 40 + "\n")
    reader = read_texts(path)
    assert next(reader) == (0, "short")
    with pytest.raises(ValueError, match="line 2 is longer than 16 bytes"):
        next(reader)


def test_a_missing_file_and_an_unknown_format(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        read_texts(tmp_path / "absent.txt")
    with pytest.raises(ValueError, match="format must be one of"):
        read_texts(write(tmp_path, "c.txt", "a"), fmt="xml")
