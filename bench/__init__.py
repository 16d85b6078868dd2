"""Benchmarks of Session Lab, each runnable as a module from the repository's root.

    python -m bench.store          the session store against a floor, sqlite3 and real peers
                                   (results and how to read them: docs/benchmarks.md)
    python -m bench.lesson_speed   how long `pytest lessons/NN_topic` takes
"""
