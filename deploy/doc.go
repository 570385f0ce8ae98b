// Package deploy holds no code: it is the home of sluice's deployment files
// (docker-compose.yml, Dockerfile, k8s/, prometheus/, grafana/) and of deploy_test.go,
// which checks them with `go test` (`make test`) since no Docker engine or cluster is
// needed to catch a broken YAML file, a dashboard querying a metric that does not exist,
// or a Deployment without probes. See README.md in this directory.
package deploy
