"""Result store: versioned Parquet tables and the DuckDB catalogue over them."""
from heterospec.store.parquet import SCHEMA_VERSION_KEY, read_parquet, write_parquet, versioned

__all__ = ["SCHEMA_VERSION_KEY", "read_parquet", "write_parquet", "versioned"]
