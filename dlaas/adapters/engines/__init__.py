"""The container engines a job runs on: the Docker engine of one node
(`docker_engine.Deployer`) and a Docker Swarm reached through its manager
(`swarm_engine.SwarmEngine`), both adapters of `dlaas.domain.ports.ContainerEngine`."""
