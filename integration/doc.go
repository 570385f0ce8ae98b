// Package integration holds whole-system tests: the ingress, drainers and re-admitters
// against real NATS and Redis servers and a recording HTTP sink, in-process (scenarios) and
// as separate processes under faults. They start every server themselves on free ports.
package integration
