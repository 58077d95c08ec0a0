"""``arbor bench``: Arbor's checkpoints measured against reprocessing the prompt.

Qt-free. It drives the real engine, conversation service and SQLite on a
scratch database: ``runner.run_benchmarks`` runs every scenario and returns a
``results.Report``; ``markdown`` and ``report_json`` turn it into text.
"""
