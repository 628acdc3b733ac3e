"""Manifests the API and CLI tests submit (importable from tests/unit and tests/integration)."""

MANIFEST = """
name: digits
learners: {learners}
cpus: 1
memory: 512MiB
data_stores:
  - id: platform
    type: s3
    training_data:
      container: digits-data
    training_results:
      container: {results}
    connection:
      access_key: someone
      password: s3cr3t-never-shown
framework:
  name: python
  version: "3.11"
  command: python3 train.py
"""
