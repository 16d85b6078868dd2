"""Benchmarks for Session Lab's reference session store.

`python -m bench.store` measures the final lesson's SessionLog against a floor (the least a
JSON-lines log can do), a naive version, stdlib sqlite3 and, when installed with the `bench`
extra, two stores people use in practice. See docs/benchmarks.md for the results and how to
read them.
"""
