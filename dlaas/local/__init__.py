"""The platform on this machine: the servers `dlaas up` starts and stops (processes, etcd,
SeaweedFS, Redis, Docker engines, the local swarm), their state files and probes."""
