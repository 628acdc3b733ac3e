"""What users and integrators run against the platform: the REST client, the typed gRPC
SDK and the `dlaas` command line."""
