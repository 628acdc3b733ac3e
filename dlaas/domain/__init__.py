"""The platform's pure model and rules: manifests, job status, errors, the etcd key layout,
the container contract, accounts, namespaces, hooks, metrics parsing and the ports (abstract
interfaces) the services implement. No I/O library, adapter or configuration is imported
here (the import-linter contracts in pyproject.toml)."""
