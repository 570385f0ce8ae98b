//go:build !race

package drain_test

const raceOn = false
