"""Fixed, versioned pyarrow schemas and atomic Parquet I/O.

Every table heterospec writes has a schema whose metadata carries a name and version.
Readers reject a file that does not match, naming the file and the column.
"""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from heterospec.errors import UserError

SCHEMA_VERSION_KEY = b"heterospec.schema"


def versioned(name: str, version: int, fields: list[pa.Field]) -> pa.Schema:
    """A schema tagged ``name/vN`` in its metadata."""
    return pa.schema(fields, metadata={SCHEMA_VERSION_KEY: f"{name}/v{version}".encode()})


def write_parquet(rows: list[dict] | pa.Table, path: str | Path, schema: pa.Schema) -> Path:
    """Write rows (dicts or a table) with ``schema``; atomic (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(rows, pa.Table):
        table = rows.select(schema.names).cast(schema)
    else:
        table = pa.Table.from_pylist(list(rows), schema=schema)
    table = table.replace_schema_metadata(schema.metadata)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def _load(path: Path) -> pa.Table:
    if not path.exists():
        raise UserError(f"{path}: file not found")
    try:
        return pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise UserError(f"{path}: not a readable Parquet file ({e})") from None


def check_columns(path: Path, table: pa.Table, fields, any_int_width: bool = False) -> None:
    """Each of ``fields`` (pyarrow fields) is a column of ``table`` with its type, else one line naming it."""
    for f in fields:
        if f.name not in table.schema.names:
            raise UserError(f"{path}: column '{f.name}' missing (expected {f.type})")
        got = table.schema.field(f.name).type
        if not (got.equals(f.type) or (any_int_width and pa.types.is_integer(got) and pa.types.is_integer(f.type))):
            raise UserError(f"{path}: column '{f.name}' has type {got}, expected {f.type}")


def read_columns(path: str | Path, fields) -> pa.Table:
    """A Parquet file written by another stage, checked only for the columns the reader uses
    (extra columns are fine, integer widths interchangeable)."""
    path = Path(path)
    table = _load(path)
    check_columns(path, table, fields, any_int_width=True)
    return table


def read_parquet(path: str | Path, schema: pa.Schema) -> pa.Table:
    """Read a Parquet file and check it against ``schema``: tag, column names and types."""
    path = Path(path)
    table = _load(path)
    want = (schema.metadata or {}).get(SCHEMA_VERSION_KEY)
    got = (table.schema.metadata or {}).get(SCHEMA_VERSION_KEY)
    if want is not None and got != want:
        raise UserError(f"{path}: schema {got.decode() if got else 'untagged'}, expected {want.decode()}")
    check_columns(path, table, schema)
    extra = [n for n in table.schema.names if n not in schema.names]
    if extra:
        raise UserError(f"{path}: unexpected column '{extra[0]}'")
    return table
