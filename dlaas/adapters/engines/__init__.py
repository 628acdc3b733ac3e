"""The container engines a job runs on: the Docker engine of one node
(`docker_engine.Deployer`) and a Docker Swarm reached through its manager
(`swarm_engine.SwarmEngine`, one node's view in `swarm_node`, its pure service specs in
`swarm_spec`), both adapters of `dlaas.domain.ports.ContainerEngine`; `connect` builds the
engines of the platform's nodes for every service."""
