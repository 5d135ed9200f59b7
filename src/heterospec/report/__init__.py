"""The ``report`` stage: the paper's figures and tables drawn from the DuckDB views (PNG, SVG and the rows as CSV).

    python -m heterospec.report figure table3 --run ci --out results/ci/figures
"""
