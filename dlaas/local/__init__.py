"""The platform on this machine: what `dlaas up` starts and stops, one module per concern.

processes (spawn, wait, stop by PID, free ports) · etcd · seaweedfs (S3) · redis · dockerd
(the machine's Docker engine) · host (routes, interfaces, mounts) · swarm (an N-node Docker
Swarm in network namespaces) · state (the state directory and its pid records) · probes
(readiness checks) · components (what runs; `dlaas status`) · platform (`dlaas up`/`down`)
· firewall (host rules fencing job containers in) · images (the job image, built here) ·
supervisor (restarts what dies).
"""
