-- One database per node of docker-compose.yml; each node migrates its own at start-up.
CREATE DATABASE xnode_100;
CREATE DATABASE xnode_200;
CREATE DATABASE xnode_300;
